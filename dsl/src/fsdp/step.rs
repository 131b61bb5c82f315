//! Lowering a plan and a stack model into one training-step program on an FSDP mesh.
//!
//! Per device the program takes its batch shard, its slab of every parameter (stacked per
//! kind: `[layers of the kind, slab…]`, slabs in shard-major order) and returns the global
//! mean loss and its slab of every gradient. The forward pass walks the plan's segments:
//! each group is a loop whose carry holds the activation, the already-gathered weights of the
//! layer about to run and the saved layer inputs; each step all-gathers the next layer's
//! weights before running its own. Peeled groups are single-trip loops whose prefetched
//! weights leave as a scanned output, since they have another kind's shape. The backward pass
//! recomputes each layer from its saved input with the layer's VJP while the next (lower)
//! layer's gather is in flight, and reduce-scatters each unreduced weight gradient in the same
//! step or, deferred, at the start of the next. Without prefetch every step gathers its own
//! weights right before use. All variants compute the same function.
//!
//! This module assembles the program around the stack (inputs, the parts before and after
//! it, results); [`super::pass`] lowers the stack's passes, [`super::loops`] their loops,
//! [`super::state`] what the loops carry, [`super::lowering`] the collectives.

use crate::autodiff::vjp_wrt;
use crate::auxiliary::{AuxOutput, AuxRole};
use crate::builder::{Scope, Tensor};
use crate::dtype::DType;
use crate::emit::{Program, Sharding};
use crate::error::{Error, Result};
use crate::ir::{Axis, Function};
use crate::mesh::Mesh;
use crate::plan::{Plan, PlanOptions};
use crate::precision::{Precision, traced_under};
use crate::types::TensorType;

use super::lowering::Lowering;
use super::model::{ParamSpec, StackModel, Update};

/// A lowered training step and the order of its parameters and results.
#[derive(Clone, Debug)]
pub struct TrainStep {
    /// The program: parameters `[inputs…, outer slabs…, stacked slabs (kind-major)…]`,
    /// results `[loss, outer gradient slabs…, stacked gradient slabs…, auxiliary outputs…]`.
    /// The loss is the model's own (a language model's cross-entropy); the layers' loss terms
    /// ([`AuxRole::Loss`]) are trained on but reported apart, among the auxiliary outputs, so
    /// a reported loss and perplexity are the model's whatever its balancing terms add.
    pub program: Program,
    /// The auxiliary outputs the layers record ([`crate::auxiliary`]), one `f32[]` result
    /// each after the gradients, in this order: a metric's mean over the layers recording it
    /// and the devices, a loss term's sum over layers averaged over the devices.
    pub aux: Vec<AuxOutput>,
    /// How the optimizer moves each weight, in the parameters' order.
    pub updates: Vec<Update>,
    /// Each weight's name, in the parameters' order (what weight decay's mask reads).
    pub names: Vec<String>,
    /// Each weight's rank (its full shape's dimensions), in the parameters' order.
    pub ranks: Vec<usize>,
    /// Each weight's decay as its spec sets it ([`ParamSpec::decay`]; `None`: the rule), in
    /// the parameters' order.
    pub decay: Vec<Option<bool>>,
    /// The plan it was lowered from.
    pub plan: Plan,
    /// Devices of the mesh.
    pub devices: usize,
    /// Leading parameters that are model inputs (the rest are weight slabs).
    pub inputs: usize,
}

/// How a per-device weight gradient becomes this device's slab.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[expect(
    clippy::manual_non_exhaustive,
    reason = "the hidden variant is a deliberate bug for tests, not a placeholder"
)]
pub enum GradientReduction {
    /// Reduce-scatter: sum over devices, keep this device's slab. The correct reduction.
    ReduceScatter,
    /// Keep this device's slab of its own unreduced gradient, as a plain reshard would: off
    /// by the FSDP size and the other devices' contributions. Exists only so tests can prove
    /// they catch this bug.
    #[doc(hidden)]
    SliceUnreduced,
}

/// Builds the training step of `model` under `options` on the one-axis mesh `axis`.
pub fn train_step(model: &StackModel, options: PlanOptions, axis: &Axis) -> Result<TrainStep> {
    train_step_with(model, options, axis, GradientReduction::ReduceScatter)
}

/// [`train_step`] with an explicit gradient reduction.
pub fn train_step_with(
    model: &StackModel,
    options: PlanOptions,
    axis: &Axis,
    reduction: GradientReduction,
) -> Result<TrainStep> {
    model.validate(axis.size)?;
    train_step_on_with(model, options, &Mesh::line(axis)?, reduction)
}

