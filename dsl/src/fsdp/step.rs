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

use crate::autodiff::{vjp, vjp_wrt};
use crate::builder::{Scope, Tensor};
use crate::emit::{Program, Sharding};
use crate::error::{Error, Result};
use crate::ir::{Axis, Function};
use crate::ops::optimization_barrier;
use crate::plan::{Group, LoopForm, Plan, PlanOptions, Segment};
use crate::{DType, TensorType};

use super::model::{ParamSpec, StackModel};

/// Keeps XLA from folding a peeled single-trip loop into its surroundings.
const KEEP_LOOP: (&str, &str) = ("skip-simplify-while-loops_trip-count-one", "true");

/// Loops of one trip keep their loop (and so the same structure at every depth).
fn keep_if_single(trips: usize) -> &'static [(&'static str, &'static str)] {
    if trips == 1 { &[KEEP_LOOP] } else { &[] }
}

/// A lowered training step and the order of its parameters and results.
#[derive(Clone, Debug)]
pub struct TrainStep {
    /// The program: parameters `[inputs…, outer slabs…, stacked slabs (kind-major)…]`,
    /// results `[loss, outer gradient slabs…, stacked gradient slabs…]`.
    pub program: Program,
    /// The plan it was lowered from.
    pub plan: Plan,
    /// Devices on the FSDP axis.
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

/// Builds the training step of `model` under `options` on `axis`.
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
    let n = axis.size;
    model.validate(n)?;
    let plan = Plan::new(&model.stack, options)?;
    let lowering = Lowering::new(model, &plan, axis, reduction)?;
    let main = lowering.build()?;
    let mut params = vec![Sharding::Dim(0); model.inputs.len()];
    let shard = |p: &ParamSpec, stacked: bool| match (p.shard_dim, stacked) {
        (None, _) => Sharding::Replicated,
        (Some(_), false) => Sharding::Dim(0),
        (Some(_), true) => Sharding::Dim(1),
    };
    let outer: Vec<Sharding> = model.outer_params.iter().map(|p| shard(p, false)).collect();
    let stacked: Vec<Sharding> = model
        .kinds
        .iter()
        .flat_map(|k| k.params.iter().map(|p| shard(p, true)))
        .collect();
    params.extend(&outer);
    params.extend(&stacked);
    let mut results = vec![Sharding::Replicated];
    results.extend(&outer);
    results.extend(&stacked);
    Ok(TrainStep {
        program: Program::on_mesh(main, axis.clone(), params, results)?,
        plan,
        devices: n,
        inputs: model.inputs.len(),
    })
}

/// `base + per_step · q + per_trip · t`: a layer's row in its kind's stacked weights, as a
/// function of the step's position `q` in its group and the block loop's trip `t`.
#[derive(Clone, Copy, Debug)]
struct Index {
    base: i64,
    per_step: i64,
    per_trip: i64,
}

impl Index {
    fn eval(self, s: &Scope, q: &Tensor, t: Option<&Tensor>) -> Result<Tensor> {
        let mut v = s.scalar(self.base as f64, DType::I32)?;
        if self.per_step != 0 {
            v = v.add(&q.mul(&s.scalar(self.per_step as f64, DType::I32)?)?)?;
        }
        if let (Some(t), true) = (t, self.per_trip != 0) {
            v = v.add(&t.mul(&s.scalar(self.per_trip as f64, DType::I32)?)?)?;
        }
        Ok(v)
    }
}

/// Start indices `[row, 0, 0, …]` addressing one row of a stacked tensor of rank `1 + rest`.
fn row_starts<'t>(row: &'t Tensor, zero: &'t Tensor, rest: usize) -> Vec<&'t Tensor> {
    let mut starts = vec![row];
    starts.extend(std::iter::repeat_n(zero, rest));
    starts
}

/// The trip counter of the enclosing block loop, if any, and the layer offset per trip.
#[derive(Clone)]
struct Trip {
    t: Tensor,
    stride: isize,
}

struct Lowering<'a> {
    model: &'a StackModel,
    plan: &'a Plan,
    axis: Axis,
    n: usize,
    /// Per kind: `(activation, weights…) → activation`.
    layers: Vec<Function>,
    /// Per kind: `(activation, weights…, d activation) → (d activation, d weights…)`.
    layer_vjps: Vec<Function>,
    reduction: GradientReduction,
}

