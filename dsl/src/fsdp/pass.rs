//! The forward and backward passes over the stack, step by step.
//!
//! Every decision a step takes (gather its weights or take them from the carry, prefetch
//! which kind, scatter which gradient when) is read from its group's
//! [`Signature`](crate::plan::Signature), and the prologue and epilogue around a pass from
//! the [`Pass`](crate::plan::Pass): the plan is the one source of what a step carries. Of
//! the options it was made from only one is consulted here, one that changes no carry: where
//! in its step the prefetch gather is issued ([`PrefetchIssue`]).

use std::cell::RefCell;

use crate::builder::{Scope, Tensor};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::plan::{Group, LoopForm, OwnGradient, PrefetchIssue, WeightSource};

use super::loops::{Trip, run_pass};
use super::lowering::Lowering;
use super::state::{BwdState, FwdState};

/// Layer offset from one step to the next going forward.
const UP: i64 = 1;
/// Layer offset from one step to the next going backward.
const DOWN: i64 = -1;

impl Lowering<'_> {
    /// Runs the stack forward; returns the last activation, the stacks of saved layer inputs
    /// per kind ([`super::rows`]) and the auxiliary outputs summed over layers.
    pub(super) fn forward(
        &self,
        s: &Scope,
        h0: &Tensor,
        stacked: &[Vec<Tensor>],
    ) -> Result<(Tensor, Vec<Vec<Tensor>>, Vec<Tensor>)> {
        let saved: Vec<Vec<Tensor>> = (0..self.kinds())
            .map(|k| self.saved_stacks(k, &stacked[k], h0))
            .collect::<Result<_>>()?;
        let w = match self.plan.forward.prologue_gather() {
            Some(layer) => self.gather_layer(s, layer, stacked)?,
            None => Vec::new(),
        };
        let st = FwdState {
            h: h0.clone(),
            w,
            saved,
            aux: self.aux_zeros(s)?,
        };
        let kind = |k: usize| self.model.kinds[k].name.clone();
        let st = run_pass(
            s,
            "forward",
            &kind,
            &self.plan.forward.segments,
            st,
            &|g, trip, q, _, st| self.forward_step(g, q, trip, st, stacked),
        )?;
        Ok((st.h, st.saved, st.aux))
    }

    /// One forward step at position `q` of group `g`: save the input, take this layer's
    /// weights and gather the next layer's, run the layer.
    fn forward_step(
        &self,
        g: &Group,
        q: &Tensor,
        trip: Option<&Trip>,
        st: FwdState,
        stacked: &[Vec<Tensor>],
    ) -> Result<FwdState> {
        let s = q.scope().clone();
        self.scheduling_group(&s, || {
            let k = g.signature.run;
            let FwdState {
                h,
                w,
                mut saved,
                mut aux,
            } = st;
            let row = self.row(g.layers[0], UP, trip, q)?;
            self.save_input(k, &mut saved[k], &row, &h)?;
            let w_now = self.weights_now(g, &row, w, stacked)?;
            let early = match self.issue_early() {
                true => Some(self.prefetch(g, q, trip, std::slice::from_ref(&h), stacked, UP)?),
                false => None,
            };
            let out = self.run_layer(k, &h, &w_now, &mut aux)?;
            let w_next = match early {
                Some(w) => w,
                None => self.prefetch(g, q, trip, std::slice::from_ref(&out), stacked, UP)?,
            };
            Ok(FwdState {
                h: out,
                w: w_next,
                saved,
                aux,
            })
        })
    }

    /// The weights a step runs on: from the carry, or gathered now.
    fn weights_now(
        &self,
        g: &Group,
        row: &Tensor,
        carried: Vec<Tensor>,
        stacked: &[Vec<Tensor>],
    ) -> Result<Vec<Tensor>> {
        let sig = g.signature;
        match sig.weights {
            WeightSource::Carried => Ok(carried),
            WeightSource::GatheredAtUse => self.gather(sig.run, row, &stacked[sig.run], None),
        }
    }

    /// Whether steps issue the next layer's gather with their input rather than after their
    /// layer ([`PrefetchIssue`]; unresolved, it is issued early).
    fn issue_early(&self) -> bool {
        self.plan.options.prefetch_issue != PrefetchIssue::AfterCompute
    }

    /// The weights a step gathers for the next step (none where its signature prefetches
    /// nothing). The gather depends on `anchor` ([`Lowering::after`]): the step's input where
    /// it is issued early (it may not start before the previous layer's last read of the
    /// buffer it replaces), every result of the step's layer where it is issued after it
    /// (forward: its output; backward: the VJP's input cotangent and weight gradients).
    fn prefetch(
        &self,
        g: &Group,
        q: &Tensor,
        trip: Option<&Trip>,
        anchor: &[Tensor],
        stacked: &[Vec<Tensor>],
        step_dir: i64,
    ) -> Result<Vec<Tensor>> {
        match g.signature.prefetch {
            None => Ok(Vec::new()),
            Some(kn) => {
                let next_layer = g.layers[0].wrapping_add_signed(step_dir as isize);
                let next_row = self.row(next_layer, step_dir, trip, q)?;
                self.gather(kn, &next_row, &stacked[kn], Some(anchor))
            }
        }
    }

    /// Runs the stack backward from `dh`; returns the activation cotangent at the stack's
    /// input and the stacked gradient slabs per kind.
    pub(super) fn backward(
        &self,
        s: &Scope,
        dh: &Tensor,
        stacked: &[Vec<Tensor>],
        saved: &[Vec<Tensor>],
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
        let grads: Vec<Vec<Tensor>> = (0..self.kinds())
            .map(|k| self.gradient_stacks(k, &stacked[k], &saved[k]))
            .collect::<Result<_>>()?;
        let pass = &self.plan.backward;
        let w = match pass.prologue_gather() {
            Some(layer) => self.gather_layer(s, layer, &stacked)?,
            None => Vec::new(),
        };
        let st = BwdState {
            dh,
            fence: s.scalar(0.0, DType::I32)?,
            w,
            pending: Vec::new(),
            grads,
        };
        let kind = |k: usize| self.model.kinds[k].name.clone();
        let unstored = RefCell::new(Vec::new());
        let st = run_pass(
            s,
            "backward",
            &kind,
            &pass.segments,
            st,
            &|g, trip, q, ends, st| {
                let last = pass
                    .epilogue_scatter()
                    .is_some_and(|layer| g.layers == [layer]);
                let at = StepAt {
                    q,
                    trip,
                    ends,
                    last: last && trip.is_none(),
                };
                self.backward_step(g, &at, st, &stacked, saved, &unstored)
            },
        )?;
        if !unstored.borrow().is_empty() {
            return Err(Error::invalid(
                "fsdp",
                "internal: gradient slabs left unstored at the end of the backward pass",
            ));
        }
        let BwdState {
            dh,
            pending,
            mut grads,
            ..
        } = st;
        if let Some(layer) = pass.epilogue_scatter()
            && !pending.is_empty()
        {
            // The last step carried its gradient out of the pass.
            let row = self.fixed_row(s, layer)?;
            let k = self.stack().kind_of(layer);
            self.store(k, &row, &pending, &mut grads[k])?;
        }
        let grads = grads
            .into_iter()
            .enumerate()
            .map(|(k, acc)| self.stacked_gradients(k, acc))
            .collect::<Result<_>>()?;
        Ok((dh, grads))
    }

    /// One backward step (layers descending): scatter the gradient carried in, take this
    /// layer's weights and gather the next (lower) layer's, recompute the layer from its
    /// saved input and differentiate it.
    fn backward_step(
        &self,
        g: &Group,
        at: &StepAt<'_>,
        st: BwdState,
        stacked: &[Vec<Tensor>],
        saved: &[Vec<Tensor>],
        unstored: &RefCell<Vec<Unstored>>,
    ) -> Result<BwdState> {
        self.scheduling_group(at.q.scope(), || {
            self.backward_step_ops(g, at, st, stacked, saved, &mut unstored.borrow_mut())
        })
    }

    /// The ops of [`Self::backward_step`], built in its scheduling group. `at.last`: this is
    /// the pass's last step, alone in its (peeled) loop, whose gradient the plan defers past
    /// the pass ([`crate::plan::Pass::epilogue_scatter`]); it is stored here, at the end of
    /// that loop's body, rather than after the loop. Stored after the loop, its
    /// dynamic-update-slice into the gradient stack had two readers (the optimizer's norm and
    /// its update), and XLA duplicated it into each, so every stacked gradient was written
    /// twice more at the end of the step: three whole stacks of temp for the 32-layer tiny
    /// Llama (`cli/tests/deferred_memory.rs`). In the loop body it updates the carried
    /// stack in place, and the loop's result has no producer left to duplicate.
    ///
    /// A kind whose saved inputs live in its gradient rows ([`super::rows`]) stores its
    /// slabs only at the end of a loop body (`at.ends`), after the VJP of the body's last
    /// step: every read of those rows in the body comes first (the first step's reads reach
    /// the last step's VJP through its input cotangent), and every read comes from the
    /// body's input. A store at once, with the next step reading the stored stack, let XLA
    /// fuse that read into one of the stack before the store, and then copy the whole
    /// stack in and out of every trip to keep the store in place.
    fn backward_step_ops(
        &self,
        g: &Group,
        at: &StepAt<'_>,
        st: BwdState,
        stacked: &[Vec<Tensor>],
        saved: &[Vec<Tensor>],
        unstored: &mut Vec<Unstored>,
    ) -> Result<BwdState> {
        let (q, trip) = (at.q, at.trip);
        let s = q.scope().clone();
        let base = g.layers[0];
        let k = g.signature.run;
        let BwdState {
            dh,
            fence,
            w,
            pending,
            mut grads,
        } = st;
        let zero = s.scalar(0.0, DType::I32)?;
        // The fence passed on: a zero after everything this step reduce-scatters (and, when
        // it defers its own gradient, after its input cotangent).
        let mut fence_out = None;
        if let Some(kp) = g.signature.pending_grad {
            // The previous step ran the layer above. A peeled step's loop takes the pending
            // gradient from outside its carry (its shape is another kind's); tied to the
            // carried fence, its reduce-scatter is built in the loop body, where it overlaps
            // this step's layer, rather than before the loop, where it overlaps nothing.
            let pending = match g.form {
                LoopForm::Peeled => self.tie(&fence, &pending)?.1,
                _ => pending,
            };
            let row = self.row(base + 1, DOWN, trip, q)?;
            let scattered = self.scatter(kp, row, &pending, &mut grads[kp], unstored)?;
            fence_out = Some(self.after(&scattered, &zero)?);
        }
        let row = self.row(base, DOWN, trip, q)?;
        let w_now = self.weights_now(g, &row, w, stacked)?;
        let early = match self.issue_early() {
            true => Some(self.prefetch(g, q, trip, std::slice::from_ref(&dh), stacked, DOWN)?),
            false => None,
        };
        // The layer is recomputed after the previous step's reduce-scatter (the one it
        // deferred, or its own): the gradient computed now may then reuse the buffer that
        // scatter read instead of living beside it.
        let x_row = row.add(&fence)?;
        let shared = self.shared_rows(k).is_some();
        let stacks = if shared { &grads[k] } else { &saved[k] };
        let x = self.saved_input(k, stacks, &x_row)?;
        let mut d = self.layer_vjp(k, x, w_now, dh)?;
        let w_next = match early {
            Some(w) => w,
            None => self.prefetch(g, q, trip, &d, stacked, DOWN)?,
        };
        // A zero after the VJP's every result: what the body's stores wait for.
        let read = match at.ends && (shared || !unstored.is_empty()) {
            true => Some(self.after(&d, &zero)?),
            false => None,
        };
        let dx = d.remove(0);
        let pending = match g.signature.own_grad {
            OwnGradient::Deferred if at.last => {
                self.scatter(k, row, &d, &mut grads[k], unstored)?;
                Vec::new()
            }
            // The next step recomputes its layer after this step's input cotangent, the end
            // of its VJP, much as it does after a step that scatters its own gradient. With
            // only the last scatter to wait for, a scheduler free to reorder (the newer CPU
            // plugin's) recomputed the next layer while this one's backward was still live,
            // two layers of MLP activations at once, so the deferred step's temp grew well past
            // the step's without deferral; after this fence it is about level with it (with the
            // prefetch issued with the input). Waiting for the whole deferred gradient as well
            // costs the default plugin only a little temp.
            OwnGradient::Deferred => {
                fence_out = Some(self.after(
                    std::slice::from_ref(&dx),
                    fence_out.as_ref().unwrap_or(&zero),
                )?);
                d
            }
            // A backward step always has a gradient; `Absent` describes forward steps.
            // Scattered at the end of its own step: the next step recomputes after it, so
            // this step's unreduced gradient is gone before the next one's is made.
            OwnGradient::Scattered | OwnGradient::Absent => {
                let scattered = self.scatter(k, row, &d, &mut grads[k], unstored)?;
                fence_out = Some(self.after(&scattered, fence_out.as_ref().unwrap_or(&zero))?);
                Vec::new()
            }
        };
        if let Some(read) = read {
            for u in unstored.drain(..) {
                self.store_slabs(u.kind, &u.row.add(&read)?, &u.slabs, &mut grads[u.kind])?;
            }
        }
        Ok(BwdState {
            dh: dx,
            fence: fence_out.unwrap_or(fence),
            w: w_next,
            pending,
            grads,
        })
    }
}

