use stackscan::layer_stack;
use stackscan_ui_tests::{Attn, Mlp};

#[layer_stack(block = [Mlp, Attn], repeat = 2, defer_grad_reduce_scatter)]
struct Model;

fn main() {}