impl<'a> Lowering<'a> {
    fn new(
        model: &'a StackModel,
        plan: &'a Plan,
        axis: &Axis,
        reduction: GradientReduction,
    ) -> Result<Self> {
        let mut layers = Vec::new();
        let mut layer_vjps = Vec::new();
        for kind in &model.kinds {
            let s = Scope::new(&kind.name);
            let h = s.param(model.activation.clone());
            let w: Vec<Tensor> = kind.params.iter().map(|p| s.param(p.full_type())).collect();
            let out = (kind.forward)(&h, &w)?;
            if out.ty() != &model.activation {
                return Err(Error::invalid(
                    "fsdp",
                    format!(
                        "layer `{}` maps the activation {} to {}; layers must keep its type",
                        kind.name,
                        model.activation,
                        out.ty()
                    ),
                ));
            }
            let f = s.finish(&[out])?;
            layer_vjps.push(vjp(&f)?);
            layers.push(f);
        }
        Ok(Lowering {
            model,
            plan,
            axis: axis.clone(),
            n: axis.size,
            layers,
            layer_vjps,
            reduction,
        })
    }

    fn kinds(&self) -> usize {
        self.model.kinds.len()
    }

    fn stack(&self) -> &crate::plan::Stack {
        &self.model.stack
    }

    /// Layers of `kind` in one block (the row offset between two block-loop trips).
    fn per_block(&self, kind: usize) -> i64 {
        let st = self.stack();
        let p = st.prefix_len();
        (0..st.block_len())
            .filter(|&i| st.kind_of(p + i) == kind)
            .count() as i64
    }

    /// The row of `layer + step_dir · q` (shifted by the trip) in its kind's stack.
    fn index(&self, layer: usize, step_dir: i64, trip: Option<&Trip>) -> Index {
        let kind = self.stack().kind_of(layer);
        let per_trip = trip.map_or(0, |tr| tr.stride.signum() as i64 * self.per_block(kind));
        Index {
            base: self.stack().index_in_kind(layer) as i64,
            per_step: step_dir,
            per_trip,
        }
    }

    /// All-gathers one layer's weights (natural layout) from the stacked slabs.
    fn gather(&self, kind: usize, row: &Tensor, shards: &[Tensor]) -> Result<Vec<Tensor>> {
        let s = row.scope().clone();
        let zero = s.scalar(0.0, DType::I32)?;
        self.model.kinds[kind]
            .params
            .iter()
            .zip(shards)
            .map(|(spec, stacked)| {
                let local = spec.local_dims(self.n);
                let starts = row_starts(row, &zero, local.len());
                let mut sizes = vec![1];
                sizes.extend(&local);
                let slab = stacked.dynamic_slice(&starts, &sizes)?.reshape(&local)?;
                match spec.shard_dim {
                    None => Ok(slab),
                    Some(_) => slab
                        .all_gather(0, &self.axis)?
                        .transpose(&spec.shard_major_to_natural()),
                }
            })
            .collect()
    }

    /// All-gathers the weights of a fixed layer (the prologue of a pass).
    fn gather_layer(
        &self,
        s: &Scope,
        layer: usize,
        stacked: &[Vec<Tensor>],
    ) -> Result<Vec<Tensor>> {
        let kind = self.stack().kind_of(layer);
        let row = s.scalar(self.stack().index_in_kind(layer) as f64, DType::I32)?;
        self.gather(kind, &row, &stacked[kind])
    }

    /// Reduces a per-device gradient to this device's slab: a reduce-scatter along the
    /// shard-major dimension 0 (summing, never slicing), or a psum for a replicated parameter.
    fn reduce(&self, spec: &ParamSpec, grad: &Tensor) -> Result<Tensor> {
        match (spec.shard_dim, self.reduction) {
            (None, _) => grad.psum(&self.axis),
            (Some(_), GradientReduction::ReduceScatter) => grad
                .transpose(&spec.natural_to_shard_major())?
                .reduce_scatter(0, &self.axis),
            (Some(_), GradientReduction::SliceUnreduced) => {
                let major = grad.transpose(&spec.natural_to_shard_major())?;
                let s = grad.scope().clone();
                let slab = major.dims()[0] / self.n as i64;
                let start = s
                    .axis_index(&self.axis)?
                    .mul(&s.scalar(slab as f64, DType::I32)?)?;
                let zero = s.scalar(0.0, DType::I32)?;
                let starts = row_starts(&start, &zero, major.rank() - 1);
                let mut sizes = major.dims().to_vec();
                sizes[0] = slab;
                major.dynamic_slice(&starts, &sizes)
            }
        }
    }

