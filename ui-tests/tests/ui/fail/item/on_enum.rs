use stackscan::layer_stack;

#[layer_stack(block = [stackscan_ui_tests::Mlp], repeat = 2)]
enum Model {}

fn main() {}
