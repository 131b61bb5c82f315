// A `#[module]` field whose type derives nothing.
use stackscan::SubLayer;
use stackscan_ui_tests::{Cfg, Hidden};

struct Plain<T>(T);

#[derive(SubLayer)]
#[sublayer(config = Cfg, carry = Hidden)]
struct Block<T> {
    #[module]
    part: Plain<T>,
}

fn main() {}