    /// Writes one layer's reduced gradient slabs into the kind's stacked gradients.
    fn store(&self, kind: usize, row: &Tensor, grads: &[Tensor], acc: &mut [Tensor]) -> Result<()> {
        let s = row.scope().clone();
        let zero = s.scalar(0.0, DType::I32)?;
        for ((spec, g), a) in self.model.kinds[kind]
            .params
            .iter()
            .zip(grads)
            .zip(acc.iter_mut())
        {
            let slab = self.reduce(spec, g)?;
            let starts = row_starts(row, &zero, slab.rank());
            *a = a.dynamic_update_slice(&slab.expand_dims(0)?, &starts)?;
        }
        Ok(())
    }

    /// Ties `values` to `anchor` so that nothing reading them starts before `anchor` exists.
    fn tie(&self, anchor: &Tensor, values: &[Tensor]) -> Result<(Tensor, Vec<Tensor>)> {
        let mut all = vec![anchor];
        all.extend(values.iter());
        let mut out = optimization_barrier(&all)?;
        let rest = out.split_off(1);
        Ok((out.remove(0), rest))
    }

    fn build(&self) -> Result<Function> {
        let m = self.model;
        let s = Scope::new("train_step");
        let inputs: Vec<Tensor> = m.inputs.iter().map(|i| s.param(i.ty.clone())).collect();
        let outer_slabs: Vec<Tensor> = m
            .outer_params
            .iter()
            .map(|p| s.param(TensorType::new(p.dtype, p.local_dims(self.n))))
            .collect();
        let stacked: Vec<Vec<Tensor>> = (0..self.kinds())
            .map(|k| {
                (0..m.kinds[k].params.len())
                    .map(|p| s.param(m.stacked_local_type(k, p, self.n)))
                    .collect()
            })
            .collect();

        // Outside the stack: gather once, differentiate the pre and post parts as functions.
        let outer_full: Vec<Tensor> = m
            .outer_params
            .iter()
            .zip(&outer_slabs)
            .map(|(spec, slab)| match spec.shard_dim {
                None => Ok(slab.clone()),
                Some(_) => slab
                    .all_gather(0, &self.axis)?
                    .transpose(&spec.shard_major_to_natural()),
            })
            .collect::<Result<_>>()?;
        let pre = trace_pre(m)?;
        let post = trace_post(m)?;
        let mut args: Vec<Tensor> = inputs.clone();
        args.extend(outer_full.iter().cloned());
        let h0 = s.inline(&pre, &args)?.remove(0);

        let (h_last, saved) = self.forward(&s, &h0, &stacked)?;

        let mut post_args = vec![h_last.clone()];
        post_args.extend(inputs.iter().cloned());
        post_args.extend(outer_full.iter().cloned());
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
        s.finish(&results)
    }

    // ---------------------------------------------------------------- forward

    /// Runs the stack forward; returns the last activation and the saved layer inputs per
    /// kind (`[layers of kind, activation…]`).
    fn forward(
        &self,
        s: &Scope,
        h0: &Tensor,
        stacked: &[Vec<Tensor>],
    ) -> Result<(Tensor, Vec<Tensor>)> {
        let saved: Vec<Tensor> = (0..self.kinds())
            .map(|k| {
                let mut dims = vec![self.stack().layers_of_kind(k) as i64];
                dims.extend(&self.model.activation.dims);
                s.full(0.0, self.model.activation.with_dims(dims))
            })
            .collect::<Result<_>>()?;
        let w = if self.plan.options.prefetch_fsdp_weights {
            self.gather_layer(s, 0, stacked)?
        } else {
            Vec::new()
        };
        let st = FwdState {
            h: h0.clone(),
            w,
            saved,
        };
        let st = run_pass(s, &self.plan.forward.segments, st, &|s, g, trip, st| {
            self.forward_group(s, g, trip, st, stacked)
        })?;
        Ok((st.h, st.saved))
    }

