use stackscan::SubLayer;
use stackscan_ui_tests::{Cfg, Hidden};

#[derive(SubLayer)]
#[sublayer(config = Cfg, carry = Hidden)]
enum Mlp<T> {
    Up(T),
}

fn main() {}