/// Builds the training step of `model` under `options` on `mesh`, whatever its axes: the
/// batch and every sharded weight are split over all of its devices (co-sharding) and
/// gathered over all of them, except a parameter [gathered over a
/// sub-axis](ParamSpec::gathered_over) (expert banks under expert parallelism); each gradient
/// is reduce-scattered over the axis its weight was gathered over.
pub fn train_step_on(model: &StackModel, options: PlanOptions, mesh: &Mesh) -> Result<TrainStep> {
    train_step_on_with(model, options, mesh, GradientReduction::ReduceScatter)
}

/// [`train_step_on`] with an explicit gradient reduction.
pub fn train_step_on_with(
    model: &StackModel,
    options: PlanOptions,
    mesh: &Mesh,
    reduction: GradientReduction,
) -> Result<TrainStep> {
    let n = mesh.size();
    model.validate_on(mesh)?;
    let plan = Plan::new(&model.stack, options)?;
    let lowering = Lowering::new(model, &plan, mesh, reduction)?;
    let main = lowering.build()?;
    let aux = lowering.aux.clone();
    let params = param_shardings(model);
    let mut results = vec![Sharding::Replicated];
    // The gradients are laid out as their weights.
    results.extend(&params[model.inputs.len()..]);
    results.extend(aux.iter().map(|_| Sharding::Replicated));
    Ok(TrainStep {
        program: Program::on_device_mesh(main, mesh.clone(), params, results)?,
        plan,
        devices: n,
        inputs: model.inputs.len(),
        aux,
        updates: model.weights().iter().map(|(p, _)| p.update).collect(),
        names: model
            .weights()
            .iter()
            .map(|(p, _)| p.name.clone())
            .collect(),
        ranks: model.weights().iter().map(|(p, _)| p.shape.len()).collect(),
        decay: model.weights().iter().map(|(p, _)| p.decay).collect(),
    })
}

/// How a program over `model`'s inputs and weight slabs takes its parameters: `[inputs…,
/// outer slabs…, stacked slabs (kind-major)…]`, inputs split along the batch, a sharded
/// weight along its slab dimension (the first of an outer slab, the one after the layers of
/// a stacked one), a replicated one whole.
pub(super) fn param_shardings(model: &StackModel) -> Vec<Sharding> {
    let shard = |p: &ParamSpec, stacked: bool| match (p.shard_dim, stacked) {
        (None, _) => Sharding::Replicated,
        (Some(_), false) => Sharding::Dim(0),
        (Some(_), true) => Sharding::Dim(1),
    };
    let mut params = vec![Sharding::Dim(0); model.inputs.len()];
    params.extend(model.outer_params.iter().map(|p| shard(p, false)));
    params.extend(
        model
            .kinds
            .iter()
            .flat_map(|k| k.params.iter().map(|p| shard(p, true))),
    );
    params
}

/// A step's parameters in scope `s`, in [`param_shardings`]' order.
pub(super) struct StepParams {
    pub(super) inputs: Vec<Tensor>,
    pub(super) outer_slabs: Vec<Tensor>,
    pub(super) stacked: Vec<Vec<Tensor>>,
}