    /// One forward step at position `q` of group `g`: save the input, gather the next
    /// layer's weights (prefetch) or this layer's (baseline), run the layer.
    fn forward_step(
        &self,
        g: &Group,
        q: &Tensor,
        trip: Option<&Trip>,
        st: FwdState,
        stacked: &[Vec<Tensor>],
    ) -> Result<FwdState> {
        let s = q.scope().clone();
        let t = trip.map(|tr| &tr.t);
        let base = g.layers[0];
        let k = g.kind;
        let FwdState { h, w, mut saved } = st;
        let row = self.index(base, 1, trip).eval(&s, q, t)?;
        let zero = s.scalar(0.0, DType::I32)?;
        let starts = row_starts(&row, &zero, h.rank());
        saved[k] = saved[k].dynamic_update_slice(&h.expand_dims(0)?, &starts)?;
        if !self.plan.options.prefetch_fsdp_weights {
            let w_now = self.gather(k, &row, &stacked[k])?;
            let h = self.run_layer(k, &h, &w_now)?;
            return Ok(FwdState { h, w, saved });
        }
        let next_weights = match g.signature.0 {
            None => Vec::new(),
            Some(kn) => {
                // Tie the gather to this step's input: it may not start before the previous
                // layer's last read of the buffer it replaces.
                let (_, shards) = self.tie(&h, &stacked[kn])?;
                let next_row = self.index(base + 1, 1, trip).eval(&s, q, t)?;
                self.gather(kn, &next_row, &shards)?
            }
        };
        Ok(FwdState {
            h: self.run_layer(k, &h, &w)?,
            w: next_weights,
            saved,
        })
    }

    fn run_layer(&self, k: usize, h: &Tensor, w: &[Tensor]) -> Result<Tensor> {
        let mut args = vec![h.clone()];
        args.extend(w.iter().cloned());
        Ok(h.scope().inline(&self.layers[k], &args)?.remove(0))
    }

    fn forward_group(
        &self,
        s: &Scope,
        g: &Group,
        trip: Option<&Trip>,
        st: FwdState,
        stacked: &[Vec<Tensor>],
    ) -> Result<FwdState> {
        if g.form != LoopForm::Peeled {
            return group_loop(s, g.form, st, &|q, st| {
                self.forward_step(g, q, trip, st, stacked)
            });
        }
        // The prefetched weights have another kind's shape: they enter as a captured value and
        // leave as a scanned output of the single-trip loop instead of through the carry.
        let FwdState { h, w, saved } = st;
        let mut carry = vec![h];
        carry.extend(saved);
        let (mut out, w) = single_trip(s, &carry, |q, c| {
            let st = FwdState {
                h: c[0].clone(),
                w: w.clone(),
                saved: c[1..].to_vec(),
            };
            let st = self.forward_step(g, q, trip, st, stacked)?;
            let mut next = vec![st.h];
            next.extend(st.saved);
            Ok((next, st.w))
        })?;
        let saved = out.split_off(1);
        Ok(FwdState {
            h: out.remove(0),
            w,
            saved,
        })
    }

    // ---------------------------------------------------------------- backward

    /// Runs the stack backward from `dh`; returns the activation cotangent at the stack's
    /// input and the stacked gradient slabs per kind.
    fn backward(
        &self,
        s: &Scope,
        dh: &Tensor,
        stacked: &[Vec<Tensor>],
        saved: &[Tensor],
    ) -> Result<(Tensor, Vec<Vec<Tensor>>)> {
        // Tie the parameters to the incoming cotangent: the first backward gathers cannot be
        // hoisted into the forward pass.
        let flat: Vec<Tensor> = stacked.iter().flatten().cloned().collect();
        let (dh, tied) = self.tie(dh, &flat)?;
        let mut it = tied.into_iter();
        let stacked: Vec<Vec<Tensor>> = stacked
            .iter()
            .map(|k| {
                k.iter()
                    .map(|_| it.next().expect("one tied value per slab"))
                    .collect()
            })
            .collect();
        let grads: Vec<Vec<Tensor>> = stacked
            .iter()
            .map(|k| k.iter().map(Tensor::zeros_like).collect::<Result<Vec<_>>>())
            .collect::<Result<_>>()?;
        let o = self.plan.options;
        let top = self.stack().len() - 1;
        let w = if o.prefetch_fsdp_weights {
            self.gather_layer(s, top, &stacked)?
        } else {
            Vec::new()
        };
        let st = BwdState {
            dh,
            w,
            pending: Vec::new(),
            grads,
        };
        let st = run_pass(s, &self.plan.backward.segments, st, &|s, g, trip, st| {
            self.backward_group(s, g, trip, st, &stacked, saved)
        })?;
        let BwdState {
            dh,
            pending,
            mut grads,
            ..
        } = st;
        if o.defer_grad_reduce_scatter {
            // The epilogue: layer 0's gradient was carried out of the last step.
            let row = s.scalar(self.stack().index_in_kind(0) as f64, DType::I32)?;
            let k0 = self.stack().kind_of(0);
            self.store(k0, &row, &pending, &mut grads[k0])?;
        }
        Ok((dh, grads))
    }

