use stackscan::layer_stack;
use stackscan_ui_tests::{Attn, Mlp};

#[derive(Clone)]
struct Other;

// `config = Type` must be the config of every entry: one error, on the first entry.
#[layer_stack(config = Other, block = [Mlp, Attn], repeat = 2)]
struct Model;

fn main() {}
