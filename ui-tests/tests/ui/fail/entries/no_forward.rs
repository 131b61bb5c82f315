use stackscan::{SubLayer, layer_stack};
use stackscan_ui_tests::{Cfg, Hidden, Mlp};

#[derive(SubLayer)]
#[sublayer(config = Cfg, carry = Hidden)]
struct Conv<T> {
    #[param(shape = [4, 4], shard = 0)]
    w: T,
}

#[layer_stack(block = [Mlp, Conv], repeat = 2)]
struct Model;

fn main() {}
