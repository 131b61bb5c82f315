use stackscan::{SubLayer, layer_stack};
use stackscan_ui_tests::{Cfg, Hidden, Mlp};

// One mistake in the sub-layer (no type parameter): the stack naming it, which cannot see
// the struct, adds no errors of its own.
#[derive(SubLayer)]
#[sublayer(config = Cfg, carry = Hidden)]
struct Conv {
    #[param(shape = [4], shard = 0)]
    w: f32,
}

impl stackscan::Forward for Conv {
    fn forward(&self, _: &Cfg, h: &stackscan::Tensor) -> stackscan::Result<stackscan::Tensor> {
        Ok(h.clone())
    }
}

#[layer_stack(block = [Mlp, Conv], repeat = 2)]
struct Model;

fn main() {}
