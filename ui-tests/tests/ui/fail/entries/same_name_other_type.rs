use stackscan::layer_stack;
use stackscan_ui_tests::Mlp;

mod other {
    // Another struct called `Mlp`: not the same sub-layer.
    pub use stackscan_ui_tests::Attn as Mlp;
}

#[layer_stack(block = [Mlp, other::Mlp], repeat = 2)]
struct Model;

fn main() {}
