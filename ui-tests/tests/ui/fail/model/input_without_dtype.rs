// An input's element type is not guessed.
use stackscan::Inputs;
use stackscan_ui_tests::Cfg;

#[derive(Inputs)]
#[inputs(config = Cfg)]
struct Batch<T> {
    #[input(shape = [cfg.d])]
    tokens: T,
}

fn main() {}
