use stackscan::{LayerStack, SubLayer, layer_stack};
use stackscan_ui_tests::{Cfg, Hidden, Mlp};

// One mistake in the sub-layer: the stack using it and the call below still type-check.
#[derive(SubLayer)]
#[sublayer(config = Cfg, carry = Hidden)]
struct Conv<T> {
    #[param(shape = [4, 4], shard = 5)]
    w: T,
}

impl stackscan::Forward for Conv<stackscan::Tensor> {
    fn forward(&self, _: &Cfg, h: &stackscan::Tensor) -> stackscan::Result<stackscan::Tensor> {
        Ok(h.clone())
    }
}

#[layer_stack(block = [Mlp, Conv], repeat = 2, unroll = 0)]
struct Model;

fn main() {
    let _ = Model::kinds(&Cfg { d: 4, layers: 2 });
}
