// The stack field is not a parameter.
use stackscan::Model;
use stackscan::model::Layers;
use stackscan_ui_tests::{Batch, Cfg, TwoMlps};

#[derive(Model)]
#[model(config = Cfg, inputs = Batch)]
struct Tiny<T> {
    #[param(shape = [cfg.d, cfg.d], shard = 0)]
    embed: T,
    #[param(shape = [cfg.d], replicated)]
    #[stack]
    layers: Layers<TwoMlps>,
}

fn main() {}
