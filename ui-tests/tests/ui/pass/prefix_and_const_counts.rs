// DeepSeek-style: a prefix, then a block; counts and unroll as `const` expressions.
use stackscan::plan::PlanOptions;
use stackscan::{LayerStack, layer_stack};
use stackscan_ui_tests::{Attn, Mlp};

const DENSE: usize = 3;
const LAYERS: usize = DENSE + 58;
const UNROLL: usize = 2;

#[layer_stack(prefix = [Mlp, Mlp, Mlp], block = [Attn], layers = LAYERS, prefetch_fsdp_weights = true, defer_grad_reduce_scatter, unroll = UNROLL)]
struct DeepSeek;

#[layer_stack(block = [Mlp], repeat = LAYERS - 1, unroll = 1)]
struct Deep;

fn main() {
    let stack = DeepSeek::stack(&stackscan_ui_tests::CFG).unwrap();
    assert_eq!((stack.len(), stack.repeat()), (61, 58));
    assert_eq!(DeepSeek::OPTIONS, PlanOptions::prefetch_deferred());
    let forward = DeepSeek::plan_notation(&stackscan_ui_tests::CFG).unwrap().0;
    assert_eq!(forward, "[Mlp 0, Mlp 1] → [Mlp 2] → [attention 3 … attention 59] → [attention 60]");
    assert_eq!(Deep::layers(&stackscan_ui_tests::CFG).unwrap(), 60);
    assert_eq!(Deep::OPTIONS, PlanOptions::baseline().with_unroll(1));
}
