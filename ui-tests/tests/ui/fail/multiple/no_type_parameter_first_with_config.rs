use stackscan::{SubLayer, layer_stack};
use stackscan_ui_tests::{Cfg, Hidden, Mlp};

// The broken sub-layer comes first: with `config = Type` the stack names no entry as a type,
// so again only the derive's own error shows.
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

#[layer_stack(config = Cfg, block = [Conv, Mlp], repeat = 2)]
struct Model;

fn main() {}
