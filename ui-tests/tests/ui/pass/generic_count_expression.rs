// A count with generic arguments is one expression: its inner comma does not end it.
use stackscan::{LayerStack, layer_stack};
use stackscan_ui_tests::{Attn, Mlp};

struct Depth<A, B>(A, B);

impl<A, B> Depth<A, B> {
    const N: usize = 3;
}

#[layer_stack(block = [Mlp, Attn], repeat = Depth::<u8, Vec<u16>>::N, unroll = 1)]
struct Model;

fn main() {
    assert_eq!(Model::layers(&stackscan_ui_tests::CFG).unwrap(), 6);
}
