// `Mlp`, a path to it and `Mlp<Tensor>` are one sub-layer kind; `<<` in a count is a shift.
use stackscan::{LayerStack, Tensor, layer_stack};
use stackscan_ui_tests::Mlp;

#[layer_stack(block = [Mlp, stackscan_ui_tests::Mlp, Mlp<Tensor>], repeat = 1 << 1, prefetch_fsdp_weights)]
struct Model;

fn main() {
    assert_eq!(Model::layers(&stackscan_ui_tests::CFG).unwrap(), 6);
    assert_eq!(Model::kinds(&stackscan_ui_tests::Cfg { d: 4, layers: 2 }).len(), 1);
}
