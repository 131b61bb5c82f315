use stackscan::layer_stack;

#[layer_stack(repeat = 2)]
struct Model;

fn main() {}