impl Lowering<'_> {
    /// The parameters of a program over the model's inputs and this device's weight slabs.
    pub(super) fn params(&self, s: &Scope) -> StepParams {
        let m = self.model;
        StepParams {
            inputs: m.inputs.iter().map(|i| s.param(i.ty.clone())).collect(),
            outer_slabs: m
                .outer_params
                .iter()
                .map(|p| s.param(TensorType::new(p.dtype, p.local_dims(self.n))))
                .collect(),
            stacked: (0..self.kinds())
                .map(|k| {
                    (0..m.kinds[k].params.len())
                        .map(|p| s.param(m.stacked_local_type(k, p, self.n)))
                        .collect()
                })
                .collect(),
        }
    }

    /// The whole training step: the stack's passes between the parts before and after it.
    pub(super) fn build(&self) -> Result<Function> {
        let m = self.model;
        let s = Scope::new("train_step");
        let StepParams {
            inputs,
            outer_slabs,
            stacked,
        } = self.params(&s);

        // Outside the stack: gather once, differentiate the pre and post parts as functions.
        let outer_full: Vec<Tensor> = m
            .outer_params
            .iter()
            .zip(&outer_slabs)
            .map(|(spec, slab)| self.gather_slab(spec, slab.clone(), false))
            .collect::<Result<_>>()?;
        let pre = trace_pre(m, self.precision)?;
        let post = trace_post(m, self.precision)?;
        let mut args: Vec<Tensor> = inputs.clone();
        args.extend(outer_full.iter().cloned());
        let h0 = s.inline(&pre, &args)?.remove(0);

        let (h_last, saved, aux) = self.forward(&s, &h0, &stacked)?;

        let mut post_args = vec![h_last.clone()];
        post_args.extend(inputs.iter().cloned());
        post_args.extend(outer_full.iter().cloned());
        // The model's own loss: the layers' loss terms are trained on (the backward gives
        // each its gradient) and reported apart, as auxiliary outputs.
        let loss_local = s.inline(&post, &post_args)?.remove(0);
        let mut wrt = vec![true];
        wrt.extend(m.inputs.iter().map(|_| false));
        wrt.extend(m.outer_params.iter().map(|p| p.dtype.is_float()));
        let post_vjp = vjp_wrt(&post, &wrt)?;
        let mut vjp_args = post_args.clone();
        // The global loss is the mean of the devices' losses.
        vjp_args.push(s.scalar(1.0 / self.n as f64, loss_local.dtype())?);
        let mut d_post = s.inline(&post_vjp, &vjp_args)?;
        let dh_last = d_post.remove(0);

        let (dh0, stacked_grads) = self.backward(&s, &dh_last, &stacked, &saved)?;

        let mut pre_wrt: Vec<bool> = m.inputs.iter().map(|_| false).collect();
        pre_wrt.extend(m.outer_params.iter().map(|p| p.dtype.is_float()));
        let pre_vjp = vjp_wrt(&pre, &pre_wrt)?;
        let mut pre_args = args.clone();
        pre_args.push(dh0);
        let d_pre = s.inline(&pre_vjp, &pre_args)?;

        let mut results = vec![loss_local.psum(&self.axis)?.scale(1.0 / self.n as f64)?];
        for (i, spec) in m.outer_params.iter().enumerate() {
            let g = d_pre[i].add(&d_post[i])?;
            results.push(self.reduce(spec, &g)?);
        }
        results.extend(stacked_grads.into_iter().flatten());
        for (g, (output, value)) in self.aux.iter().zip(&aux).enumerate() {
            let over = match output.role {
                AuxRole::Metric => self.n * self.aux_layers(g).max(1),
                AuxRole::Loss => self.n,
            };
            results.push(value.psum(&self.axis)?.scale(1.0 / over as f64)?);
        }
        s.finish(&results)
    }
}

/// Parameters of `s` for the model's inputs, then for its outer weights (whole, in the
/// compute type), in the order `pre` and `post` take them.
fn input_and_outer_params(
    s: &Scope,
    m: &StackModel,
    precision: Precision,
) -> (Vec<Tensor>, Vec<Tensor>) {
    let inputs = m.inputs.iter().map(|i| s.param(i.ty.clone())).collect();
    let outer = m
        .outer_params
        .iter()
        .map(|p| s.param(precision.compute_type(&p.full_type())))
        .collect();
    (inputs, outer)
}

/// `pre` as a function of `(inputs…, outer weights…)`, its activation in the compute type.
fn trace_pre(m: &StackModel, precision: Precision) -> Result<Function> {
    let s = Scope::new("pre");
    let (inputs, outer) = input_and_outer_params(&s, m, precision);
    let h = pre_activation(m, precision, &inputs, &outer)?;
    s.finish(&[h])
}

/// Runs `pre` and checks its activation: the model's, cast to the compute type (a `pre` that
/// ends in a wide value, such as a scaled embedding, is cast once here).
pub(super) fn pre_activation(
    m: &StackModel,
    precision: Precision,
    inputs: &[Tensor],
    outer: &[Tensor],
) -> Result<Tensor> {
    let h = (m.pre)(inputs, outer)
        .map_err(|e| traced_under(precision, "the part before the stack", e))?;
    if h.ty() != &m.activation && h.ty() != &precision.compute_type(&m.activation) {
        return Err(Error::invalid(
            "fsdp",
            format!(
                "the pre-stack part returns {} but the activation is {}",
                h.ty(),
                m.activation
            ),
        ));
    }
    h.convert(precision.compute_dtype(m.activation.dtype))
}

/// `post` as a function of `(activation, inputs…, outer weights…)` to the scalar local loss,
/// in f32 whatever the layers compute in.
pub(super) fn trace_post(m: &StackModel, precision: Precision) -> Result<Function> {
    let s = Scope::new("post");
    let h = s.param(precision.compute_type(&m.activation));
    let (inputs, outer) = input_and_outer_params(&s, m, precision);
    let loss = (m.post)(&h, &inputs, &outer)
        .map_err(|e| traced_under(precision, "the part after the stack", e))?;
    if loss.rank() != 0 || !loss.dtype().is_float() {
        return Err(Error::invalid(
            "fsdp",
            format!(
                "the post-stack part must return a float scalar loss, got {}",
                loss.ty()
            ),
        ));
    }
    let loss = if precision.is_mixed() {
        loss.convert(DType::F32)?
    } else {
        loss
    };
    s.finish(&[loss])
}
