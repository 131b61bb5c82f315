// The depth is written once, on the `#[layer_stack]` type; the stack field names it only.
use stackscan::Model;
use stackscan::model::Layers;
use stackscan_ui_tests::{Batch, Cfg, Mlps};

#[derive(Model)]
#[model(config = Cfg, inputs = Batch)]
struct Tiny<T> {
    #[param(shape = [cfg.d, cfg.d], shard = 0)]
    embed: T,
    #[stack(layers = cfg.layers)]
    layers: Layers<Mlps>,
}

fn main() {}
