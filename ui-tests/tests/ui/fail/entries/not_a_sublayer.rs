use stackscan::layer_stack;
use stackscan_ui_tests::{Attn, Mlp};

struct Conv<T>(T);

#[layer_stack(block = [Mlp, Conv, Attn], repeat = 2)]
struct Model;

fn main() {}
