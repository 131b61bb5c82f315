use stackscan::layer_stack;
use stackscan_ui_tests::{Attn, Mlp};

#[layer_stack(block = [Mlp, Attn], prefetch_fsdp_weights)]
struct Model;

fn main() {}
