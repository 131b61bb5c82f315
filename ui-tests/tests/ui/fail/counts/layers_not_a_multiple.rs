use stackscan::layer_stack;
use stackscan_ui_tests::{Attn, Mlp};

#[layer_stack(block = [Mlp, Mlp, Mlp, Attn], layers = 10)]
struct Model;

fn main() {}
