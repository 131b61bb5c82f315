//! Host-side helpers for FSDP tests: random full weights, per-device slabs, reassembling
//! gradient slabs, and running a training step against the unsharded reference.

use stackscan::fsdp::{StackModel, reference_step, train_step, train_step_on};
use stackscan::plan::PlanOptions;
use stackscan::{Axis, Mesh, Program};

use crate::Client;
use crate::shard::{shard, unshard};

use super::graph::{Arg, Compiled, CompiledOnMesh, Data, Rng};

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
    Fixture {
        weights,
        inputs,
        loss,
        grads: out,
    }
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
/// gradient equal the fixture's reference (f32, rtol 1e-5). `model` may differ from the one
/// the reference ran (an expert-parallel model against its plain twin) as long as its
/// weights are the same.
pub fn check_on_mesh(
    client: &Client,
    model: &StackModel,
    fx: &Fixture,
    mesh: &Mesh,
    options: &[PlanOptions],
) {
    for &o in options {
        let what = format!("mesh {}, {o:?}", mesh.describe());
        let (losses, grads) = run_step_on(client, model, fx, o, mesh);
        for l in &losses {
            assert_close(&format!("{what}: loss"), &[*l], &[fx.loss], 1e-5);
        }
        for (j, (g, r)) in grads.iter().zip(&fx.grads).enumerate() {
            assert_close(&format!("{what}: gradient {j}"), g, r, 1e-5);
        }
    }
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

/// Asserts `actual` is within `rtol` of `expected`, relative to the largest magnitude of the
/// expected array (per-element relative error explodes near zero in f32).
pub fn assert_close(what: &str, actual: &[f64], expected: &[f64], rtol: f64) {
    assert_eq!(actual.len(), expected.len(), "{what}: length");
    let scale = expected
        .iter()
        .fold(0.0f64, |m, v| m.max(v.abs()))
        .max(1e-30);
    for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
        assert!(
            (a - e).abs() <= rtol * scale + rtol * e.abs(),
            "{what}[{i}]: {a} vs reference {e} (scale {scale})"
        );
    }
}

/// Runs the step under every option set ({prefetch off, on, on + deferred} × {unroll 1, 2}) on
/// `n` devices and asserts loss and every gradient equal the reference (f32, rtol 1e-5).
pub fn check_every_option_set(client: &Client, model: &StackModel, fx: &Fixture, n: usize) {
    let bases = [
        PlanOptions::baseline(),
        PlanOptions::prefetch(),
        PlanOptions::prefetch_deferred(),
    ];
    for base in bases {
        for unroll in [1, 2] {
            let o = base.with_unroll(unroll);
            let what = format!("{n} devices, {o:?}");
            let (losses, grads) = run_step(client, model, fx, o, n);
            for l in &losses {
                assert_close(&format!("{what}: loss"), &[*l], &[fx.loss], 1e-5);
            }
            for (j, (g, r)) in grads.iter().zip(&fx.grads).enumerate() {
                assert_close(&format!("{what}: gradient {j}"), g, r, 1e-5);
            }
        }
    }
}
