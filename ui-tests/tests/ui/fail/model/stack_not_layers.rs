// The stack field names a sub-layer, not `Layers<S>` of a `#[layer_stack]` type.
use stackscan::Model;
use stackscan_ui_tests::{Batch, Cfg, Mlp};

#[derive(Model)]
#[model(config = Cfg, inputs = Batch)]
struct Tiny<T> {
    #[param(shape = [cfg.d, cfg.d], shard = 0)]
    embed: T,
    #[stack]
    layers: Mlp<T>,
}

fn main() {}
