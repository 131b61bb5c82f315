//! Non-finite steps and bad optimizer settings: a step whose loss or gradients are not
//! all finite leaves every weight and moment as it was (later steps match a trainer that never
//! saw it) and is reported under either policy; hyper-parameters and weight types the trainer
//! cannot use are refused before the model is lowered.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan_runtime::testing as common;

use std::cell::Cell;
use std::rc::Rc;

use stackscan::fsdp::{Adam, InputSpec, LayerKind, ParamSpec, StackModel};
use stackscan::plan::{PlanOptions, Stack};
use stackscan::{DType, TensorType};
use stackscan_models::toy::{self, ToyConfig};
use stackscan_runtime::testing::train::ADAM;
use stackscan_runtime::train::{HostInput, NonFinitePolicy, Progress, Trainer};
use stackscan_runtime::{Client, Error, Mesh};

/// The target's directory for tests, where
/// [`cached_cpu_client`](stackscan_runtime::testing::cached_cpu_client) keeps its cache.
const TARGET_TMP: &str = env!("CARGO_TARGET_TMPDIR");

/// Device `d`'s `x` and `y` (rows of 8, two per device), varying with `seed`.
fn batch(devices: usize, seed: usize) -> Vec<Vec<HostInput>> {
    common::train::batch(devices, 2, 16, seed)
}

/// `batch(devices, 0)` with element `i` of device `d`'s input `k` set to `value`.
fn poisoned(devices: usize, d: usize, k: usize, i: usize, value: f32) -> Vec<Vec<HostInput>> {
    let mut b = batch(devices, 0);
    if let HostInput::F32(v) = &mut b[d][k] {
        v[i] = value;
    }
    b
}

fn trainer(client: &Client, mesh: &Mesh, m: &StackModel, policy: NonFinitePolicy) -> Trainer {
    Trainer::new(client, mesh, m, PlanOptions::prefetch_deferred(), ADAM, 7)
        .unwrap()
        .on_non_finite(policy)
}

/// Losses of `steps` good steps; equal to the bit for two trainers in the same state.
fn good_losses(t: &mut Trainer, steps: usize) -> Vec<u32> {
    (0..steps)
        .map(|s| {
            let report = t.step(&batch(2, s + 1)).unwrap();
            assert!(!report.skipped && report.loss.is_finite(), "{report:?}");
            report.loss.to_bits()
        })
        .collect()
}

/// The default policy: a NaN input, an infinite label and an input so large that the squared
/// error overflows each give `Error::NonFinite` and change nothing. Before the check the NaN
/// step returned `Ok(NaN)` and every later loss was NaN.
#[test]
fn a_non_finite_loss_is_an_error_and_changes_nothing() {
    let client = common::cached_cpu_client(2, TARGET_TMP);
    let mesh = Mesh::new(&client, "fsdp", 2).unwrap();
    let m = toy::hand_built(&ToyConfig::small(), 1).unwrap();
    let mut fresh = trainer(&client, &mesh, &m, NonFinitePolicy::Error);
    let mut hit = trainer(&client, &mesh, &m, NonFinitePolicy::Error);
    let first = good_losses(&mut fresh, 1);
    assert_eq!(good_losses(&mut hit, 1), first);
    let bad = [
        poisoned(2, 1, 0, 3, f32::NAN),
        poisoned(2, 0, 1, 9, f32::INFINITY),
        poisoned(2, 1, 0, 0, 1e30),
    ];
    for b in &bad {
        let err = hit.step(b).unwrap_err();
        assert!(
            matches!(err, Error::NonFinite { step: 2, loss } if !loss.is_finite()),
            "{err:?}"
        );
    }
    assert_eq!(hit.skipped_steps(), 3);
    assert_eq!(hit.steps(), 1, "a skipped step advanced Adam's step count");
    assert_eq!(good_losses(&mut hit, 4), good_losses(&mut fresh, 4));
    assert_eq!((hit.steps(), fresh.skipped_steps()), (5, 0));
}

