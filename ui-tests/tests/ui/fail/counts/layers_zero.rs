use stackscan::layer_stack;
use stackscan_ui_tests::{Attn, Mlp};

#[layer_stack(block = [Mlp, Attn], layers = 0)]
struct Model;

fn main() {}
