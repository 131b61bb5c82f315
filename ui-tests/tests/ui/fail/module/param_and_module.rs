// A field marked both a parameter and a sub-module.
use stackscan::SubLayer;
use stackscan_ui_tests::{Cfg, Hidden, Proj};

#[derive(SubLayer)]
#[sublayer(config = Cfg, carry = Hidden)]
struct Block<T> {
    #[param(shape = [cfg.d], replicated)]
    #[module]
    proj: Proj<T>,
}

fn main() {}