/// `NonFinitePolicy::Skip`: the same bad steps are reported as skipped and counted, and
/// training goes on as if they had not been given.
#[test]
fn skipped_steps_are_counted_and_change_nothing() {
    let client = common::cached_cpu_client(2, TARGET_TMP);
    let mesh = Mesh::new(&client, "fsdp", 2).unwrap();
    let m = toy::hand_built(&ToyConfig::small(), 1).unwrap();
    let mut fresh = trainer(&client, &mesh, &m, NonFinitePolicy::Skip);
    let mut hit = trainer(&client, &mesh, &m, NonFinitePolicy::Skip);
    for (s, b) in [
        poisoned(2, 0, 0, 15, f32::NEG_INFINITY),
        poisoned(2, 1, 1, 2, f32::NAN),
    ]
    .iter()
    .enumerate()
    {
        let before = hit.checkpoint(Progress::default()).unwrap();
        let report = hit.step(b).unwrap();
        assert!(report.skipped && !report.loss.is_finite(), "{report:?}");
        // The step donated the state and chose old over new on the devices: every weight and
        // moment reads back bit for bit as before it.
        let after = hit.checkpoint(Progress::default()).unwrap();
        assert_eq!(before.tensors.len(), after.tensors.len());
        for (old, new) in before.tensors.iter().zip(&after.tensors) {
            let bits = |t: &[f32]| t.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&old.data), bits(&new.data), "`{}` changed", old.name);
        }
        assert_eq!(hit.skipped_steps(), s + 1);
        // Between the two bad steps, a good one.
        assert_eq!(good_losses(&mut hit, 1), good_losses(&mut fresh, 1));
    }
    assert_eq!(hit.steps(), 2);
    assert_eq!(good_losses(&mut hit, 4), good_losses(&mut fresh, 4));
}

/// Runs `batches` with one step in flight, as the main job does: step k + 1 is uploaded and
/// launched before step k is waited for. Each step's loss bits and `skipped`, or its error.
fn launched_ahead(
    t: &mut Trainer,
    batches: &[Vec<Vec<HostInput>>],
) -> Vec<Result<(u32, bool), Error>> {
    let mut out = Vec::new();
    let mut in_flight = None;
    for b in batches {
        let pending = t.launch(t.upload(b).unwrap()).unwrap();
        if let Some(previous) = in_flight.replace(pending) {
            out.push(t.wait(previous).map(|r| (r.loss.to_bits(), r.skipped)));
        }
    }
    if let Some(last) = in_flight {
        out.push(t.wait(last).map(|r| (r.loss.to_bits(), r.skipped)));
    }
    out
}

/// With steps launched ahead nobody has read a step's `applied` flag when the next is
/// launched, so Adam's step count lives on the devices: bad steps found only when waited for
/// are skipped exactly as when each step is waited for at once. Every loss, both counts, the
/// saved step and every weight and moment match bit for bit.
#[test]
fn steps_launched_ahead_skip_exactly_as_steps_waited_for() {
    let client = common::cached_cpu_client(2, TARGET_TMP);
    let mesh = Mesh::new(&client, "fsdp", 2).unwrap();
    let m = toy::hand_built(&ToyConfig::small(), 1).unwrap();
    let mut waited = trainer(&client, &mesh, &m, NonFinitePolicy::Skip);
    let mut ahead = trainer(&client, &mesh, &m, NonFinitePolicy::Skip);
    // Two bad steps back to back: the second is launched before the first is known bad.
    let batches: Vec<_> = (0..8)
        .map(|s| match s {
            2 => poisoned(2, 0, 0, 3, f32::NAN),
            5 | 6 => poisoned(2, 1, 1, 2, f32::INFINITY),
            _ => batch(2, s + 1),
        })
        .collect();
    let expected: Vec<(u32, bool)> = batches
        .iter()
        .map(|b| {
            let r = waited.step(b).unwrap();
            (r.loss.to_bits(), r.skipped)
        })
        .collect();
    let got: Vec<(u32, bool)> = launched_ahead(&mut ahead, &batches)
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(got, expected);
    let skipped: Vec<bool> = got.iter().map(|&(_, s)| s).collect();
    assert_eq!(
        skipped,
        [false, false, true, false, false, true, true, false]
    );
    assert_eq!((ahead.steps(), ahead.skipped_steps()), (5, 3));
    assert_eq!((waited.steps(), waited.skipped_steps()), (5, 3));
    // And both as if the bad batches had never been given: a trainer fed only the good ones
    // has the same losses (a skipped step that still advanced Adam's count would change every
    // later bias correction).
    let mut clean = trainer(&client, &mesh, &m, NonFinitePolicy::Skip);
    let good: Vec<u32> = batches
        .iter()
        .zip(&skipped)
        .filter(|&(_, &s)| !s)
        .map(|(b, _)| clean.step(b).unwrap().loss.to_bits())
        .collect();
    let kept: Vec<u32> = got.iter().filter(|&&(_, s)| !s).map(|&(l, _)| l).collect();
    assert_eq!(kept, good);
    let (a, w) = (
        ahead.checkpoint(Progress::default()).unwrap(),
        waited.checkpoint(Progress::default()).unwrap(),
    );
    assert_eq!(a.metadata, w.metadata);
    assert_eq!(a.metadata.get("step").map(String::as_str), Some("5"));
    for (x, y) in a.tensors.iter().zip(&w.tensors) {
        let bits = |t: &[f32]| t.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&x.data), bits(&y.data), "`{}` differs", x.name);
    }
}

