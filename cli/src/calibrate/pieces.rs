//! The tiny Llama's training step taken apart: each piece the prediction adds up (one layer's
//! forward, its backward step, its weights' gather and its gradient's reduce-scatter, the
//! parts outside the stack, the optimizer) compiled and timed on its own with every device
//! busy, beside what the profile predicts for it, and the whole step beside the sum. Where a
//! prediction misses, this says which piece is mispriced, and whether the pieces add up to
//! the step (they do not when running them together costs what none costs alone: copies the
//! compiler inserts between them, caches they evict from one another).

use stackscan::fsdp::{Adam, StackModel, train_step_on, with_adam};
use stackscan::plan::PlanOptions;
use stackscan::{Axis, Function, Precision, Program, Scope, Sharding, TensorType, vjp};
use stackscan_runtime::{Client, Mesh, Result};

use super::time_program;
use crate::hardware::Hardware;
use crate::predict::{optimizer_seconds, outer_compute_seconds, predict};
use stackscan::cost::{layer_costs, of};

/// One piece: measured alone and predicted, seconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Piece {
    /// What was timed.
    pub name: String,
    /// Median measured time.
    pub measured: f64,
    /// The profile's prediction for it.
    pub predicted: f64,
}

/// Every value sharded along its first dimension, so `main`'s per-device types are what each
/// device is given; a rank-0 value is replicated.
fn per_device(f: Function, axis: &Axis) -> Result<Program> {
    let sharding = |t: &TensorType| {
        if t.dims.is_empty() {
            Sharding::Replicated
        } else {
            Sharding::Dim(0)
        }
    };
    let params = f.param_types().iter().map(sharding).collect();
    let results = f.results.iter().map(|&r| sharding(&f.values[r])).collect();
    Ok(Program::on_mesh(f, axis.clone(), params, results)?)
}

/// Times the pieces of `model`'s step under `options` on `mesh` (each the median of
/// `repeats` runs) and sets beside each what `hardware` predicts.
pub fn pieces(
    client: &Client,
    mesh: &Mesh,
    model: &StackModel,
    options: PlanOptions,
    hardware: &Hardware,
    repeats: usize,
) -> Result<Vec<Piece>> {
    let n = mesh.size();
    // The step as a trainer on this plugin lowers it.
    let options = stackscan_runtime::backend::plan_options(client, options);
    let axis = Axis {
        name: "fsdp".into(),
        size: n,
    };
    let time = |p: &Program| time_program(client, mesh, p, repeats);
    let mut out = Vec::new();
    // The pieces are measured as declared (f32), so they are priced so.
    let costs = layer_costs(model, n, &[], Precision::F32)?;
    for (kind, cost) in model.kinds.iter().zip(&costs) {
        let t = hardware.kind_times(cost);
        let s = Scope::new(&kind.name);
        let x = s.param(model.activation.clone());
        let w: Vec<_> = kind.params.iter().map(|p| s.param(p.full_type())).collect();
        let y = (kind.forward)(&x, &w)?;
        let forward = s.finish(&[y])?;
        let backward = vjp(&forward)?;
        out.push(Piece {
            name: format!("{} forward", kind.name),
            measured: time(&per_device(forward, &axis)?)?,
            predicted: t.forward,
        });
        out.push(Piece {
            name: format!("{} backward (recompute + vjp)", kind.name),
            measured: time(&per_device(backward, &axis)?)?,
            predicted: t.backward,
        });
        let s = Scope::new("gather");
        let mut gathered = Vec::new();
        for p in kind.params.iter().filter(|p| p.shard_dim.is_some()) {
            // Slabs are stored shard-major, so the lowering gathers along their first dimension.
            let local = TensorType::new(p.dtype, p.local_dims(n));
            let g = s.param(local).all_gather(0, &axis)?;
            gathered.push(g);
        }
        out.push(Piece {
            name: format!("{} gather", kind.name),
            measured: time(&per_device(s.finish(&gathered)?, &axis)?)?,
            predicted: t.gather,
        });
        let s = Scope::new("reduce_scatter");
        let mut scattered = Vec::new();
        for p in kind.params.iter().filter(|p| p.shard_dim.is_some()) {
            let full = TensorType::new(p.dtype, p.shard_major_dims());
            let g = s.param(full).reduce_scatter(0, &axis)?;
            scattered.push(g);
        }
        out.push(Piece {
            name: format!("{} reduce-scatter", kind.name),
            measured: time(&per_device(s.finish(&scattered)?, &axis)?)?,
            predicted: t.reduce_scatter,
        });
    }
    let outer = vjp(&model.outer_function(Precision::F32)?)?;
    let predicted_outer = hardware.compute_seconds(&of(&outer)?);
    debug_assert!(
        (predicted_outer - outer_compute_seconds(model, hardware, Precision::F32)?).abs() < 1e-12
    );
    out.push(Piece {
        name: "embedding, head and loss (forward + vjp)".into(),
        measured: time(&per_device(outer, &axis)?)?,
        predicted: predicted_outer,
    });
    let step = train_step_on(model, options, mesh.layout())?;
    let with_optimizer = with_adam(&step, Adam::default())?;
    let prediction = predict(
        model,
        options.with_precision(Precision::F32),
        hardware,
        n,
        &[],
    )?;
    let adam = optimizer_seconds(model, hardware, n)?;
    let measured_step = time(&step.program)?;
    let measured_full = time(&with_optimizer)?;
    out.push(Piece {
        name: "step without the optimizer".into(),
        measured: measured_step,
        predicted: prediction.step_seconds() - adam,
    });
    out.push(Piece {
        name: "optimizer (step with Adam minus step without)".into(),
        measured: measured_full - measured_step,
        predicted: adam,
    });
    out.push(Piece {
        name: "step with Adam".into(),
        measured: measured_full,
        predicted: prediction.step_seconds(),
    });
    Ok(out)
}
