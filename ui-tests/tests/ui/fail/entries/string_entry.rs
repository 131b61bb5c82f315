use stackscan::layer_stack;

#[layer_stack(block = [Mlp, "Attn"], repeat = 2)]
struct Model;

fn main() {}
