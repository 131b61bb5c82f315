//! Expert parallelism for the Qwen3.5-style hybrid: one block `[GDN, GDN, GDN, attention]`
//! with its gated MoE FFN on 8 devices as `fsdp × expert` = 2 × 4 equals the unsharded
//! single-device reference (loss and every gradient, f32, the derived tolerance of
//! [`check_on_mesh`]), prefetch on with the deferred reduce-scatter.
//!
//! The reference runs the plain model (every expert local, no exchange); the expert-parallel
//! model has the same weights but gathers each expert bank over `fsdp` only and exchanges the
//! tokens with `all_to_all` over `expert`. Capacity never drops a token (4 × a balanced load,
//! 16 experts top-4), so routing is the reference's.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan_runtime::testing as common;

use common::fsdp::{check_on_mesh, fixture};
use common::graph::{Arg, Data};
use stackscan::plan::PlanOptions;
use stackscan::{DType, TensorType};
use stackscan_models::gdn_layer::GdnForm;
use stackscan_models::qwen35::{EXPERT_BANKS, Qwen35Config, Qwen35Stack, model, synthetic_batch};

const DEVICES: usize = 8;

fn inputs(c: &Qwen35Config) -> Vec<Arg> {
    let (tokens, labels) = synthetic_batch(c, DEVICES as i64, 3);
    let ty = TensorType::new(DType::I32, [DEVICES as i64, c.seq]);
    vec![
        Arg {
            ty: ty.clone(),
            data: Data::I(tokens),
        },
        Arg {
            ty,
            data: Data::I(labels),
        },
    ]
}

#[test]
fn expert_parallel_step_equals_reference_on_a_2x4_mesh() {
    let client = common::cpu_client(DEVICES);
    let plain = Qwen35Config {
        layers: 4,
        ..Qwen35Config::small(1, GdnForm::Chunked(4))
    };
    let fx = fixture(
        &client,
        &model::<Qwen35Stack>(&plain).unwrap(),
        inputs(&plain),
        DEVICES,
        11,
    );
    let c = plain.with_expert_parallel(DEVICES, 4).unwrap();
    let m = model::<Qwen35Stack>(&c).unwrap();
    // Each expert rank keeps its experts: the banks are gathered over `fsdp` only.
    let banks: Vec<_> = m
        .kinds
        .iter()
        .flat_map(|k| &k.params)
        .filter(|p| p.name.starts_with(EXPERT_BANKS))
        .collect();
    assert_eq!(
        banks.len(),
        3 * m.kinds.len(),
        "gate, up and down of every kind's MoE"
    );
    assert!(banks.iter().all(|p| p.gathered_over.is_some()), "{banks:?}");
    check_on_mesh(
        &client,
        &m,
        &fx,
        &c.expert_mesh.mesh().unwrap(),
        &[PlanOptions::prefetch_deferred()],
    );
}