    /// One backward step at position `q` of group `g` (layers descending).
    fn backward_step(
        &self,
        g: &Group,
        q: &Tensor,
        trip: Option<&Trip>,
        st: BwdState,
        stacked: &[Vec<Tensor>],
        saved: &[Tensor],
    ) -> Result<BwdState> {
        let s = q.scope().clone();
        let t = trip.map(|tr| &tr.t);
        let o = self.plan.options;
        let base = g.layers[0];
        let k = g.kind;
        let BwdState {
            dh,
            w,
            pending,
            mut grads,
        } = st;
        // Deferred: first scatter the gradient the previous (upper) step carried in.
        if let Some(kp) = g.signature.1 {
            let row = self.index(base + 1, -1, trip).eval(&s, q, t)?;
            self.store(kp, &row, &pending, &mut grads[kp])?;
        }
        let row = self.index(base, -1, trip).eval(&s, q, t)?;
        let (w_now, w_next) = if o.prefetch_fsdp_weights {
            let next = match g.signature.0 {
                None => Vec::new(),
                Some(kn) => {
                    let (_, shards) = self.tie(&dh, &stacked[kn])?;
                    let next_row = self.index(base - 1, -1, trip).eval(&s, q, t)?;
                    self.gather(kn, &next_row, &shards)?
                }
            };
            (w, next)
        } else {
            (self.gather(k, &row, &stacked[k])?, Vec::new())
        };
        let zero = s.scalar(0.0, DType::I32)?;
        let act = &self.model.activation;
        let starts = row_starts(&row, &zero, act.rank());
        let mut sizes = vec![1];
        sizes.extend(&act.dims);
        let x = saved[k]
            .dynamic_slice(&starts, &sizes)?
            .reshape(&act.dims)?;
        let mut args = vec![x];
        args.extend(w_now);
        args.push(dh);
        let mut d = s.inline(&self.layer_vjps[k], &args)?;
        let dx = d.remove(0);
        let pending = if o.defer_grad_reduce_scatter {
            d
        } else {
            self.store(k, &row, &d, &mut grads[k])?;
            Vec::new()
        };
        Ok(BwdState {
            dh: dx,
            w: w_next,
            pending,
            grads,
        })
    }

    fn backward_group(
        &self,
        s: &Scope,
        g: &Group,
        trip: Option<&Trip>,
        st: BwdState,
        stacked: &[Vec<Tensor>],
        saved: &[Tensor],
    ) -> Result<BwdState> {
        if g.form != LoopForm::Peeled {
            return group_loop(s, g.form, st, &|q, st| {
                self.backward_step(g, q, trip, st, stacked, saved)
            });
        }
        // Weights and pending gradient change kind here: they enter as captured values and
        // leave as scanned outputs.
        let BwdState {
            dh,
            w,
            pending,
            grads,
        } = st;
        let ng: Vec<usize> = grads.iter().map(Vec::len).collect();
        let mut carry = vec![dh];
        carry.extend(grads.into_iter().flatten());
        let (out, mut ys) = single_trip(s, &carry, |q, c| {
            let st = BwdState {
                dh: c[0].clone(),
                w: w.clone(),
                pending: pending.clone(),
                grads: regroup(&c[1..], &ng),
            };
            let st = self.backward_step(g, q, trip, st, stacked, saved)?;
            let mut next = vec![st.dh];
            next.extend(st.grads.into_iter().flatten());
            let mut ys = st.w;
            ys.extend(st.pending);
            Ok((next, ys))
        })?;
        let nw = match g.signature.0 {
            Some(kn) if self.plan.options.prefetch_fsdp_weights => {
                self.model.kinds[kn].params.len()
            }
            _ => 0,
        };
        let pending = ys.split_off(nw);
        Ok(BwdState {
            dh: out[0].clone(),
            w: ys,
            pending,
            grads: regroup(&out[1..], &ng),
        })
    }
}

