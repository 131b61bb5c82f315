//! Host-side helpers for FSDP tests: random full weights, per-device slabs, reassembling
//! gradient slabs, and running a training step against the unsharded reference.

use stackscan::fsdp::{StackModel, reference_step, train_step, train_step_on};
use stackscan::plan::{PlanOptions, PrefetchIssue};
use stackscan::{Axis, Mesh, Program};

use crate::Client;
use crate::shard::{shard, unshard};

use super::graph::{Arg, Compiled, CompiledOnMesh, Data};
use stackscan::rng::Rng;

/// Full weights and global inputs for a model, and the reference's loss and gradients.
#[derive(Debug)]
pub struct Fixture {
    /// Full weights in the step's order (`StackModel::weights`).
    pub weights: Vec<Vec<f64>>,
    /// Global inputs (batch of `devices_max` shards).
    pub inputs: Vec<Arg>,
    /// The reference's loss.
    pub loss: f64,
    /// Reference gradients: outer…, then stacked (kind-major).
    pub grads: Vec<Vec<f64>>,
    /// The tolerance of comparisons with this reference ([`rtol_for`] of the model and batch).
    pub rtol: f64,
}

/// Builds the fixture: random weights, the given global inputs, the reference on one device.
pub fn fixture(
    client: &Client,
    model: &StackModel,
    inputs: Vec<Arg>,
    batch_scale: usize,
    seed: u64,
) -> Fixture {
    let mut rng = Rng::new(seed);
    let weights: Vec<Vec<f64>> = model
        .weights()
        .iter()
        .map(|(p, layers)| {
            rng.uniform(-0.5, 0.5, layers * p.shape.iter().product::<i64>() as usize)
        })
        .collect();
    let reference = reference_step(model, batch_scale).expect("reference");
    let mut args = inputs.clone();
    let types = reference.param_types();
    let mut ti = types[inputs.len()..].iter();
    for v in &weights {
        args.push(Arg {
            ty: ti.next().expect("type").clone(),
            data: Data::F(v.clone()),
        });
    }
    let loss_ty = reference.param_types().last().expect("seed").clone();
    args.push(Arg {
        ty: loss_ty,
        data: Data::F(vec![1.0]),
    });
    let mut out = Compiled::new(client, &reference).run(&args);
    let loss = out.remove(0)[0];
    let tokens = inputs
        .iter()
        .map(|a| a.ty.dims.iter().product::<i64>() as usize)
        .max()
        .unwrap_or(1);
    Fixture {
        rtol: rtol_for(model, tokens),
        weights,
        inputs,
        loss,
        grads: out,
    }
}

/// f32's unit roundoff, 2⁻²⁴.
pub(crate) const UNIT_ROUNDOFF: f64 = 5.960_464_477_539_063e-8;

/// The constant λ of Higham and Mary's probabilistic rounding-error bound ("A new approach to
/// probabilistic rounding error analysis", 2019): the error of n rounded operations exceeds
/// λ·√n·u with probability at most 2·exp(−λ²/2), 3·10⁻⁸ for λ = 6.
const LAMBDA: f64 = 6.0;

/// The norm-wise tolerance of comparing a sharded f32 step with the unsharded f32 reference,
/// derived from the computation rather than fixed.
///
/// The two are evaluations of one function that differ only in the order of their sums: a
/// weight gradient sums over the `tokens` of the global batch (per device, then reduce-scatter,
/// against one reduction), activations sum over the model width, and XLA blocks every
/// reduction its own way at each optimisation level. Each such sum of n terms carries a
/// rounding error of at most λ·√n·u relative to its terms' magnitudes (with the probability
/// of [`LAMBDA`]), and an error made in one stage reaches the first layer's gradient through
/// every later stage of the backward pass: the embedding, each layer of the stack and the
/// head, `layers + 2` stages. So the two evaluations may differ by twice
/// `λ·√n·u·(layers + 2)`, n the longest reduction. A real bug is far outside it: a slice in
/// place of a reduce-scatter is off by a factor of the device count, a wrong layer's gradient
/// by its whole share of the norm, both O(1).
pub fn rtol_for(model: &StackModel, tokens: usize) -> f64 {
    let width = model.activation.dims.last().copied().unwrap_or(1).max(1) as usize;
    let longest = tokens.max(width) as f64;
    let stages = (model.stack.len() + 2) as f64;
    2.0 * LAMBDA * longest.sqrt() * UNIT_ROUNDOFF * stages
}

/// Runs the FSDP step on `n` devices and returns (loss per device, reassembled gradients).
pub fn run_step(
    client: &Client,
    model: &StackModel,
    fx: &Fixture,
    options: PlanOptions,
    n: usize,
) -> (Vec<f64>, Vec<Vec<f64>>) {
    let axis = Axis {
        name: "fsdp".into(),
        size: n,
    };
    let step = train_step(model, options, &axis).expect("lower the training step");
    run_program(client, model, fx, &step.program, n)
}

