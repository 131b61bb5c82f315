use stackscan::layer_stack;

#[layer_stack(block = [], repeat = 2)]
struct Model;

fn main() {}
