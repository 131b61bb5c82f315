use stackscan::SubLayer;
use stackscan_ui_tests::{Cfg, Hidden};

#[derive(SubLayer)]
#[sublayer(config = Cfg, carry = Hidden)]
struct Mlp<T> {
    #[param(shape = [4], replicated, frozen)]
    gain: T,
}

fn main() {}
