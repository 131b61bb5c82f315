// A constant `layers` beyond a stack's limit: rejected by `const` evaluation.
use stackscan::layer_stack;
use stackscan_ui_tests::Mlp;

const LAYERS: usize = 1 << 30;

#[layer_stack(block = [Mlp], layers = LAYERS)]
struct Model;

fn main() {}
