//! The lowering's context and its primitives: addressing a layer's row in the stacked
//! slabs, all-gathering a layer's weights, reducing and storing its gradient.
//!
//! The passes ([`super::pass`]) are written in these terms; every collective of the stack
//! is issued here.

use std::cell::Cell;

use crate::autodiff::vjp;
use crate::auxiliary::{AuxOutput, AuxRole};
use crate::builder::{Scope, Tensor};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ir::{Axis, Function};
use crate::mesh::Mesh;
use crate::ops::optimization_barrier;
use crate::plan::{Plan, Stack};
use crate::precision::{Precision, traced_under};
use crate::types::TensorType;

use super::loops::Trip;
use super::model::{ParamSpec, StackModel};
use super::rows::SharedRows;
use super::step::GradientReduction;

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
pub(super) fn row_starts<'t>(row: &'t Tensor, zero: &'t Tensor, rest: usize) -> Vec<&'t Tensor> {
    let mut starts = vec![row];
    starts.extend(std::iter::repeat_n(zero, rest));
    starts
}

/// What lowering one model under one plan needs throughout: the model, the plan whose
/// groups and signatures decide every step, the mesh, and the traced layer functions.
pub(super) struct Lowering<'a> {
    pub(super) model: &'a StackModel,
    pub(super) plan: &'a Plan,
    mesh: Mesh,
    /// Every device of the mesh: the batch's axis, and the weights' unless they say otherwise.
    pub(super) axis: Axis,
    /// Devices of the mesh.
    pub(super) n: usize,
    /// Per kind: `(activation, weights…) → (activation, auxiliary outputs…)`.
    layers: Vec<Function>,
    /// Per kind: `(activation, weights…, d activation, d auxiliary outputs…) → (d activation,
    /// d weights…)`.
    layer_vjps: Vec<Function>,
    /// Every auxiliary output a kind records ([`crate::auxiliary`]), in first-recorded order.
    pub(super) aux: Vec<AuxOutput>,
    /// Per kind: the position in `aux` of each auxiliary result of its layer function.
    kind_aux: Vec<Vec<usize>>,
    reduction: GradientReduction,
    /// The plan's precision policy: what gathers, layers and reductions run in.
    pub(super) precision: Precision,
    /// The next unused scheduling group id ([`super::tags`]).
    pub(super) next_group: Cell<usize>,
    /// Per kind: how its saved inputs share its gradient rows, if they do ([`super::rows`]).
    rows: Vec<Option<SharedRows>>,
}

impl<'a> Lowering<'a> {
    pub(super) fn new(
        model: &'a StackModel,
        plan: &'a Plan,
        mesh: &Mesh,
        reduction: GradientReduction,
    ) -> Result<Self> {
        let n = mesh.size();
        let precision = plan.options.precision;
        let activation = precision.compute_type(&model.activation);
        let mut layers = Vec::new();
        let mut layer_vjps = Vec::new();
        let mut aux: Vec<AuxOutput> = Vec::new();
        let mut kind_aux = Vec::new();
        for kind in &model.kinds {
            let s = Scope::new(&kind.name);
            let h = s.param(activation.clone());
            let w: Vec<Tensor> = kind
                .params
                .iter()
                .map(|p| s.param(precision.compute_type(&p.gathered_type(n))))
                .collect();
            let out = (kind.forward)(&h, &w)
                .map_err(|e| traced_under(precision, &format!("layer `{}`", kind.name), e))?;
            if out.ty() != &activation {
                return Err(Error::invalid(
                    "fsdp",
                    format!(
                        "layer `{}` maps the activation {} to {}; layers must keep its type",
                        kind.name,
                        activation,
                        out.ty()
                    ),
                ));
            }
            let mut results = vec![out];
            let mut slots = Vec::new();
            for (output, value) in s.take_aux() {
                let slot = match aux.iter().position(|a| a.name == output.name) {
                    Some(g) if aux[g].role != output.role => {
                        return Err(Error::invalid(
                            "fsdp",
                            format!(
                                "layer `{}` records auxiliary output `{}` as {:?}, another \
                                 kind as {:?}",
                                kind.name, output.name, output.role, aux[g].role
                            ),
                        ));
                    }
                    Some(g) => g,
                    None => {
                        aux.push(output);
                        aux.len() - 1
                    }
                };
                slots.push(slot);
                // Accumulated over layers in f32 whatever the layer computes in.
                results.push(value.convert(DType::F32)?);
            }
            let f = s.finish(&results)?;
            layer_vjps.push(vjp(&f)?);
            layers.push(f);
            kind_aux.push(slots);
        }
        let rows = model
            .kinds
            .iter()
            .map(|kind| SharedRows::of(kind, &activation, n))
            .collect();
        Ok(Lowering {
            rows,
            model,
            plan,
            axis: mesh.all(),
            mesh: mesh.clone(),
            n,
            layers,
            layer_vjps,
            aux,
            kind_aux,
            reduction,
            precision,
            next_group: Cell::new(0),
        })
    }

