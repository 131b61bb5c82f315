use stackscan::layer_stack;
use stackscan_ui_tests::{Attn, Mlp};

#[layer_stack(block = [Mlp, Attn], repeat = 2, unroll = 1, unroll = 2)]
struct Model;

fn main() {}