/// A loop carry that travels as a flat list of tensors.
trait Carry: Sized {
    /// What [`Carry::unflatten`] needs to split the list again.
    type Layout;
    fn layout(&self) -> Self::Layout;
    fn flatten(&self) -> Vec<Tensor>;
    fn unflatten(v: &[Tensor], layout: &Self::Layout) -> Self;
}

/// Lowers one group of a pass: `(scope, group, enclosing block trip, state) → state`.
type GroupFn<'a, C> = dyn Fn(&Scope, &Group, Option<&Trip>, C) -> Result<C> + 'a;

/// Runs a pass's segments in order: each group through `group`, each block loop as a counted
/// loop whose trip shifts the groups' layers.
fn run_pass<C: Carry>(
    s: &Scope,
    segments: &[Segment],
    state: C,
    group: &GroupFn<'_, C>,
) -> Result<C> {
    let mut st = state;
    for seg in segments {
        st = match seg {
            Segment::Group(g) => group(s, g, None, st)?,
            Segment::Blocks {
                trips,
                stride,
                groups,
            } => counted_loop(s, *trips, st, |t, mut st| {
                let trip = Trip {
                    t: t.clone(),
                    stride: *stride,
                };
                for g in groups {
                    st = group(t.scope(), g, Some(&trip), st)?;
                }
                Ok(st)
            })?,
        };
    }
    Ok(st)
}

/// `trips` trips of `body(trip counter, state)` in one loop, the counter carried first. A
/// loop of one trip is marked so XLA keeps it, and so the same structure at every depth.
fn counted_loop<C: Carry>(
    s: &Scope,
    trips: usize,
    state: C,
    body: impl FnOnce(&Tensor, C) -> Result<C>,
) -> Result<C> {
    let layout = state.layout();
    let mut carry = vec![s.scalar(0.0, DType::I32)?];
    carry.extend(state.flatten());
    let (out, _) = s.scan_with_attributes(
        &carry,
        &[],
        trips,
        false,
        keep_if_single(trips),
        |bs, c, _| {
            let st = body(&c[0], C::unflatten(&c[1..], &layout))?;
            let mut next = vec![c[0].add(&bs.scalar(1.0, DType::I32)?)?];
            next.extend(st.flatten());
            Ok((next, vec![]))
        },
    )?;
    Ok(C::unflatten(&out[1..], &layout))
}

/// The loop of a group of two or more steps: `step(position in the group, state)` run
/// `per trip` times per trip, after one peeled step (in a loop of its own) for an odd
/// ping-pong group.
fn group_loop<C: Carry>(
    s: &Scope,
    form: LoopForm,
    state: C,
    step: &dyn Fn(&Tensor, C) -> Result<C>,
) -> Result<C> {
    let (trips, per_trip, peel) = match form {
        LoopForm::Simple { trips } => (trips, 1, false),
        LoopForm::PingPong { trips, peel_first } => (trips, 2, peel_first),
        LoopForm::Peeled => (1, 1, false),
    };
    let mut state = state;
    if peel {
        state = counted_loop(s, 1, state, |i, st| step(i, st))?;
    }
    let first = i64::from(peel);
    counted_loop(s, trips, state, |i, mut st| {
        let bs = i.scope();
        for j in 0..per_trip {
            let q = i
                .mul(&bs.scalar(per_trip as f64, DType::I32)?)?
                .add(&bs.scalar((first + j) as f64, DType::I32)?)?;
            st = step(&q, st)?;
        }
        Ok(st)
    })
}

/// A single-trip loop (marked so XLA keeps it) over `carry`, whose body also returns values
/// of another shape than the carry; those leave as the loop's scanned outputs.
fn single_trip(
    s: &Scope,
    carry: &[Tensor],
    body: impl FnOnce(&Tensor, &[Tensor]) -> Result<(Vec<Tensor>, Vec<Tensor>)>,
) -> Result<(Vec<Tensor>, Vec<Tensor>)> {
    let (out, ys) = s.scan_with_attributes(carry, &[], 1, false, &[KEEP_LOOP], |bs, c, _| {
        body(&bs.scalar(0.0, DType::I32)?, c)
    })?;
    let ys = ys
        .iter()
        .map(|y| y.reshape(&y.dims()[1..]))
        .collect::<Result<_>>()?;
    Ok((out, ys))
}

