// `#[module(...)]` on a sub-layer struct: it marks a field.
use stackscan::SubLayer;
use stackscan_ui_tests::{Cfg, Hidden};

#[derive(SubLayer)]
#[sublayer(config = Cfg, carry = Hidden)]
#[module(config = Cfg)]
struct Block<T> {
    #[param(shape = [cfg.d], replicated)]
    gain: T,
}

fn main() {}
