// Every field of an inputs struct is an input.
use stackscan::Inputs;
use stackscan_ui_tests::Cfg;

#[derive(Inputs)]
#[inputs(config = Cfg)]
struct Batch<T> {
    #[input(shape = [cfg.d], dtype = i32)]
    tokens: T,
    labels: T,
}

fn main() {}
