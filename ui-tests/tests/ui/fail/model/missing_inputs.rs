// A model without `inputs = …`.
use stackscan::Model;
use stackscan::model::Layers;
use stackscan_ui_tests::{Cfg, TwoMlps};

#[derive(Model)]
#[model(config = Cfg)]
struct Tiny<T> {
    #[param(shape = [cfg.d, cfg.d], shard = 0)]
    embed: T,
    #[stack]
    layers: Layers<TwoMlps>,
}

fn main() {}
