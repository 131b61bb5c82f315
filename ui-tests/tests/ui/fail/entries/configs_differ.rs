use stackscan::layer::Forward;
use stackscan::{Result, SubLayer, Tensor, layer_stack};
use stackscan_ui_tests::{Hidden, Mlp};

#[derive(Clone)]
struct ConvCfg;

#[derive(SubLayer)]
#[sublayer(config = ConvCfg, carry = Hidden)]
struct Conv<T> {
    #[param(shape = [4, 4], shard = 0)]
    w: T,
}

impl Forward for Conv<Tensor> {
    fn forward(&self, _: &ConvCfg, h: &Tensor) -> Result<Tensor> {
        h.matmul(&self.w)
    }
}

#[layer_stack(block = [Mlp, Conv], repeat = 2)]
struct Model;

fn main() {}
