// A sub-module with its own config type needs `#[module(config = <expr>)]` to project onto it.
use stackscan::{Module, SubLayer};
use stackscan_ui_tests::{Cfg, Hidden};

#[derive(Clone)]
struct Dims {
    n: i64,
}

#[derive(Module)]
#[module(config = Dims)]
struct Part<T> {
    #[param(shape = [cfg.n], replicated)]
    gain: T,
}

#[derive(SubLayer)]
#[sublayer(config = Cfg, carry = Hidden)]
struct Block<T> {
    #[module]
    part: Part<T>,
}

fn main() {}
