use stackscan::{SubLayer, layer_stack};
use stackscan_ui_tests::{Cfg, Hidden, Mlp};

// One mistake in the sub-layer: the stack naming it adds no errors of its own.
#[derive(SubLayer)]
#[sublayer(carry = Hidden)]
struct Conv<T> {
    #[param(shape = [4], shard = 0)]
    w: T,
}

impl stackscan::Forward for Conv<stackscan::Tensor> {
    fn forward(&self, _: &Cfg, h: &stackscan::Tensor) -> stackscan::Result<stackscan::Tensor> {
        Ok(h.clone())
    }
}

#[layer_stack(block = [Mlp, Conv], repeat = 2)]
struct Model;

fn main() {}
