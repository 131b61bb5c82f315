//! The memory estimate on graphs and a toy stack small enough to count by hand; each expected
//! byte count is worked out beside it (f32: 4 bytes an element).

use super::fusion::Rule;
use super::*;
use crate::builder::Scope;
use crate::dtype::DType;
use crate::fsdp::toy::residual_tanh;
use crate::plan::PlanOptions;
use crate::types::TensorType;

fn f32(dims: &[i64]) -> TensorType {
    TensorType::new(DType::F32, dims)
}

#[test]
fn a_working_set_is_the_peak_of_the_buffers_written_and_not_yet_read_for_the_last_time() {
    let s = Scope::new("f");
    let x = s.param(f32(&[4, 4])); // 64 B, a parameter: not counted
    // a = x·x, fused into nothing (the product reads it): written, 64 B, live until the dot.
    let a = x.mul(&x).unwrap();
    // b = a @ x: 64 B, written while a is still live: 128 B at the product.
    let b = a.matmul(&x).unwrap();
    // tanh(b) + b, one fusion: reads b, writes the 64 B result (live to the end) while b is
    // live: 128 B again; a is dead by then.
    let c = b.tanh().unwrap().add(&b).unwrap();
    let f = s.finish(&[c]).unwrap();
    for rule in [Rule::Shared, Rule::SingleConsumer] {
        assert_eq!(working_set(&f, rule).unwrap(), 128, "{rule:?}");
    }
    // Two products of x live at once, then their sum: 64 + 64 + 64 B at the add.
    let s = Scope::new("g");
    let x = s.param(f32(&[4, 4]));
    let p = x.matmul(&x).unwrap();
    let q = p.matmul(&x).unwrap();
    let r = p.add(&q).unwrap();
    let g = s.finish(&[r]).unwrap();
    assert_eq!(working_set(&g, Rule::Shared).unwrap(), 192);
}

#[test]
fn the_toy_stacks_state_and_loop_buffers_are_counted_by_hand() {
    // Three layers of one sharded [8, 8] weight on 2 devices, activations [2, 8].
    let model = residual_tanh(|h| Ok(h.clone()));
    let e = memory_estimate(&model, 2, PlanOptions::prefetch_deferred(), 1, Rule::Shared).unwrap();
    // Each device's shard of a layer: [4, 8] = 128 B, three layers.
    assert_eq!(e.weights, 384);
    assert_eq!(e.optimizer, 768);
    assert_eq!(e.gradients, 384);
    // Three saved [2, 8] inputs.
    assert_eq!(e.saved, 3 * 64);
    // The running layer's full [8, 8] weight and the next one prefetched.
    assert_eq!(e.gathered, 2 * 256);
    // One layer's full gradient waiting for its deferred reduce-scatter.
    assert_eq!(e.unreduced, 256);
    // A layer's VJP returns its full weight gradient and its input's: at least 256 + 64 B.
    assert!(e.layer >= 320, "{e:?}");
    // The two [2, 8] inputs at least.
    assert!(e.outer >= 128, "{e:?}");
    assert_eq!(e.total(), e.parts().iter().map(|(_, b)| b).sum::<u64>());

    // Without prefetch one layer's weights are gathered at a time; without deferral no
    // gradient waits; two micro-batches add the running gradient sum and a second copy of
    // the inputs.
    let base = memory_estimate(&model, 2, PlanOptions::baseline(), 2, Rule::Shared).unwrap();
    assert_eq!(base.gathered, 256);
    assert_eq!(base.unreduced, 0);
    assert_eq!(base.gradients, 768);
    assert_eq!(base.outer - e.outer, 128);
    assert!(memory_estimate(&model, 0, PlanOptions::baseline(), 1, Rule::Shared).is_err());
    assert!(memory_estimate(&model, 2, PlanOptions::baseline(), 0, Rule::Shared).is_err());
}
