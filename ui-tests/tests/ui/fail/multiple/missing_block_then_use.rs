use stackscan::{LayerStack, layer_stack};

// The stack misses its block; using the model adds no errors of its own.
#[layer_stack(repeat = 2)]
struct Model;

fn main() {
    let _ = Model::plan_notation(&());
    let _ = Model::layers(&());
}
