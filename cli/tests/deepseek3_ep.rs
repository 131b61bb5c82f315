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
//!
//! Also here, on the same config: `dlhs_transpose_rhs` on against off (reference and the
//! expert-parallel step), and [`Trainer`] on both 2-D meshes against an unsharded trainer
//! over several steps.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan_runtime::testing as common;

use common::fsdp::{assert_close, check_on_mesh, fixture};
use common::graph::{Arg, Data};
use stackscan::fsdp::Adam;
use stackscan::plan::PlanOptions;
use stackscan::{DType, TensorType, layer_stack};
use stackscan_models::deepseek3::{DeepSeek3Config, Dense, MoeLayer, model, synthetic_batch};
use stackscan_runtime::Mesh;
use stackscan_runtime::train::{HostInput, Trainer};

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

/// `dlhs_transpose_rhs` changes how the backward forms the experts' input gradients, not
/// their values: the unsharded reference gives the same loss and every gradient with it on
/// and off (rtol 1e-5), and the expert-parallel step with it on (2 × 4, prefetch + deferred)
/// equals the reference with it off.
#[test]
fn dlhs_transpose_rhs_gives_the_same_loss_and_gradients() {
    let client = common::cpu_client(DEVICES);
    let off = DeepSeek3Config::small(3, 1, 1);
    let on = DeepSeek3Config {
        dlhs_transpose_rhs: true,
        ..off
    };
    let fx_off = fixture(
        &client,
        &model::<EpDeepSeek3>(&off).unwrap(),
        inputs(&off),
        DEVICES,
        13,
    );
    let fx_on = fixture(
        &client,
        &model::<EpDeepSeek3>(&on).unwrap(),
        inputs(&on),
        DEVICES,
        13,
    );
    assert_close("loss", &[fx_on.loss], &[fx_off.loss], 1e-5);
    assert_eq!(fx_on.grads.len(), fx_off.grads.len());
    for (j, (a, b)) in fx_on.grads.iter().zip(&fx_off.grads).enumerate() {
        assert_close(&format!("gradient {j}"), a, b, 1e-5);
    }
    let ep = on.with_expert_parallel(DEVICES, 4).unwrap();
    check_on_mesh(
        &client,
        &model::<EpDeepSeek3>(&ep).unwrap(),
        &fx_off,
        &ep.expert_mesh.mesh().unwrap(),
        &[PlanOptions::prefetch_deferred()],
    );
}

/// Device `d`'s tokens and labels: rows `d·rows .. (d+1)·rows` of the global batch.
fn device_inputs(tokens: &[i32], labels: &[i32], devices: usize) -> Vec<Vec<HostInput>> {
    let per = tokens.len() / devices;
    (0..devices)
        .map(|d| {
            let rows = d * per..(d + 1) * per;
            vec![
                HostInput::I32(tokens[rows.clone()].to_vec()),
                HostInput::I32(labels[rows].to_vec()),
            ]
        })
        .collect()
}

/// The training driver on a 2-D mesh: [`Trainer`] with the expert-parallel model on 2 × 4
/// (prefetch + deferred) and 4 × 2 (prefetch) trains like an unsharded trainer (one device,
/// the whole batch, the same initial weights from the same seed): the loss of each of four
/// steps on one batch equals the reference's (rtol 1e-5), so the sharded Adam state and
/// the co-sharded and expert-sharded weights are updated as a whole model would be, and it
/// falls.
#[test]
fn trainer_on_2x4_and_4x2_meshes_follows_the_unsharded_trainer() {
    const STEPS: usize = 4;
    let client = common::cpu_client(DEVICES);
    let adam = Adam {
        lr: 1e-2,
        ..Adam::default()
    };
    let plain = DeepSeek3Config::small(3, 1, 1);
    let (tokens, labels) = synthetic_batch(&plain, DEVICES as i64, 3);
    let whole = DeepSeek3Config::small(3, 1, DEVICES as i64);
    let one = Mesh::new(&client, "fsdp", 1).unwrap();
    let mut reference = Trainer::new(
        &client,
        &one,
        &model::<EpDeepSeek3>(&whole).unwrap(),
        PlanOptions::baseline(),
        adam,
        17,
    )
    .unwrap();
    let batch = device_inputs(&tokens, &labels, 1);
    let expected: Vec<f64> = (0..STEPS)
        .map(|_| f64::from(reference.step(&batch).unwrap().loss))
        .collect();
    assert!(
        expected[STEPS - 1] < expected[0] - 0.05,
        "the reference does not learn: {expected:?}"
    );
    for (ep, options) in [
        (4, PlanOptions::prefetch_deferred()),
        (2, PlanOptions::prefetch()),
    ] {
        let c = plain.with_expert_parallel(DEVICES, ep).unwrap();
        let mesh = Mesh::for_layout(&client, &c.expert_mesh.mesh().unwrap()).unwrap();
        let mut trainer = Trainer::new(
            &client,
            &mesh,
            &model::<EpDeepSeek3>(&c).unwrap(),
            options,
            adam,
            17,
        )
        .unwrap();
        let batch = device_inputs(&tokens, &labels, DEVICES);
        let losses: Vec<f64> = (0..STEPS)
            .map(|_| f64::from(trainer.step(&batch).unwrap().loss))
            .collect();
        let what = format!("{} × {} trainer", c.expert_mesh.fsdp, c.expert_mesh.expert);
        for (i, (l, r)) in losses.iter().zip(&expected).enumerate() {
            assert_close(
                &format!("{what}: loss of step {}", i + 1),
                &[*l],
                &[*r],
                1e-5,
            );
        }
        assert_eq!(trainer.steps(), STEPS, "{what}: a step was skipped");
        println!("{what}: losses {losses:?}, reference {expected:?}");
    }
}
