use stackscan::layer::Forward;
use stackscan::{Result, SubLayer, Tensor, layer_stack};
use stackscan_ui_tests::{Attn, Cfg, Hidden};

// Another sub-layer with the kind name `attention`, reached through an alias.
#[derive(SubLayer)]
#[sublayer(config = Cfg, carry = Hidden, name = "attention")]
struct Conv<T> {
    #[param(shape = [4, 4], shard = 0)]
    w: T,
}

impl Forward for Conv<Tensor> {
    fn forward(&self, _: &Cfg, h: &Tensor) -> Result<Tensor> {
        h.matmul(&self.w)
    }
}

type Wide<T> = Conv<T>;

#[layer_stack(block = [Attn, Wide], repeat = 2)]
struct Model;

fn main() {}
