use stackscan::layer_stack;
use stackscan_ui_tests::{Attn, Mlp};

// 600000 is below the limit, but 600000 blocks of 2 are not.
#[layer_stack(block = [Mlp, Attn], repeat = 600000)]
struct Model;

fn main() {}
