//! Where a kind's saved layer inputs live: in the rows of its gradient stacks, where their
//! element types agree.
//!
//! A layer's saved input is read for the last time when its backward step recomputes the
//! layer; the layer's reduced gradient is written after that, at the end of the same step or
//! at the start of the next (deferred). So the layer's row of each gradient stack can hold a
//! piece of its input first, then its gradient, and the step holds the larger of the two
//! stacks instead of both: at the backward's peak, every layer below holds its input and
//! every layer above its gradient. For the tiny Llama that removes the stack of saved inputs
//! from beside the gradients, the largest single item of the step's temp. The gradient stacks
//! keep their shapes, so the optimizer (or the step's results) read them as they are: one
//! buffer with a row per layer instead had XLA copy each weight's strided slice out of it for
//! the optimizer, a whole gradient more at the update, which left more temp than no sharing
//! at all; these stacks leave less (`stackscan compile-report` shows a step's temp).
//!
//! A layer's input is flattened and cut into pieces, one per gradient row in the weights'
//! order, each as long as the row or what is left; what no row holds (a kind whose input is
//! larger than its gradient) spills into a stack of its own.
//!
//! Sharing needs every write to a row after every read of it, in an order XLA can see, or it
//! copies the whole stack to keep its in-place update safe. A loop body's steps read their
//! inputs from the stacks as the body received them, and its gradient slabs are stored only
//! at the end of the body, at row indices made to depend on everything its last step's VJP
//! returns ([`Lowering::after`]); every read of the body reaches that VJP (the first step's
//! through its input cotangent), in whatever fusions XLA makes of it
//! ([`Lowering::backward_step_ops`](super::pass)). At 16 × 128 × 16 no backward loop
//! copies a stack (`compile-report`'s `copied KiB`).
//!
//! A kind whose weights' type differs from its activation's (mixed precision: bf16
//! activations, f32 master weights) keeps a stack of saved inputs of its own, as does a kind
//! without weights.

use crate::builder::Tensor;
use crate::dtype::DType;
use crate::error::Result;
use crate::ops::concatenate;

use super::lowering::{Lowering, row_starts};
use super::model::LayerKind;
use crate::types::TensorType;

/// How a kind's saved input is cut over the rows of its gradient stacks.
pub(super) struct SharedRows {
    /// Per weight: the elements of its slab (a row of its gradient stack, flattened).
    slabs: Vec<i64>,
    /// Per weight: the elements of the input its row holds, in order (0 once it is all held).
    pieces: Vec<i64>,
    /// Elements of the input no gradient row holds, kept in a stack of their own.
    spill: i64,
}

impl SharedRows {
    /// How the saved inputs of `kind` share its gradient stacks on `n` devices, or `None`
    /// where they do not: a kind without weights, or whose weights' type is not the
    /// activation's.
    pub(super) fn of(kind: &LayerKind, activation: &TensorType, n: usize) -> Option<SharedRows> {
        let params = &kind.params;
        if params.is_empty() || params.iter().any(|p| p.dtype != activation.dtype) {
            return None;
        }
        let slabs: Vec<i64> = params
            .iter()
            .map(|p| p.local_dims(n).iter().product())
            .collect();
        let mut left: i64 = activation.dims.iter().product();
        let pieces = slabs
            .iter()
            .map(|&n| {
                let piece = n.min(left);
                left -= piece;
                piece
            })
            .collect();
        Some(SharedRows {
            slabs,
            pieces,
            spill: left,
        })
    }
}

