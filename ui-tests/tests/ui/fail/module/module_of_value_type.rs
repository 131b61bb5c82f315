// `#[module]` on a tensor field.
use stackscan::SubLayer;
use stackscan_ui_tests::{Cfg, Hidden};

#[derive(SubLayer)]
#[sublayer(config = Cfg, carry = Hidden)]
struct Block<T> {
    #[module]
    w: T,
}

fn main() {}
