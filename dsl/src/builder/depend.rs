//! A value made to depend on another tensor without changing it: an order every backend keeps.

use crate::dtype::DType;
use crate::error::Result;

use super::Tensor;

impl Tensor {
    /// `self + T(a · 0)`, `a` the first element of `anchor` (as f32) and `T` this tensor's
    /// element type: the same value while `a` is finite, computed only once `anchor` exists.
    ///
    /// XLA folds no `x · 0` of floats (`NaN · 0` is NaN), so the dependency survives every
    /// pass, where an optimization barrier may be removed before the scheduling it was meant
    /// to constrain (XLA CPU drops them before it inserts loop copies), and an index computed
    /// so is not a constant XLA can fold a `case` or a dynamic slice on. When `a` is not
    /// finite the value may move; what reads it must tolerate that (dynamic slices clamp; a
    /// `case` runs its last branch on an index out of range).
    pub(crate) fn depending_on(&self, anchor: &Tensor) -> Result<Tensor> {
        let ones = vec![1; anchor.rank()];
        let first = anchor
            .slice(&vec![0; anchor.rank()], &ones, &ones)?
            .reshape(&[])?
            .convert(DType::F32)?;
        self.add(&first.scale(0.0)?.convert(self.dtype())?)
    }
}