impl Lowering<'_> {
    /// Kind `k`'s stacks for its saved inputs before the forward pass writes them, one row per
    /// layer of the kind: its gradient stacks flattened (`[layers, slab]`, zeros) and a spill
    /// stack where the input does not fit, else one stack of inputs.
    ///
    /// Each stack's zeros come from a tensor of its own ([`Tensor::zeros_from`]): weight
    /// `p`'s stacked slabs `slabs[p]` for its rows, the pass's input `h0` for the spill or
    /// the single stack. Stacks of one shape zeroed alike were one broadcast to XLA, copied
    /// into each stack's buffer, a whole copy of the stacks every step.
    pub(super) fn saved_stacks(
        &self,
        k: usize,
        slabs: &[Tensor],
        h0: &Tensor,
    ) -> Result<Vec<Tensor>> {
        let act = self.activation();
        let layers = self.stack().layers_of_kind(k) as i64;
        let Some(rows) = self.shared_rows(k) else {
            let mut dims = vec![layers];
            dims.extend(&act.dims);
            return Ok(vec![h0.zeros_from(&act.with_dims(dims))?]);
        };
        let mut stacks: Vec<Tensor> = rows
            .slabs
            .iter()
            .zip(slabs)
            .map(|(&n, slab)| slab.zeros_from(&act.with_dims(vec![layers, n])))
            .collect::<Result<_>>()?;
        if rows.spill > 0 {
            stacks.push(h0.zeros_from(&act.with_dims(vec![layers, rows.spill]))?);
        }
        Ok(stacks)
    }

    /// Saves `h` as the input of the layer at `row` of kind `k`'s saved stacks.
    pub(super) fn save_input(
        &self,
        k: usize,
        stacks: &mut [Tensor],
        row: &Tensor,
        h: &Tensor,
    ) -> Result<()> {
        let zero = row.scope().scalar(0.0, DType::I32)?;
        let Some(rows) = self.shared_rows(k) else {
            let starts = row_starts(row, &zero, h.rank());
            stacks[0] = stacks[0].dynamic_update_slice(&h.expand_dims(0)?, &starts)?;
            return Ok(());
        };
        let flat = h.reshape(&[1, h.dims().iter().product()])?;
        let mut at = 0;
        for (i, n) in rows.runs() {
            let piece = flat.slice(&[0, at], &[1, at + n], &[1, 1])?;
            stacks[i] = stacks[i].dynamic_update_slice(&piece, &[row, &zero])?;
            at += n;
        }
        Ok(())
    }

    /// The input saved at `row` of kind `k`'s saved stacks, in the activation's shape.
    pub(super) fn saved_input(&self, k: usize, stacks: &[Tensor], row: &Tensor) -> Result<Tensor> {
        let act = self.activation();
        let zero = row.scope().scalar(0.0, DType::I32)?;
        let Some(rows) = self.shared_rows(k) else {
            let mut sizes = vec![1];
            sizes.extend(&act.dims);
            return stacks[0]
                .dynamic_slice(&row_starts(row, &zero, act.rank()), &sizes)?
                .reshape(&act.dims);
        };
        let pieces: Vec<Tensor> = rows
            .runs()
            .map(|(i, n)| stacks[i].dynamic_slice(&[row, &zero], &[1, n]))
            .collect::<Result<_>>()?;
        let flat = match pieces.as_slice() {
            [one] => one.clone(),
            _ => concatenate(&pieces.iter().collect::<Vec<_>>(), 1)?,
        };
        flat.reshape(&act.dims)
    }

    /// Kind `k`'s gradient stacks before the backward pass: its saved stacks where they are
    /// its gradient rows, else zeros shaped as its stacked weights `slabs`.
    pub(super) fn gradient_stacks(
        &self,
        k: usize,
        slabs: &[Tensor],
        saved: &[Tensor],
    ) -> Result<Vec<Tensor>> {
        match self.shared_rows(k) {
            Some(_) => Ok(saved.to_vec()),
            None => slabs
                .iter()
                .map(|slab| slab.zeros_from(slab.ty()))
                .collect(),
        }
    }

    /// Writes weight `p`'s reduced slab of one layer at `row` of kind `k`'s gradient stacks
    /// `acc`.
    pub(super) fn store_slab(
        &self,
        k: usize,
        p: usize,
        row: &Tensor,
        slab: &Tensor,
        acc: &mut [Tensor],
    ) -> Result<()> {
        let zero = row.scope().scalar(0.0, DType::I32)?;
        acc[p] = match self.shared_rows(k) {
            Some(rows) => {
                let flat = slab.reshape(&[1, rows.slabs[p]])?;
                acc[p].dynamic_update_slice(&flat, &[row, &zero])?
            }
            None => {
                let starts = row_starts(row, &zero, slab.rank());
                acc[p].dynamic_update_slice(&slab.expand_dims(0)?, &starts)?
            }
        };
        Ok(())
    }

    /// Kind `k`'s stacked gradients, one per weight shaped as its stacked slabs, from the
    /// gradient stacks the backward pass returned.
    pub(super) fn stacked_gradients(&self, k: usize, acc: Vec<Tensor>) -> Result<Vec<Tensor>> {
        if self.shared_rows(k).is_none() {
            return Ok(acc);
        }
        let layers = self.stack().layers_of_kind(k) as i64;
        self.model.kinds[k]
            .params
            .iter()
            .zip(acc)
            .map(|(spec, g)| {
                let mut dims = vec![layers];
                dims.extend(spec.local_dims(self.n));
                g.reshape(&dims)
            })
            .collect()
    }
}

impl SharedRows {
    /// The input's pieces in order: `(stack, elements)`, the spill stack last.
    fn runs(&self) -> impl Iterator<Item = (usize, i64)> + '_ {
        let spill = (self.spill > 0).then_some((self.slabs.len(), self.spill));
        self.pieces
            .iter()
            .copied()
            .enumerate()
            .filter(|&(_, n)| n > 0)
            .chain(spill)
    }
}
