use stackscan::SubLayer;
use stackscan_ui_tests::{Cfg, Hidden};

#[derive(SubLayer)]
#[sublayer(config = Cfg, carry = Hidden)]
struct Mlp<T> {
    #[param(shape = [cfg.d, 0], shard = 0)]
    up: T,
}

fn main() {}