/// Under `NonFinitePolicy::Error` a bad step launched ahead reports its error when waited
/// for; the step launched after it ran on the unchanged state, as a step given after the
/// error would.
#[test]
fn a_bad_step_launched_ahead_is_an_error_when_waited_for() {
    let client = common::cached_cpu_client(2, TARGET_TMP);
    let mesh = Mesh::new(&client, "fsdp", 2).unwrap();
    let m = toy::hand_built(&ToyConfig::small(), 1).unwrap();
    let mut fresh = trainer(&client, &mesh, &m, NonFinitePolicy::Error);
    let mut ahead = trainer(&client, &mesh, &m, NonFinitePolicy::Error);
    let expected = good_losses(&mut fresh, 2);
    let run = launched_ahead(
        &mut ahead,
        &[batch(2, 1), poisoned(2, 1, 0, 3, f32::NAN), batch(2, 2)],
    );
    assert_eq!(run[0].as_ref().unwrap(), &(expected[0], false));
    assert!(
        matches!(run[1], Err(Error::NonFinite { step: 2, loss }) if loss.is_nan()),
        "{:?}",
        run[1]
    );
    assert_eq!(run[2].as_ref().unwrap(), &(expected[1], false));
    assert_eq!((ahead.steps(), ahead.skipped_steps()), (2, 1));
}

/// Two layers `h ↦ tanh(h·w)` on the input, squared error against `y`. An infinite input
/// saturates the first tanh, so the loss stays finite, but the first layer's weight gradient
/// `xᵀ·(δ ⊙ (1 − tanh²))` holds `∞·0`: only a gradient is non-finite.
fn saturating_model() -> StackModel {
    let row = TensorType::new(DType::F32, [2, 8]);
    StackModel {
        stack: Stack::homogeneous("tanh", 2).unwrap(),
        kinds: vec![LayerKind {
            name: "tanh".into(),
            params: vec![ParamSpec::sharded("w", &[8, 8], DType::F32, 0)],
            forward: Rc::new(|h, w| match w {
                [w] => h.matmul(w)?.tanh(),
                _ => Err(stackscan::Error::InvalidOp {
                    op: "tanh",
                    message: format!("expected 1 weight, got {}", w.len()),
                }),
            }),
        }],
        activation: row.clone(),
        inputs: vec![InputSpec::new("x", row.clone()), InputSpec::new("y", row)],
        outer_params: vec![],
        pre: Rc::new(|inputs, _| Ok(inputs[0].clone())),
        post: Rc::new(|h, inputs, _| h.sub(&inputs[1])?.square()?.mean(&[0, 1])),
    }
}

