use stackscan::layer_stack;
use stackscan_ui_tests::Mlp;

#[layer_stack(crate = "not a path", block = [Mlp], repeat = 2)]
struct Model;

fn main() {}
