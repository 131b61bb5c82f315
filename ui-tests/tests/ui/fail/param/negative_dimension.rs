use stackscan::SubLayer;
use stackscan_ui_tests::{Cfg, Hidden};

#[derive(SubLayer)]
#[sublayer(config = Cfg, carry = Hidden)]
struct Mlp<T> {
    #[param(shape = [-4, cfg.d], shard = 1)]
    up: T,
}

fn main() {}
