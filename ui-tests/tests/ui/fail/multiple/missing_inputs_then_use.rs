// The model misses `inputs = …`: its `ModelForward` impl cannot match inputs it does not
// know (one error per method, naming what is missing); its build adds none.
use stackscan::model::{Layers, ModelForward, stack_model};
use stackscan::{Model, Result, Tensor};
use stackscan_ui_tests::{Batch, CFG, Cfg, TwoMlps};

#[derive(Model)]
#[model(config = Cfg)]
struct Tiny<T> {
    #[param(shape = [cfg.d, cfg.d], shard = 0)]
    embed: T,
    #[stack]
    layers: Layers<TwoMlps>,
}

impl ModelForward for Tiny<Tensor> {
    fn embed(&self, _: &Cfg, x: &Batch<Tensor>) -> Result<Tensor> {
        self.embed.take(&x.tokens, 0)
    }

    fn loss(&self, _: &Cfg, h: &Tensor, _: &Batch<Tensor>) -> Result<Tensor> {
        h.sum_all()
    }
}

fn main() {
    let _ = stack_model::<Tiny<Tensor>>(&CFG);
}