impl Lowering<'_> {
    /// Reduce-scatters one layer's gradients of kind `kind` and stores the slabs at `row` of
    /// its gradient stacks `acc`; where those rows still hold saved inputs the body reads
    /// ([`super::rows`]), queues the slabs in `unstored` instead, for the body's end. Returns
    /// the slabs.
    fn scatter(
        &self,
        kind: usize,
        row: Tensor,
        grads: &[Tensor],
        acc: &mut [Tensor],
        unstored: &mut Vec<Unstored>,
    ) -> Result<Vec<Tensor>> {
        if self.shared_rows(kind).is_none() {
            return self.store(kind, &row, grads, acc);
        }
        let slabs = self.reduce_slabs(kind, grads)?;
        unstored.push(Unstored {
            kind,
            row,
            slabs: slabs.clone(),
        });
        Ok(slabs)
    }
}

/// Where a backward step runs: its position `q` in its group, the enclosing block trip, whether
/// it ends its loop body ([`super::loops::StepFn`]) and whether it is the pass's last step
/// ([`Lowering::backward_step_ops`]).
struct StepAt<'t> {
    q: &'t Tensor,
    trip: Option<&'t Trip>,
    ends: bool,
    last: bool,
}

/// A layer's reduced gradient slabs not yet stored into its kind's gradient rows (which still
/// hold saved inputs the loop body reads, [`super::rows`]).
struct Unstored {
    kind: usize,
    row: Tensor,
    slabs: Vec<Tensor>,
}