/// A finite loss with a non-finite gradient is caught too, under both policies. Before the
/// check this step returned a finite loss and every later loss was NaN.
#[test]
fn a_non_finite_gradient_alone_is_caught() {
    let client = common::cached_cpu_client(2, TARGET_TMP);
    let mesh = Mesh::new(&client, "fsdp", 2).unwrap();
    let m = saturating_model();
    let mut fresh = trainer(&client, &mesh, &m, NonFinitePolicy::Error);
    let mut error = trainer(&client, &mesh, &m, NonFinitePolicy::Error);
    let mut skip = trainer(&client, &mesh, &m, NonFinitePolicy::Skip);
    let bad = poisoned(2, 1, 0, 3, f32::INFINITY);
    let err = error.step(&bad).unwrap_err();
    assert!(
        matches!(err, Error::NonFinite { step: 1, loss } if loss.is_finite()),
        "the loss should stay finite: {err:?}"
    );
    let report = skip.step(&bad).unwrap();
    assert!(report.skipped && report.loss.is_finite(), "{report:?}");
    let expected = good_losses(&mut fresh, 3);
    assert_eq!(good_losses(&mut error, 3), expected);
    assert_eq!(good_losses(&mut skip, 3), expected);
    assert_eq!((error.skipped_steps(), skip.skipped_steps()), (1, 1));
}

/// The toy with its embedding made to record whether the model was ever lowered.
fn recording_toy() -> (StackModel, Rc<Cell<bool>>) {
    let mut m = toy::hand_built(&ToyConfig::small(), 1).unwrap();
    let lowered = Rc::new(Cell::new(false));
    let (pre, seen) = (m.pre.clone(), lowered.clone());
    m.pre = Rc::new(move |inputs, w| {
        seen.set(true);
        pre(inputs, w)
    });
    (m, lowered)
}

/// Learning rates of 0, -1, NaN and ∞, betas outside `[0, 1)` and a negative or NaN `eps` are
/// refused with the field named, before the model is lowered or compiled. Before, every one
/// of them compiled and trained (a NaN rate poisoning the weights at the first step).
#[test]
fn bad_hyper_parameters_are_refused_before_lowering() {
    let client = common::cpu_client(2);
    let mesh = Mesh::new(&client, "fsdp", 2).unwrap();
    let (m, lowered) = recording_toy();
    let cases = [
        ("lr", Adam { lr: 0.0, ..ADAM }),
        ("lr", Adam { lr: -1.0, ..ADAM }),
        (
            "lr",
            Adam {
                lr: f64::NAN,
                ..ADAM
            },
        ),
        (
            "lr",
            Adam {
                lr: f64::INFINITY,
                ..ADAM
            },
        ),
        ("beta1", Adam { beta1: 1.0, ..ADAM }),
        (
            "beta2",
            Adam {
                beta2: -0.1,
                ..ADAM
            },
        ),
        ("eps", Adam { eps: -1e-8, ..ADAM }),
        (
            "eps",
            Adam {
                eps: f64::NAN,
                ..ADAM
            },
        ),
    ];
    for (field, adam) in cases {
        let err = Trainer::new(&client, &mesh, &m, PlanOptions::prefetch(), adam, 0).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Graph(stackscan::Error::InvalidHyperParameter { field: f, .. }) if f == field
            ),
            "{adam:?}: {err:?}"
        );
    }
    assert!(
        !lowered.get(),
        "the model was lowered before Adam was checked"
    );
}

/// A bf16 weight is refused before the model is lowered (it used to be refused only after
/// lowering and compiling the whole step).
#[test]
fn bf16_weights_are_refused_before_lowering() {
    let client = common::cpu_client(2);
    let mesh = Mesh::new(&client, "fsdp", 2).unwrap();
    let (mut m, lowered) = recording_toy();
    m.kinds[0].params[1].dtype = DType::BF16;
    let err = Trainer::new(&client, &mesh, &m, PlanOptions::prefetch(), ADAM, 0).unwrap_err();
    assert!(
        matches!(err, Error::WeightType { ref param, dtype: DType::BF16 } if param == "w2"),
        "{err:?}"
    );
    assert!(
        !lowered.get(),
        "the model was lowered before its weights were checked"
    );
}
