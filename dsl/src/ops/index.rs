//! Indexing: gather along an axis, its scatter-add transpose, top-k, one-hot.

use crate::builder::{Scope, Tensor};
use crate::dtype::DType;
use crate::error::Result;
use crate::family::operands::check_axis;
use crate::ir::Op;
use crate::types::TensorType;

impl Tensor {
    /// Gathers slices along `axis` at integer `indices` (embedding lookup, token dispatch).
    /// Result: `self.dims[..axis] ++ indices.dims ++ self.dims[axis+1..]`.
    pub fn take(&self, indices: &Tensor, axis: usize) -> Result<Tensor> {
        Scope::apply1(Op::Take { axis }, &[self, indices], None)
    }

    /// Adds `updates` into `self` at `indices` along `axis` (the transpose of [`take`](Self::take)).
    pub fn scatter_add(&self, indices: &Tensor, updates: &Tensor, axis: usize) -> Result<Tensor> {
        Scope::apply1(Op::ScatterAdd { axis }, &[self, indices, updates], None)
    }

    /// The `k` largest values along the last dimension (descending) and their `i32` indices.
    pub fn top_k(&self, k: usize) -> Result<(Tensor, Tensor)> {
        let mut out = Scope::apply(Op::TopK { k }, &[self], None)?;
        let indices = out.remove(1);
        Ok((out.remove(0), indices))
    }

    /// One-hot encoding of integer indices: appends a dimension of size `depth`.
    pub fn one_hot(&self, depth: usize, dtype: DType) -> Result<Tensor> {
        let mut dims = self.dims().to_vec();
        dims.push(depth as i64);
        let rank = dims.len();
        let iota = self
            .scope()
            .iota(TensorType::new(self.dtype(), dims.clone()), rank - 1)?;
        let mapping: Vec<usize> = (0..self.rank()).collect();
        let idx = self.broadcast_in_dim(&dims, &mapping)?;
        let hot = idx.eq(&iota)?;
        let one = self
            .scope()
            .full(1.0, TensorType::new(dtype, dims.clone()))?;
        let zero = self.scope().full(0.0, TensorType::new(dtype, dims))?;
        hot.select(&one, &zero)
    }

    /// Checks that `axis` is a dimension of this tensor.
    pub(crate) fn check_axis(&self, op: &'static str, axis: usize) -> Result<()> {
        check_axis(op, axis, self.ty())
    }
}
