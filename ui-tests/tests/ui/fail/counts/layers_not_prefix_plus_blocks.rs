use stackscan::layer_stack;
use stackscan_ui_tests::{Attn, Mlp};

#[layer_stack(prefix = [Mlp, Mlp, Mlp], block = [Attn, Attn], layers = 8)]
struct Model;

fn main() {}
