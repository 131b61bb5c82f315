//! Expert parallelism: the DeepSeek-V3-style stack on 8 devices as `fsdp × expert` = 2 × 4 and
//! 4 × 2 equals the unsharded single-device reference (loss and every gradient, f32, rtol
//! 1e-5) with prefetch off, on, and on + deferred reduce-scatter.
//!
//! The reference runs the plain model (every expert local, no exchange); the expert-parallel
//! model has the same weights but gathers each expert bank over `fsdp` only and exchanges the
//! tokens with `all_to_all` over `expert`. Capacity never drops a token, so routing is the
//! reference's; a token sent to the wrong rank, a wrong expert order after the gather, or a
//! gradient reduced over the wrong axis changes the gradients. The config is the smallest
//! with a dense layer and a run of MoE layers (1 dense + 2 MoE, 8 tokens a device).

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan_runtime::testing as common;

use common::fsdp::{check_on_mesh, fixture};
use common::graph::{Arg, Data};
use stackscan::plan::PlanOptions;
use stackscan::{DType, TensorType, layer_stack};
use stackscan_examples::deepseek3::{DeepSeek3Config, Dense, MoeLayer, model, synthetic_batch};

/// One dense layer, then MoE layers: the config's depth (3 here, two MoE layers).
#[layer_stack(prefix = [Dense], block = [MoeLayer], layers = cfg.layers)]
#[derive(Debug)]
struct EpDeepSeek3;

const DEVICES: usize = 8;

fn inputs(c: &DeepSeek3Config) -> Vec<Arg> {
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
fn expert_parallel_step_equals_reference_on_2x4_and_4x2_meshes() {
    let client = common::cpu_client(DEVICES);
    let plain = DeepSeek3Config::small(3, 1, 1);
    let fx = fixture(
        &client,
        &model::<EpDeepSeek3>(&plain).unwrap(),
        inputs(&plain),
        DEVICES,
        11,
    );
    let options = [
        PlanOptions::baseline(),
        PlanOptions::prefetch(),
        PlanOptions::prefetch_deferred(),
    ];
    for ep in [4, 2] {
        let c = plain.with_expert_parallel(DEVICES, ep).unwrap();
        let m = model::<EpDeepSeek3>(&c).unwrap();
        check_on_mesh(&client, &m, &fx, &c.expert_mesh.mesh().unwrap(), &options);
    }
}