/// The forward carry: the activation, the gathered weights of the layer about to run, and
/// the saved layer inputs per kind.
struct FwdState {
    h: Tensor,
    w: Vec<Tensor>,
    saved: Vec<Tensor>,
}

impl Carry for FwdState {
    type Layout = usize;

    fn layout(&self) -> usize {
        self.w.len()
    }

    fn flatten(&self) -> Vec<Tensor> {
        let mut v = vec![self.h.clone()];
        v.extend(self.w.iter().cloned());
        v.extend(self.saved.iter().cloned());
        v
    }

    fn unflatten(v: &[Tensor], nw: &usize) -> Self {
        FwdState {
            h: v[0].clone(),
            w: v[1..1 + nw].to_vec(),
            saved: v[1 + nw..].to_vec(),
        }
    }
}

/// The backward carry: activation cotangent, gathered weights of the layer about to run,
/// the pending deferred gradient, and the stacked gradient slabs per kind.
#[derive(Clone)]
struct BwdState {
    dh: Tensor,
    w: Vec<Tensor>,
    pending: Vec<Tensor>,
    grads: Vec<Vec<Tensor>>,
}

/// Lengths of a flattened [`BwdState`].
#[derive(Clone)]
struct BwdLayout {
    w: usize,
    pending: usize,
    grads: Vec<usize>,
}

impl Carry for BwdState {
    type Layout = BwdLayout;

    fn layout(&self) -> BwdLayout {
        BwdLayout {
            w: self.w.len(),
            pending: self.pending.len(),
            grads: self.grads.iter().map(Vec::len).collect(),
        }
    }

    fn flatten(&self) -> Vec<Tensor> {
        let mut v = vec![self.dh.clone()];
        v.extend(self.w.iter().cloned());
        v.extend(self.pending.iter().cloned());
        v.extend(self.grads.iter().flatten().cloned());
        v
    }

    fn unflatten(v: &[Tensor], l: &BwdLayout) -> Self {
        let w = v[1..1 + l.w].to_vec();
        let pending = v[1 + l.w..1 + l.w + l.pending].to_vec();
        BwdState {
            dh: v[0].clone(),
            w,
            pending,
            grads: regroup(&v[1 + l.w + l.pending..], &l.grads),
        }
    }
}

fn regroup(flat: &[Tensor], sizes: &[usize]) -> Vec<Vec<Tensor>> {
    let mut at = 0;
    sizes
        .iter()
        .map(|&n| {
            let g = flat[at..at + n].to_vec();
            at += n;
            g
        })
        .collect()
}

/// `pre` as a function of `(inputs…, outer weights…)`.
fn trace_pre(m: &StackModel) -> Result<Function> {
    let s = Scope::new("pre");
    let inputs: Vec<Tensor> = m.inputs.iter().map(|i| s.param(i.ty.clone())).collect();
    let outer: Vec<Tensor> = m
        .outer_params
        .iter()
        .map(|p| s.param(p.full_type()))
        .collect();
    let h = (m.pre)(&inputs, &outer)?;
    if h.ty() != &m.activation {
        return Err(Error::invalid(
            "fsdp",
            format!(
                "the pre-stack part returns {} but the activation is {}",
                h.ty(),
                m.activation
            ),
        ));
    }
    s.finish(&[h])
}

/// `post` as a function of `(activation, inputs…, outer weights…)` to the scalar local loss.
fn trace_post(m: &StackModel) -> Result<Function> {
    let s = Scope::new("post");
    let h = s.param(m.activation.clone());
    let inputs: Vec<Tensor> = m.inputs.iter().map(|i| s.param(i.ty.clone())).collect();
    let outer: Vec<Tensor> = m
        .outer_params
        .iter()
        .map(|p| s.param(p.full_type()))
        .collect();
    let loss = (m.post)(&h, &inputs, &outer)?;
    if loss.rank() != 0 || !loss.dtype().is_float() {
        return Err(Error::invalid(
            "fsdp",
            format!(
                "the post-stack part must return a float scalar loss, got {}",
                loss.ty()
            ),
        ));
    }
    s.finish(&[loss])
}
