// A constant `repeat` whose layers overflow: rejected by `const` evaluation, not at run time.
use stackscan::layer_stack;
use stackscan_ui_tests::{Attn, Mlp};

#[layer_stack(block = [Mlp, Attn], repeat = usize::MAX)]
struct Model;

fn main() {}
