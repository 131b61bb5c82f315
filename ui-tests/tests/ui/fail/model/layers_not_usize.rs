// `layers = …` is the depth, a `usize`; `cfg.d` is an `i64` width.
use stackscan::Model;
use stackscan::model::Layers;
use stackscan_ui_tests::{Batch, Cfg, TwoMlps};

#[derive(Model)]
#[model(config = Cfg, inputs = Batch)]
struct Tiny<T> {
    #[param(shape = [cfg.d, cfg.d], shard = 0)]
    embed: T,
    #[stack(layers = cfg.d)]
    layers: Layers<TwoMlps>,
}

fn main() {}
