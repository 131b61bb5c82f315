// A misspelt sub-module option.
use stackscan::SubLayer;
use stackscan_ui_tests::{Cfg, Hidden, Proj};

#[derive(SubLayer)]
#[sublayer(config = Cfg, carry = Hidden)]
struct Block<T> {
    #[module(cfg = cfg.clone())]
    proj: Proj<T>,
}

fn main() {}
