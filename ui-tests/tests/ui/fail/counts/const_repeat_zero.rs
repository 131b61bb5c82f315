use stackscan::layer_stack;
use stackscan_ui_tests::{Attn, Mlp};

const BLOCKS: usize = 0;

#[layer_stack(block = [Mlp, Attn], repeat = BLOCKS)]
struct Model;

fn main() {}
