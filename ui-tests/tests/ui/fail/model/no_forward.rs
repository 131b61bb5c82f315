// A declared model without `ModelForward` cannot be built.
use stackscan::model::{Layers, stack_model};
use stackscan::{Model, Tensor};
use stackscan_ui_tests::{Batch, Cfg, TwoMlps};

#[derive(Model)]
#[model(config = Cfg, inputs = Batch)]
struct Tiny<T> {
    #[param(shape = [cfg.d, cfg.d], shard = 0)]
    embed: T,
    #[stack]
    layers: Layers<TwoMlps>,
}

fn main() {
    let _ = stack_model::<Tiny<Tensor>>(&Cfg { d: 4, layers: 2 });
}
