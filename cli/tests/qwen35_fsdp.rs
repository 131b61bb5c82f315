//! The Qwen3.5-style hybrid, `[GDN, GDN, GDN, attention]` and `[attention, GDN, GDN, GDN]`
//! over two blocks with the MoE FFN: the FSDP step against the unsharded single-device
//! reference, loss and every gradient at rtol 1e-5 in the norm-wise sense of
//! [`assert_close`] (f32; each case prints its norm-wise and worst-element deviation and
//! where its time went: lowering, XLA compile, run).
//!
//! One global batch of 8 sequences is split over the devices (the GDN core is batched over
//! the sequences, so the program does not grow with them), so one reference per block order
//! serves every device count. Every case is its own program (the device count sets the
//! shard shapes, the options the loops), and compiling one takes most of a case's time, so CI
//! runs six of them that together cover every option set ({prefetch off, on, on + deferred} ×
//! {unroll 1, 2}) and 2, 4 and 8 devices over the two block orders; the whole matrix (every
//! option set on 1, 2, 4 and 8 devices for both orders, 48 steps) is `#[ignore]`d, run with
//! `cargo test -p stackscan-cli --test qwen35_fsdp -- --ignored`.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use std::time::Instant;

use stackscan_runtime::testing as common;

use common::fsdp::{Deviation, Fixture, assert_matches_reference, fixture, run_compiled};
use common::graph::{Arg, CompiledOnMesh, Data};
use stackscan::fsdp::train_step;
use stackscan::plan::PlanOptions;
use stackscan::{Axis, DType, LayerStack, TensorType};
use stackscan_models::gdn_layer::GdnForm;
use stackscan_models::qwen35::{
    Qwen35AttentionFirst, Qwen35Config, Qwen35Stack, model, synthetic_batch,
};

const SEQ: i64 = 8;
/// Sequences in the global batch.
const ROWS: usize = 8;

/// The tiny config's structure at sizes that compile quickly.
fn config(batch_per_device: i64) -> Qwen35Config {
    Qwen35Config::small(batch_per_device, GdnForm::Chunked(4))
}

/// Tokens and labels for `rows` sequences.
fn inputs(rows: usize) -> Vec<Arg> {
    let (tokens, labels) = synthetic_batch(&config(1), rows as i64, 3);
    let ty = TensorType::new(DType::I32, [rows as i64, SEQ]);
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

/// The reference on one device for the global batch.
fn reference<S: LayerStack<Config = Qwen35Config>>(client: &stackscan_runtime::Client) -> Fixture {
    let m = model::<S>(&config(ROWS as i64)).unwrap();
    fixture(client, &m, inputs(ROWS), 1, 11)
}

/// The step of `S` on each `(devices, options)` equals the reference; returns the worst
/// gradient deviation.
fn steps_equal_reference<S: LayerStack<Config = Qwen35Config>>(
    cases: &[(usize, PlanOptions)],
) -> Deviation {
    let name = std::any::type_name::<S>()
        .rsplit("::")
        .next()
        .unwrap_or("stack");
    let client = common::cpu_client(8);
    let started = Instant::now();
    let fx = reference::<S>(&client);
    eprintln!(
        "{}: reference (lower, compile, run) {:.1} s",
        name,
        started.elapsed().as_secs_f64()
    );
    assert!(fx.loss.is_finite() && fx.loss > 0.0, "loss {}", fx.loss);
    for (j, r) in fx.grads.iter().enumerate() {
        assert!(
            r.iter().any(|&x| x != 0.0),
            "reference gradient {j} is zero"
        );
    }
    let mut worst = Deviation::default();
    for &(n, o) in cases {
        let m = model::<S>(&config((ROWS / n) as i64)).unwrap();
        let what = format!("{}, {n} devices, {o:?}", name);
        let axis = Axis {
            name: "fsdp".into(),
            size: n,
        };
        let t0 = Instant::now();
        let step = train_step(&m, o, &axis).unwrap();
        let t1 = Instant::now();
        let exe = CompiledOnMesh::new(&client, &step.program, n);
        let t2 = Instant::now();
        let (losses, grads) = run_compiled(&exe, &m, &fx, &step.program, n);
        let t3 = Instant::now();
        let d = assert_matches_reference(&what, &losses, &grads, &fx);
        eprintln!(
            "{what}: equals the reference, norm-wise {:.2e}, worst element {:.2e} of its \
             gradient's scale; lower {:.2} s, compile {:.2} s, run {:.2} s",
            d.normwise,
            d.elementwise,
            (t1 - t0).as_secs_f64(),
            (t2 - t1).as_secs_f64(),
            (t3 - t2).as_secs_f64()
        );
        worst = worst.max(d);
    }
    eprintln!(
        "{}: worst over {} cases: norm-wise {:.2e}, element {:.2e} of the scale",
        name,
        cases.len(),
        worst.normwise,
        worst.elementwise
    );
    worst
}

/// Every option set on 8, 4, 2 and 1 devices (the most sharded first: a cut-short run has
/// checked those).
fn every_case() -> Vec<(usize, PlanOptions)> {
    let mut v = Vec::new();
    for n in [8, 4, 2, 1] {
        for base in [
            PlanOptions::baseline(),
            PlanOptions::prefetch(),
            PlanOptions::prefetch_deferred(),
        ] {
            for unroll in [1, 2] {
                v.push((n, base.with_unroll(unroll)));
            }
        }
    }
    v
}

#[test]
fn hybrid_step_equals_reference_on_2_4_8_devices() {
    steps_equal_reference::<Qwen35Stack>(&[
        (2, PlanOptions::baseline().with_unroll(1)),
        (4, PlanOptions::prefetch().with_unroll(2)),
        (8, PlanOptions::prefetch_deferred().with_unroll(1)),
    ]);
}

#[test]
fn attention_first_step_equals_reference_on_2_4_8_devices() {
    steps_equal_reference::<Qwen35AttentionFirst>(&[
        (2, PlanOptions::prefetch_deferred().with_unroll(2)),
        (4, PlanOptions::baseline().with_unroll(2)),
        (8, PlanOptions::prefetch().with_unroll(1)),
    ]);
}

#[test]
#[ignore = "24 step programs, long; CI runs the six above"]
fn hybrid_step_equals_reference_for_every_option_set_and_device_count() {
    steps_equal_reference::<Qwen35Stack>(&every_case());
}

#[test]
#[ignore = "24 step programs, long; CI runs the six above"]
fn attention_first_step_equals_reference_for_every_option_set_and_device_count() {
    steps_equal_reference::<Qwen35AttentionFirst>(&every_case());
}
