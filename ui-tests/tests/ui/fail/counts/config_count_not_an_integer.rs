// `layers = cfg` reads the whole config, not its depth field.
use stackscan::layer_stack;
use stackscan_ui_tests::Mlp;

#[layer_stack(block = [Mlp], layers = cfg)]
struct Model;

fn main() {}
