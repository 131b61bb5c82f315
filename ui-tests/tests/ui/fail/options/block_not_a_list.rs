use stackscan::layer_stack;

// The block is not a list: only that error, not a "missing `block`" as well.
#[layer_stack(block = Mlp, repeat = 2)]
struct Model;

fn main() {}
