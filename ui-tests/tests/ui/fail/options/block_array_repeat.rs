use stackscan::layer_stack;

// An array-repeat list: a hint to write the entries out, not a parser error.
#[layer_stack(block = [Mlp; 4], repeat = 1)]
struct Model;

fn main() {}
