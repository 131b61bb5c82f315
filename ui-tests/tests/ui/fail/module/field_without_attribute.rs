// A sub-module field without `#[module]`: the derive does not guess from the type.
use stackscan::SubLayer;
use stackscan_ui_tests::{Cfg, Hidden, Proj};

#[derive(SubLayer)]
#[sublayer(config = Cfg, carry = Hidden)]
struct Block<T> {
    proj: Proj<T>,
}

fn main() {}
