// The block pattern belongs to the `#[layer_stack]` type, not the stack field.
use stackscan::Model;
use stackscan::model::Layers;
use stackscan_ui_tests::{Batch, Cfg, TwoMlps};

#[derive(Model)]
#[model(config = Cfg, inputs = Batch)]
struct Tiny<T> {
    #[param(shape = [cfg.d, cfg.d], shard = 0)]
    embed: T,
    #[stack(block = [Mlp])]
    layers: Layers<TwoMlps>,
}

fn main() {}
