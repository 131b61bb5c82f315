// The toy block `[A, A, A, B]`: plan notation and kinds in order of first appearance.
use stackscan::LayerStack;
use stackscan::layer_stack;
use stackscan_ui_tests::{Attn, Cfg, Mlp};

#[layer_stack(
    block = [Mlp, Mlp, Mlp, Attn],
    repeat = 1,
    prefetch_fsdp_weights,
    defer_grad_reduce_scatter,
)]
struct Toy;

// The precision policy a stack declares is its options'.
#[layer_stack(block = [Mlp, Attn], repeat = 1, precision = "bf16-reduce-bf16")]
struct Mixed;

fn main() {
    let (forward, backward) = Toy::plan_notation(&stackscan_ui_tests::CFG).unwrap();
    assert_eq!(forward, "[Mlp 0, Mlp 1] → [Mlp 2] → [attention]");
    assert_eq!(backward, "[attention] → [Mlp 2] → [Mlp 1] → [Mlp 0]");
    let kinds = Toy::kinds(&Cfg { d: 4, layers: 2 });
    let names: Vec<&str> = kinds.iter().map(|k| k.name.as_str()).collect();
    assert_eq!(names, ["Mlp", "attention"]);
    assert_eq!(Toy::layers(&stackscan_ui_tests::CFG).unwrap(), 4);
    assert_eq!(Toy::OPTIONS.precision, stackscan::Precision::F32);
    assert_eq!(Mixed::OPTIONS.precision, stackscan::Precision::BF16_REDUCE_BF16);
}