/// [`run_step`] on a mesh of any number of axes (all of its devices).
pub fn run_step_on(
    client: &Client,
    model: &StackModel,
    fx: &Fixture,
    options: PlanOptions,
    mesh: &Mesh,
) -> (Vec<f64>, Vec<Vec<f64>>) {
    let step = train_step_on(model, options, mesh).expect("lower the training step");
    run_program(client, model, fx, &step.program, mesh.size())
}

/// Runs the step of `model` on `mesh` under each of `options` and asserts loss and every
/// gradient equal the fixture's reference (f32, at the fixture's derived [`rtol`](Fixture::rtol)); returns the worst
/// gradient deviation. `model` may differ from the one
/// the reference ran (an expert-parallel model against its plain twin) as long as its
/// weights are the same.
pub fn check_on_mesh(
    client: &Client,
    model: &StackModel,
    fx: &Fixture,
    mesh: &Mesh,
    options: &[PlanOptions],
) -> Deviation {
    let mut worst = Deviation::default();
    for &o in options {
        let what = format!("mesh {}, {o:?}", mesh.describe());
        let (losses, grads) = run_step_on(client, model, fx, o, mesh);
        worst = worst.max(assert_matches_reference(&what, &losses, &grads, fx));
    }
    worst
}

/// Asserts every device's loss and every gradient of a step equal the fixture's reference
/// ([`assert_close`] at the fixture's [`rtol`](Fixture::rtol)); returns the worst gradient
/// deviation.
pub fn assert_matches_reference(
    what: &str,
    losses: &[f64],
    grads: &[Vec<f64>],
    fx: &Fixture,
) -> Deviation {
    for l in losses {
        assert_close(&format!("{what}: loss"), &[*l], &[fx.loss], fx.rtol);
    }
    assert_eq!(grads.len(), fx.grads.len(), "{what}: gradients");
    let mut worst = Deviation::default();
    for (j, (g, r)) in grads.iter().zip(&fx.grads).enumerate() {
        worst = worst.max(assert_close(
            &format!("{what}: gradient {j}"),
            g,
            r,
            fx.rtol,
        ));
    }
    worst
}

/// Runs a lowered step program (see [`run_step`]).
pub fn run_program(
    client: &Client,
    model: &StackModel,
    fx: &Fixture,
    program: &Program,
    n: usize,
) -> (Vec<f64>, Vec<Vec<f64>>) {
    let exe = CompiledOnMesh::new(client, program, n);
    run_compiled(&exe, model, fx, program, n)
}

/// Runs `program`, already compiled for `n` devices as `exe`, on the fixture's weights and
/// inputs (split over the devices); returns (loss per device, reassembled gradients).
pub fn run_compiled(
    exe: &CompiledOnMesh,
    model: &StackModel,
    fx: &Fixture,
    program: &Program,
    n: usize,
) -> (Vec<f64>, Vec<Vec<f64>>) {
    let params = program.main().param_types();
    let mut per_device: Vec<Vec<Arg>> = vec![Vec::new(); n];
    // Inputs: split the global batch (dimension 0) evenly.
    for (i, input) in fx.inputs.iter().enumerate() {
        let ty = params[i].clone();
        let chunk = ty.num_elements();
        for (d, args) in per_device.iter_mut().enumerate() {
            let data = match &input.data {
                Data::F(v) => Data::F(v[d * chunk..(d + 1) * chunk].to_vec()),
                Data::I(v) => Data::I(v[d * chunk..(d + 1) * chunk].to_vec()),
            };
            args.push(Arg {
                ty: ty.clone(),
                data,
            });
        }
    }
    let specs = model.weights();
    for (at, ((spec, layers), full)) in (fx.inputs.len()..).zip(specs.iter().zip(&fx.weights)) {
        let slabs = shard(spec, *layers, full, n).expect("shard");
        for (d, args) in per_device.iter_mut().enumerate() {
            args.push(Arg {
                ty: params[at].clone(),
                data: Data::F(slabs[d].clone()),
            });
        }
    }
    let out = exe.run(&per_device);
    let losses: Vec<f64> = out.iter().map(|o| o[0][0]).collect();
    let grads: Vec<Vec<f64>> = specs
        .iter()
        .enumerate()
        .map(|(j, (spec, layers))| {
            let slabs: Vec<Vec<f64>> = out.iter().map(|o| o[1 + j].clone()).collect();
            unshard(spec, *layers, &slabs).expect("unshard")
        })
        .collect();
    (losses, grads)
}

/// How far a computed tensor lies from its reference.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Deviation {
    /// `‖actual − expected‖₂ / ‖expected‖₂`: what [`assert_close`] bounds.
    pub normwise: f64,
    /// `max |actual − expected| / max |expected|`: the worst single element against the
    /// tensor's scale, reported beside the bound (it is not bounded).
    pub elementwise: f64,
}

impl Deviation {
    /// The larger of two deviations in each measure (the worst over many comparisons).
    pub fn max(self, other: Deviation) -> Deviation {
        Deviation {
            normwise: self.normwise.max(other.normwise),
            elementwise: self.elementwise.max(other.elementwise),
        }
    }
}

