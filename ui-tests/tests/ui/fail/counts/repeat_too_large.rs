use stackscan::layer_stack;
use stackscan_ui_tests::{Attn, Mlp};

#[layer_stack(block = [Mlp, Attn], repeat = 18446744073709551615)]
struct Model;

fn main() {}
