// `inputs = ()`: the inputs are a `#[derive(Inputs)]` struct, named by its path.
use stackscan::Model;
use stackscan::model::Layers;
use stackscan_ui_tests::{Cfg, TwoMlps};

#[derive(Model)]
#[model(config = Cfg, inputs = ())]
struct Tiny<T> {
    #[param(shape = [cfg.d, cfg.d], shard = 0)]
    embed: T,
    #[stack]
    layers: Layers<TwoMlps>,
}

fn main() {}
