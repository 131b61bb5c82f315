// The model has no stack field; its `ModelForward` impl and its build add no errors.
use stackscan::model::{ModelForward, stack_model};
use stackscan::{Model, Result, Tensor};
use stackscan_ui_tests::{Batch, CFG, Cfg};

#[derive(Model)]
#[model(config = Cfg, inputs = Batch)]
struct Tiny<T> {
    #[param(shape = [cfg.d, cfg.d], shard = 0)]
    embed: T,
}

impl ModelForward for Tiny<Tensor> {
    fn embed(&self, _: &Cfg, x: &Batch<Tensor>) -> Result<Tensor> {
        self.embed.take(&x.tokens, 0)
    }

    fn loss(&self, _: &Cfg, h: &Tensor, x: &Batch<Tensor>) -> Result<Tensor> {
        stackscan::nn::cross_entropy(h, &x.tokens)
    }
}

fn main() {
    let _ = stack_model::<Tiny<Tensor>>(&CFG);
}
