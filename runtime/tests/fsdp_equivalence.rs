//! The FSDP training step equals the unsharded single-device reference, for every option set
//! ({prefetch off, on, on + deferred} × {unroll 1, 2}) on 1, 2, 4 and 8 devices, for an
//! inhomogeneous toy block `[A, A, A, B]` whose kinds have different weight shapes (one
//! sharded along a non-major dimension, one replicated).

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

mod common;

use std::rc::Rc;

use common::fsdp::{assert_close, check_every_option_set, fixture, run_step};
use common::graph::{Arg, Data, Rng};
use stackscan::fsdp::{InputSpec, LayerKind, ParamSpec, StackModel};
use stackscan::plan::{PlanOptions, Stack};
use stackscan::{DType, TensorType};

const D: i64 = 8;
const F: i64 = 16;
const B: i64 = 2;

/// `[A, A, A, B] × repeat`: A is a gated MLP (`W1 [D, F]` sharded on 0, `W2 [F, D]` sharded on
/// its minor dimension 1, a replicated gain), B a residual sine layer (`U [D, D]`).
fn toy(repeat: usize) -> StackModel {
    let f32 = DType::F32;
    let a = LayerKind {
        name: "A".into(),
        params: vec![
            ParamSpec::sharded("w1", &[D, F], f32, 0),
            ParamSpec::sharded("w2", &[F, D], f32, 1),
            ParamSpec::replicated("gain", &[D], f32),
        ],
        forward: Rc::new(|h, w| {
            let inner = h.matmul(&w[0])?.tanh()?.matmul(&w[1])?;
            h.add(&inner.mul(&w[2].broadcast_to(h.dims())?)?)
        }),
    };
    let b = LayerKind {
        name: "B".into(),
        params: vec![ParamSpec::sharded("u", &[D, D], f32, 0)],
        forward: Rc::new(|h, w| h.add(&h.matmul(&w[0])?.sin()?)),
    };
    StackModel {
        stack: Stack::blocks(&["A", "A", "A", "B"], repeat).unwrap(),
        kinds: vec![a, b],
        activation: TensorType::new(f32, [B, D]),
        inputs: vec![
            InputSpec {
                name: "x".into(),
                ty: TensorType::new(f32, [B, D]),
            },
            InputSpec {
                name: "y".into(),
                ty: TensorType::new(f32, [B, D]),
            },
        ],
        outer_params: vec![
            ParamSpec::sharded("embed", &[D, D], f32, 0),
            ParamSpec::sharded("head", &[D, D], f32, 1),
            ParamSpec::replicated("bias", &[D], f32),
        ],
        pre: Rc::new(|inp, w| inp[0].matmul(&w[0])),
        post: Rc::new(|h, inp, w| {
            let out = h.matmul(&w[1])?.add(&w[2].broadcast_to(h.dims())?)?;
            out.sub(&inp[1])?.square()?.mean(&[0, 1])
        }),
    }
}

fn global_inputs(max_devices: usize) -> Vec<Arg> {
    let mut rng = Rng::new(99);
    let n = (B * D) as usize * max_devices;
    let ty = TensorType::new(DType::F32, [B * max_devices as i64, D]);
    vec![
        Arg {
            ty: ty.clone(),
            data: Data::F(rng.uniform(-1.0, 1.0, n)),
        },
        Arg {
            ty,
            data: Data::F(rng.uniform(-1.0, 1.0, n)),
        },
    ]
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
        check_every_option_set(&client, &m, &fx, n);
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
            assert_close(&format!("gradient {j}"), g, r, 1e-5);
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