    /// How kind `k`'s saved inputs share its gradient stacks, or `None` where they do not
    /// (and a step of the kind reads its saved input from stacks of its own).
    pub(super) fn shared_rows(&self, k: usize) -> Option<&SharedRows> {
        self.rows[k].as_ref()
    }

    /// The activation's type as the layers compute on it.
    pub(super) fn activation(&self) -> TensorType {
        self.precision.compute_type(&self.model.activation)
    }

    /// A weight (slab) of `spec` cast to the type it is gathered and computed in.
    pub(super) fn to_compute(&self, spec: &ParamSpec, w: &Tensor) -> Result<Tensor> {
        w.convert(self.precision.compute_dtype(spec.dtype))
    }

    pub(super) fn kinds(&self) -> usize {
        self.model.kinds.len()
    }

    pub(super) fn stack(&self) -> &Stack {
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

    /// The row in its kind's stack of the layer `layer + step_dir · q`, shifted by the trip:
    /// the layer a step at position `q` of a group starting at `layer` runs.
    pub(super) fn row(
        &self,
        layer: usize,
        step_dir: i64,
        trip: Option<&Trip>,
        q: &Tensor,
    ) -> Result<Tensor> {
        let kind = self.stack().kind_of(layer);
        let per_trip = trip.map_or(0, |tr| tr.stride.signum() as i64 * self.per_block(kind));
        let index = Index {
            base: self.stack().index_in_kind(layer) as i64,
            per_step: step_dir,
            per_trip,
        };
        index.eval(&q.scope().clone(), q, trip.map(|tr| &tr.t))
    }

    /// The row of a fixed layer, outside any loop.
    pub(super) fn fixed_row(&self, s: &Scope, layer: usize) -> Result<Tensor> {
        s.scalar(self.stack().index_in_kind(layer) as f64, DType::I32)
    }

    /// All-gathers one layer's weights (natural layout) from the stacked slabs; `ahead`:
    /// for a later step (a prefetch), whose collectives are tagged as explicit FSDP gathers,
    /// and whose sharded slabs are read only once `ahead` exists ([`Lowering::after`]).
    ///
    /// Only the slabs that feed an all-gather wait: a replicated weight's row is read by
    /// its users, and XLA fuses that read (anchor included) into each of them, so an
    /// anchored row kept the anchor alive to the weight's last use. With the step's input
    /// as the anchor, that was the loop body's end: the carried activation (or cotangent)
    /// was then copied once a trip, and lived through the backward's peak.
    pub(super) fn gather(
        &self,
        kind: usize,
        row: &Tensor,
        shards: &[Tensor],
        ahead: Option<&[Tensor]>,
    ) -> Result<Vec<Tensor>> {
        let s = row.scope().clone();
        let zero = s.scalar(0.0, DType::I32)?;
        let anchored = match ahead {
            Some(anchors) => Some(self.after(anchors, row)?),
            None => None,
        };
        self.model.kinds[kind]
            .params
            .iter()
            .zip(shards)
            .map(|(spec, stacked)| {
                let local = spec.local_dims(self.n);
                let row = match (&anchored, spec.shard_dim) {
                    (Some(anchored), Some(_)) => anchored,
                    _ => row,
                };
                let starts = row_starts(row, &zero, local.len());
                let mut sizes = vec![1];
                sizes.extend(&local);
                let slab = stacked.dynamic_slice(&starts, &sizes)?.reshape(&local)?;
                self.gather_slab(spec, slab, ahead.is_some())
            })
            .collect()
    }

    /// All-gathers one weight's slab over its gather axis, back to natural layout, in the
    /// compute type (cast before the gather, so the gather moves the narrow type); `ahead`:
    /// a prefetch, whose gather (only) is tagged as an explicit FSDP gather.
    pub(super) fn gather_slab(
        &self,
        spec: &ParamSpec,
        slab: Tensor,
        ahead: bool,
    ) -> Result<Tensor> {
        let slab = self.to_compute(spec, &slab)?;
        match spec.shard_dim {
            None => Ok(slab),
            Some(_) => {
                let axis = spec.gather_axis(&self.mesh);
                let gathered = if ahead {
                    self.explicit_fsdp(&slab.scope().clone(), || slab.all_gather(0, &axis))?
                } else {
                    slab.all_gather(0, &axis)?
                };
                gathered.transpose(&spec.shard_major_to_natural())
            }
        }
    }

    /// All-gathers the weights of a fixed layer (the prologue of a pass).
    pub(super) fn gather_layer(
        &self,
        s: &Scope,
        layer: usize,
        stacked: &[Vec<Tensor>],
    ) -> Result<Vec<Tensor>> {
        let kind = self.stack().kind_of(layer);
        let row = self.fixed_row(s, layer)?;
        self.gather(kind, &row, &stacked[kind], None)
    }

    /// Reduces a per-device gradient to this device's slab: a reduce-scatter along the
    /// shard-major dimension 0 over the axis the weight was gathered over (summing, never
    /// slicing), or a psum over every device for a replicated parameter. The reduction runs
    /// in the policy's reduce type; the slab comes back in the weight's own type.
    pub(super) fn reduce(&self, spec: &ParamSpec, grad: &Tensor) -> Result<Tensor> {
        let grad = grad.convert(self.precision.reduce_dtype(spec.dtype))?;
        self.reduce_in_place(spec, &grad)?.convert(spec.dtype)
    }

    /// [`Lowering::reduce`] in the gradient's own type.
    fn reduce_in_place(&self, spec: &ParamSpec, grad: &Tensor) -> Result<Tensor> {
        let axis = spec.gather_axis(&self.mesh);
        match (spec.shard_dim, self.reduction) {
            (None, _) => grad.psum(&self.axis),
            (Some(_), GradientReduction::ReduceScatter) => grad
                .transpose(&spec.natural_to_shard_major())?
                .reduce_scatter(0, &axis),
            (Some(_), GradientReduction::SliceUnreduced) => {
                let major = grad.transpose(&spec.natural_to_shard_major())?;
                let s = grad.scope().clone();
                let slab = major.dims()[0] / axis.size as i64;
                let start = s
                    .axis_index(&axis)?
                    .mul(&s.scalar(slab as f64, DType::I32)?)?;
                let zero = s.scalar(0.0, DType::I32)?;
                let starts = row_starts(&start, &zero, major.rank() - 1);
                let mut sizes = major.dims().to_vec();
                sizes[0] = slab;
                major.dynamic_slice(&starts, &sizes)
            }
        }
    }

    /// Reduces one layer's gradients of kind `kind` to this device's slabs.
    pub(super) fn reduce_slabs(&self, kind: usize, grads: &[Tensor]) -> Result<Vec<Tensor>> {
        self.model.kinds[kind]
            .params
            .iter()
            .zip(grads)
            .map(|(spec, g)| self.reduce(spec, g))
            .collect()
    }

    /// Writes one layer's reduced slabs at `row` of kind `kind`'s gradient stacks `acc`.
    pub(super) fn store_slabs(
        &self,
        kind: usize,
        row: &Tensor,
        slabs: &[Tensor],
        acc: &mut [Tensor],
    ) -> Result<()> {
        for (p, slab) in slabs.iter().enumerate() {
            self.store_slab(kind, p, row, slab, acc)?;
        }
        Ok(())
    }

    /// Reduces one layer's gradients and writes the slabs into the kind's gradient stacks
    /// ([`Lowering::store_slabs`]); returns the slabs (what a later step orders itself after,
    /// [`Lowering::after`]).
    pub(super) fn store(
        &self,
        kind: usize,
        row: &Tensor,
        grads: &[Tensor],
        acc: &mut [Tensor],
    ) -> Result<Vec<Tensor>> {
        let slabs = self.reduce_slabs(kind, grads)?;
        self.store_slabs(kind, row, &slabs, acc)?;
        Ok(slabs)
    }

    /// `index` made to depend on `anchors`: `index + Σ i32(a[0, …, 0] · 0)`, the same index
    /// while those elements are finite. A read at the result cannot start before every
    /// anchor exists, on every backend. XLA CPU removes optimization barriers
    /// ([`Lowering::tie`]) before it inserts the copies of loop-carried buffers: a prefetch
    /// tied by a barrier looked free to overwrite the carried weights while the step still
    /// read them, so XLA copied every carried weight (and deferred gradient) twice per trip,
    /// into the loop body and out of it. A data dependency survives every pass, and XLA
    /// folds no `x · 0` of floats (NaN · 0 is NaN). When an element is not finite the index
    /// may move (dynamic slices clamp it), and so may what is computed from it; the loss is
    /// then not finite either and the step is skipped.
    pub(super) fn after(&self, anchors: &[Tensor], index: &Tensor) -> Result<Tensor> {
        anchors
            .iter()
            .try_fold(index.clone(), |index, a| index.depending_on(a))
    }

    /// Ties `values` to `anchor` so that nothing reading them starts before `anchor` exists:
    /// a scheduling hint for backends that keep optimization barriers until they schedule
    /// (XLA CPU drops them early; an order that must hold everywhere is a data dependency,
    /// [`Lowering::after`]).
    pub(super) fn tie(&self, anchor: &Tensor, values: &[Tensor]) -> Result<(Tensor, Vec<Tensor>)> {
        let mut all = vec![anchor];
        all.extend(values.iter());
        let mut out = optimization_barrier(&all)?;
        let rest = out.split_off(1);
        Ok((out.remove(0), rest))
    }

    /// Runs a layer of kind `k` on `h` with its gathered weights `w`, adding its auxiliary
    /// outputs into the accumulators `aux` (one per [`Lowering::aux`]).
    pub(super) fn run_layer(
        &self,
        k: usize,
        h: &Tensor,
        w: &[Tensor],
        aux: &mut [Tensor],
    ) -> Result<Tensor> {
        let mut args = vec![h.clone()];
        args.extend(w.iter().cloned());
        let mut out = h.scope().inline(&self.layers[k], &args)?;
        for (&g, value) in self.kind_aux[k].iter().zip(&out[1..]) {
            aux[g] = aux[g].add(value)?;
        }
        Ok(out.remove(0))
    }

    /// Zero accumulators for the auxiliary outputs, one `f32[]` each.
    pub(super) fn aux_zeros(&self, s: &Scope) -> Result<Vec<Tensor>> {
        self.aux.iter().map(|_| s.scalar(0.0, DType::F32)).collect()
    }

    /// How many layers record auxiliary output `g`.
    pub(super) fn aux_layers(&self, g: usize) -> usize {
        (0..self.kinds())
            .filter(|&k| self.kind_aux[k].contains(&g))
            .map(|k| self.stack().layers_of_kind(k))
            .sum()
    }

    /// Differentiates a layer of kind `k` at its input `x` with its gathered weights `w`:
    /// `(d input, d weights…)` for the cotangent `dh`.
    pub(super) fn layer_vjp(
        &self,
        k: usize,
        x: Tensor,
        w: Vec<Tensor>,
        dh: Tensor,
    ) -> Result<Vec<Tensor>> {
        let s = x.scope().clone();
        let mut args = vec![x];
        args.extend(w);
        args.push(dh);
        // A loss term enters the device's loss as the loss does (seeded 1/n, the mean over
        // devices); a metric is not differentiated.
        for &g in &self.kind_aux[k] {
            let seed = match self.aux[g].role {
                AuxRole::Loss => 1.0 / self.n as f64,
                AuxRole::Metric => 0.0,
            };
            args.push(s.scalar(seed, DType::F32)?);
        }
        s.inline(&self.layer_vjps[k], &args)
    }
}
