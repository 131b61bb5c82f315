use stackscan::layer_stack;
use stackscan_ui_tests::{Attn, Mlp};

const LAYERS: usize = 10;

#[layer_stack(block = [Mlp, Mlp, Mlp, Attn], layers = LAYERS)]
struct Model;

fn main() {}
