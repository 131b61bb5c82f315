use stackscan::layer_stack;
use stackscan_ui_tests::{Attn, Mlp};

const UNROLL: usize = 3;

#[layer_stack(block = [Mlp, Attn], repeat = 2, unroll = UNROLL)]
struct Model;

fn main() {}