/// The [`Deviation`] of `actual` from `expected` (same length; an all-zero reference counts as
/// norm 1e-30, so any difference from it is huge).
pub fn deviation(actual: &[f64], expected: &[f64]) -> Deviation {
    let (mut diff2, mut ref2, mut diff_max, mut ref_max) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    for (a, e) in actual.iter().zip(expected) {
        let d = a - e;
        diff2 += d * d;
        ref2 += e * e;
        // `max` would drop a NaN; a NaN anywhere must fail the comparison.
        diff_max = if d.abs() > diff_max || d.is_nan() {
            d.abs()
        } else {
            diff_max
        };
        ref_max = ref_max.max(e.abs());
    }
    Deviation {
        normwise: diff2.sqrt() / ref2.sqrt().max(1e-30),
        elementwise: diff_max / ref_max.max(1e-30),
    }
}

/// Asserts `actual` equals `expected` to `rtol` in the norm-wise sense, `‖actual − expected‖₂
/// ≤ rtol · ‖expected‖₂` (for one value, `|a − e| ≤ rtol · |e|`), and returns the deviation.
///
/// This is what "rtol" means throughout the project ([`rtol_for`] derives its value). The sharded steps and the
/// unsharded reference are two f32 evaluations of one function that sum in different orders
/// (a reduce-scatter of per-device partial gradients against one reduction over the whole
/// batch; XLA's own blocking of each reduction); neither is the exact value, and the
/// difference is rounding spread over the whole tensor. An element-wise relative bound is
/// meaningless for elements near zero, and one bounded by the tensor's largest magnitude
/// still fails on the few elements where cancellation leaves a sum of large terms small
/// (one element of the Qwen3.5-style hybrid's GDN `wk` gradient does, while that gradient's
/// norm-wise deviation stays far inside the tolerance). The norm-wise relative error
/// is the measure numerical linear algebra uses for computed vectors and matrices: invariant
/// to scale, blind to no real bug (a slice in place of a reduce-scatter is off by a factor of
/// the device count, a wrong layer's gradient by its share of the norm), and not defeated by
/// one element's cancellation. Every comparison also reports [`Deviation::elementwise`].
pub fn assert_close(what: &str, actual: &[f64], expected: &[f64], rtol: f64) -> Deviation {
    assert_eq!(actual.len(), expected.len(), "{what}: length");
    let d = deviation(actual, expected);
    assert!(
        d.normwise <= rtol,
        "{what}: ‖actual − reference‖ / ‖reference‖ = {:.3e} > {rtol:e} (worst element {:.3e} \
         of the scale); first elements {:?} vs reference {:?}",
        d.normwise,
        d.elementwise,
        &actual[..actual.len().min(4)],
        &expected[..expected.len().min(4)]
    );
    d
}

/// Every option set ({prefetch off, on, on + deferred} × {unroll 1, 2}). The prefetch's issue
/// point ([`PrefetchIssue`]) changes no carry, only what a gather waits for: it is paired with
/// the unroll rather than crossed with it (on: unroll 1 after compute, 2 with the input;
/// deferred: the other way round, so the CPU trainer's default, deferred with unroll 2 after
/// compute, is among them), so each point runs with each unroll and each prefetching schedule
/// at no extra cost.
pub fn every_option_set() -> [PlanOptions; 6] {
    use PrefetchIssue::{AfterCompute, WithInput};
    let (off, on, deferred) = (
        PlanOptions::baseline(),
        PlanOptions::prefetch(),
        PlanOptions::prefetch_deferred(),
    );
    [
        off.with_unroll(1),
        off.with_unroll(2),
        on.with_unroll(1).with_prefetch_issue(AfterCompute),
        on.with_unroll(2).with_prefetch_issue(WithInput),
        deferred.with_unroll(1).with_prefetch_issue(WithInput),
        deferred.with_unroll(2).with_prefetch_issue(AfterCompute),
    ]
}

/// Runs the step under every option set ([`every_option_set`]) on `n` devices and asserts loss
/// and every gradient equal the reference (f32, at the fixture's derived
/// [`rtol`](Fixture::rtol)); returns the worst gradient deviation.
pub fn check_every_option_set(
    client: &Client,
    model: &StackModel,
    fx: &Fixture,
    n: usize,
) -> Deviation {
    check_option_sets(client, model, fx, n, &every_option_set())
}

/// [`check_every_option_set`] for the option sets `sets` only.
pub fn check_option_sets(
    client: &Client,
    model: &StackModel,
    fx: &Fixture,
    n: usize,
    sets: &[PlanOptions],
) -> Deviation {
    let mut worst = Deviation::default();
    for &o in sets {
        let what = format!("{n} devices, {o:?}");
        let (losses, grads) = run_step(client, model, fx, o, n);
        worst = worst.max(assert_matches_reference(&what, &losses, &grads, fx));
    }
    worst
}
