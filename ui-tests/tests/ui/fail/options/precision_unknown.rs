use stackscan::layer_stack;
use stackscan_ui_tests::{Attn, Mlp};

#[layer_stack(block = [Mlp, Attn], repeat = 2, precision = "fp16")]
struct Model;

fn main() {}
