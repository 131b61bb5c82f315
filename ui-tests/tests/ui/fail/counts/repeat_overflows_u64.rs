use stackscan::layer_stack;
use stackscan_ui_tests::Mlp;

#[layer_stack(block = [Mlp], repeat = 99999999999999999999999)]
struct Model;

fn main() {}
