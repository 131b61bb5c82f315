//! The FSDP training step equals the unsharded single-device reference, for every option set
//! ({prefetch off, on, on + deferred} × {unroll 1, 2}) on 1, 2, 4 and 8 devices, for an
//! inhomogeneous toy block `[A, A, A, B]` whose kinds have different weight shapes (one
//! sharded along a non-major dimension, one replicated).

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan_runtime::testing as common;

use common::fsdp::{assert_close, check_every_option_set, fixture, run_step};
use common::graph::Arg;
use stackscan::fsdp::StackModel;
use stackscan::plan::PlanOptions;
use stackscan::{DType, TensorType};
use stackscan_models::toy::{self, ToyConfig};

const D: i64 = 8;
const B: i64 = 2;

/// `[A, A, A, B] × repeat` built with the run-time API (see `stackscan_models::toy`).
fn toy(repeat: usize) -> StackModel {
    toy::hand_built(&ToyConfig::small(), repeat).unwrap()
}

fn global_inputs(max_devices: usize) -> Vec<Arg> {
    common::graph::uniform_rows(99, B * max_devices as i64, D)
}

fn check_all(model: &StackModel, devices: &[usize]) {
    let max = *devices.iter().max().unwrap();
    let client = common::cpu_client(max);
    for &n in devices {
        // The global batch is the same for every device count: n shards of max/n rows each.
        let mut m = model.clone();
        let per = B * (max / n) as i64;
        m.activation = TensorType::new(DType::F32, [per, D]);
        for i in &mut m.inputs {
            i.ty = TensorType::new(DType::F32, [per, D]);
        }
        let fx = fixture(&client, &m, global_inputs(max), n, 5);
        let d = check_every_option_set(&client, &m, &fx, n);
        eprintln!(
            "{n} devices, every option set: worst norm-wise deviation {:.2e}, worst element {:.2e} of its gradient's scale",
            d.normwise, d.elementwise
        );
    }
}

#[test]
fn toy_block_equals_reference_on_1_2_4_8_devices() {
    check_all(&toy(1), &[1, 2, 4, 8]);
}

#[test]
fn repeated_toy_blocks_use_the_block_loop_and_still_agree() {
    check_all(&toy(3), &[2, 4]);
}

/// A prefix before a repeated inhomogeneous block (DeepSeek's dense prefix, Qwen's mixed
/// block): `[B] + [A, A, B] × 3`, so the prefix's groups, the block loop and the peeled last
/// block (forward) and first block (backward) all appear in one plan.
#[test]
fn prefix_then_repeated_mixed_blocks_agree() {
    let mut m = toy(1);
    // Kinds are numbered in order of first appearance: B (in the prefix), then A.
    m.stack = stackscan::plan::Stack::with_prefix(&["B"], &["A", "A", "B"], 3).unwrap();
    m.kinds.reverse();
    let plan = stackscan::plan::Plan::new(&m.stack, PlanOptions::prefetch_deferred()).unwrap();
    assert_eq!(
        plan.forward.notation(&m.stack),
        "[B0] → {[A0] → [A1] → [B]} × 2 → [A0] → [A1] → [B]"
    );
    check_all(&m, &[2, 4]);
}

/// A reduce-scatter replaced by a slice of the unreduced gradient (what a plain reshard does)
/// must fail the comparison: the check above is sensitive to the "off by the FSDP size" bug.
#[test]
fn slicing_instead_of_reduce_scatter_is_caught() {
    use stackscan::fsdp::{GradientReduction, train_step_with};
    let n = 4;
    let client = common::cpu_client(n);
    let mut m = toy(1);
    m.activation = TensorType::new(DType::F32, [B, D]);
    let fx = fixture(&client, &m, global_inputs(n), n, 5);
    let axis = stackscan::Axis {
        name: "fsdp".into(),
        size: n,
    };
    let wrong = train_step_with(
        &m,
        PlanOptions::prefetch_deferred(),
        &axis,
        GradientReduction::SliceUnreduced,
    )
    .unwrap();
    let (_, grads) = common::fsdp::run_program(&client, &m, &fx, &wrong.program, n);
    let caught = std::panic::catch_unwind(|| {
        for (j, (g, r)) in grads.iter().zip(&fx.grads).enumerate() {
            assert_close(&format!("gradient {j}"), g, r, fx.rtol);
        }
    });
    assert!(
        caught.is_err(),
        "sliced gradients passed the reference comparison"
    );
    // The sharded weight gradients are off; the replicated ones (psum) are not affected.
    let right = run_step(&client, &m, &fx, PlanOptions::prefetch_deferred(), n).1;
    let differs = |j: usize| {
        grads[j]
            .iter()
            .zip(&right[j])
            .any(|(a, b)| (a - b).abs() > 1e-3)
    };
    assert!(
        differs(0) && differs(3),
        "embedding and w1 gradients must differ when sliced"
    );
}
