use stackscan::layer_stack;
use stackscan_ui_tests::Mlp;

#[layer_stack(config = 3, block = [Mlp], repeat = 2)]
struct Model;

fn main() {}
