use stackscan::SubLayer;
use stackscan_ui_tests::{Cfg, Hidden};

#[derive(SubLayer)]
#[sublayer(config = Cfg, carry = Hidden)]
struct Mlp<T> {
    #[param(shape = [4, 8], shard = 2)]
    up: T,
    #[param(replicated)]
    gain: T,
}

fn main() {}
