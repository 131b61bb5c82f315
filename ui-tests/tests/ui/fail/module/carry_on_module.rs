// A module is a part of a layer: it has no carry.
use stackscan::Module;
use stackscan_ui_tests::{Cfg, Hidden};

#[derive(Module)]
#[module(config = Cfg, carry = Hidden)]
struct Part<T> {
    #[param(shape = [cfg.d], replicated)]
    gain: T,
}

fn main() {}
