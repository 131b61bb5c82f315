//! Gradient accumulation inside one program: a step over `k` micro-batches whose loss,
//! gradients and auxiliary outputs are those of one step on the `k`-times larger batch.
//!
//! The accumulated step is a loop over the micro-batches around the training step itself;
//! each trip runs the whole FSDP step (weights gathered layer by layer, gradients
//! reduce-scattered) and adds its results to a carry of **sharded** accumulators. The other
//! way, summing each device's unreduced gradients over the trips and reduce-scattering once
//! at the end, saves `k − 1` reduce-scatters per step but keeps a full, unsharded gradient of
//! every weight on every device for the whole loop: the memory FSDP exists to avoid (the
//! model's whole parameter count in f32 per device, against `1/n` of it here). The
//! reduce-scatters also overlap the next trip's compute like any other step's, so sharded
//! accumulation costs collective bandwidth, not memory, which is the trade every FSDP user
//! makes already; and it needs no second lowering of the backward pass.
//!
//! A micro-batch is a contiguous block of rows of each device's batch: trip `i` reads rows
//! `[i·b, (i + 1)·b)` of every input, `b` the model's per-device batch.
//!
//! The results are the means over the trips: the loss (each trip's loss is already the mean
//! over its own tokens and the devices, so with equal micro-batches the mean of the trips'
//! losses is the big batch's), every gradient and every auxiliary output (a metric's mean,
//! a loss term's average). One thing is not the big batch's: a layer that looks at its whole
//! batch at once (MoE token dropping against a capacity, routers balanced per batch) sees a
//! micro-batch instead, as in every framework that accumulates.

use crate::builder::{Scope, Tensor};
use crate::emit::Program;
use crate::error::{Error, Result};

use super::step::TrainStep;

/// The training step `step` over `micro_batches` micro-batches: its inputs are `micro_batches`
/// times as long in their leading (batch) dimension, its results are the means of the
/// micro-batches' results, in `step`'s order and shardings. One micro-batch returns `step`
/// as it is.
///
/// ```
/// # use std::rc::Rc;
/// # use stackscan::fsdp::{InputSpec, LayerKind, ParamSpec, StackModel, accumulate, train_step};
/// # use stackscan::plan::{PlanOptions, Stack};
/// # use stackscan::{Axis, DType, TensorType};
/// # let row = TensorType::new(DType::F32, [2, 8]);
/// # let model = StackModel {
/// #     stack: Stack::homogeneous("mlp", 2)?,
/// #     kinds: vec![LayerKind {
/// #         name: "mlp".into(),
/// #         params: vec![ParamSpec::sharded("w", &[8, 8], DType::F32, 0)],
/// #         forward: Rc::new(|h, w| h.add(&h.matmul(&w[0])?.tanh()?)),
/// #     }],
/// #     activation: row.clone(),
/// #     inputs: vec![InputSpec::new("x", row.clone()), InputSpec::new("y", row)],
/// #     outer_params: vec![],
/// #     pre: Rc::new(|inputs, _| Ok(inputs[0].clone())),
/// #     post: Rc::new(|h, inputs, _| h.sub(&inputs[1])?.square()?.mean(&[0, 1])),
/// # };
/// let axis = Axis { name: "fsdp".into(), size: 4 };
/// let step = train_step(&model, PlanOptions::prefetch_deferred(), &axis)?;
/// let four = accumulate(&step, 4)?;
/// // Each device now takes 4 micro-batches of 2 rows.
/// assert_eq!(four.program.main().param_types()[0].dims, vec![8, 8]);
/// assert_eq!(four.program.main().result_types(), step.program.main().result_types());
/// assert!(accumulate(&step, 0).is_err());
/// # Ok::<(), stackscan::Error>(())
/// ```
pub fn accumulate(step: &TrainStep, micro_batches: usize) -> Result<TrainStep> {
    let k = micro_batches;
    if k == 0 {
        return Err(Error::invalid(
            "accumulate",
            "a step needs at least one micro-batch",
        ));
    }
    if k == 1 {
        return Ok(step.clone());
    }
    let main = step.program.main();
    let (param_sh, result_sh, mesh) = match (
        step.program.param_shardings(),
        step.program.result_shardings(),
        step.program.mesh(),
    ) {
        (Some(p), Some(r), Some(m)) => (p.to_vec(), r.to_vec(), m.clone()),
        _ => {
            return Err(Error::invalid(
                "accumulate",
                "the training step has no mesh layout",
            ));
        }
    };
    let types = main.param_types();
    let s = Scope::new("train_step_accumulated");
    let mut micro = Vec::with_capacity(step.inputs);
    for ty in &types[..step.inputs] {
        let Some((&rows, rest)) = ty.dims.split_first() else {
            return Err(Error::invalid(
                "accumulate",
                format!("input {ty} has no batch dimension to split into micro-batches"),
            ));
        };
        let mut dims = vec![rows * k as i64];
        dims.extend_from_slice(rest);
        let whole = s.param(ty.with_dims(dims));
        let mut split = vec![k as i64, rows];
        split.extend_from_slice(rest);
        micro.push(whole.reshape(&split)?);
    }
    let weights: Vec<Tensor> = types[step.inputs..]
        .iter()
        .map(|t| s.param(t.clone()))
        .collect();
    let result_types = main.result_types();
    let zeros: Vec<Tensor> = result_types
        .iter()
        .map(|t| s.full(0.0, t.clone()))
        .collect::<Result<_>>()?;
    let label = [(super::LOOP_LABEL, "micro-batches")];
    let (sums, _) = s.scan_with_attributes(&zeros, &micro, k, false, &label, |b, carry, x| {
        let mut args = x.to_vec();
        args.extend(weights.iter().cloned());
        let out = b.inline(main, &args)?;
        let next = carry
            .iter()
            .zip(&out)
            .map(|(acc, v)| {
                if v.dtype().is_float() {
                    acc.add(v)
                } else {
                    Ok(v.clone())
                }
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((next, Vec::new()))
    })?;
    let means: Vec<Tensor> = sums
        .iter()
        .map(|t| {
            if t.dtype().is_float() {
                t.scale(1.0 / k as f64)
            } else {
                Ok(t.clone())
            }
        })
        .collect::<Result<_>>()?;
    let f = s.finish(&means)?;
    Ok(TrainStep {
        program: Program::on_device_mesh(f, mesh, param_sh, result_sh)?,
        ..step.clone()
    })
}
