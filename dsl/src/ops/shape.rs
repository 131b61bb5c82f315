//! Shape ops: broadcast, reshape, transpose, slices, concatenation, padding.

use crate::builder::{Scope, Tensor};
use crate::error::{Error, Result};
use crate::family::operands::check_axis;
use crate::ir::Op;

impl Tensor {
    /// Broadcasts to `dims`: operand dimension `i` becomes result dimension `mapping[i]`.
    pub fn broadcast_in_dim(&self, dims: &[i64], mapping: &[usize]) -> Result<Tensor> {
        Scope::apply1(
            Op::BroadcastInDim {
                dims: mapping.to_vec(),
            },
            &[self],
            Some(&self.ty().with_dims(dims.to_vec())),
        )
    }

    /// NumPy-style broadcast to `dims`, aligning trailing dimensions.
    pub fn broadcast_to(&self, dims: &[i64]) -> Result<Tensor> {
        if self.dims() == dims {
            return Ok(self.clone());
        }
        if self.rank() > dims.len() {
            return Err(Error::invalid(
                "broadcast_in_dim",
                format!("cannot broadcast {} to rank {}", self.ty(), dims.len()),
            ));
        }
        let offset = dims.len() - self.rank();
        let mapping: Vec<usize> = (0..self.rank()).map(|i| i + offset).collect();
        self.broadcast_in_dim(dims, &mapping)
    }

    /// Same elements, new dimensions (row-major order).
    pub fn reshape(&self, dims: &[i64]) -> Result<Tensor> {
        if self.dims() == dims {
            return Ok(self.clone());
        }
        Scope::apply1(
            Op::Reshape,
            &[self],
            Some(&self.ty().with_dims(dims.to_vec())),
        )
    }

    /// Permutes dimensions: result dimension `i` is dimension `perm[i]`.
    pub fn transpose(&self, perm: &[usize]) -> Result<Tensor> {
        if perm.iter().enumerate().all(|(i, &p)| i == p) && perm.len() == self.rank() {
            return Ok(self.clone());
        }
        Scope::apply1(
            Op::Transpose {
                perm: perm.to_vec(),
            },
            &[self],
            None,
        )
    }

    /// Static slice with strides.
    pub fn slice(&self, start: &[i64], limit: &[i64], stride: &[i64]) -> Result<Tensor> {
        Scope::apply1(
            Op::Slice {
                start: start.to_vec(),
                limit: limit.to_vec(),
                stride: stride.to_vec(),
            },
            &[self],
            None,
        )
    }

    /// `x[.., start..end, ..]` along one axis.
    pub fn slice_axis(&self, axis: usize, start: i64, end: i64) -> Result<Tensor> {
        check_axis("slice", axis, self.ty())?;
        let mut s = vec![0; self.rank()];
        let mut l = self.dims().to_vec();
        s[axis] = start;
        l[axis] = end;
        self.slice(&s, &l, &vec![1; self.rank()])
    }

    /// Slice of static `sizes` at `i32[]` start indices, one per dimension.
    pub fn dynamic_slice(&self, starts: &[&Tensor], sizes: &[i64]) -> Result<Tensor> {
        let mut operands = vec![self];
        operands.extend_from_slice(starts);
        Scope::apply1(
            Op::DynamicSlice {
                sizes: sizes.to_vec(),
            },
            &operands,
            None,
        )
    }

    /// Writes `update` at `i32[]` start indices.
    pub fn dynamic_update_slice(&self, update: &Tensor, starts: &[&Tensor]) -> Result<Tensor> {
        let mut operands = vec![self, update];
        operands.extend_from_slice(starts);
        Scope::apply1(Op::DynamicUpdateSlice, &operands, None)
    }

    /// Pads with `value` (a scalar of the same type): `low`/`high` at the edges, `interior`
    /// between elements.
    pub fn pad(
        &self,
        value: &Tensor,
        low: &[i64],
        high: &[i64],
        interior: &[i64],
    ) -> Result<Tensor> {
        Scope::apply1(
            Op::Pad {
                low: low.to_vec(),
                high: high.to_vec(),
                interior: interior.to_vec(),
            },
            &[self, value],
            None,
        )
    }

    /// Inserts a dimension of size 1 at `axis`.
    pub fn expand_dims(&self, axis: usize) -> Result<Tensor> {
        if axis > self.rank() {
            return Err(Error::AxisOutOfRange {
                op: "reshape",
                axis: axis as i64,
                operand: self.ty().clone(),
            });
        }
        let mut dims = self.dims().to_vec();
        dims.insert(axis, 1);
        self.reshape(&dims)
    }

    /// Removes a dimension of size 1.
    pub fn squeeze(&self, axis: usize) -> Result<Tensor> {
        check_axis("reshape", axis, self.ty())?;
        if self.dims()[axis] != 1 {
            return Err(Error::invalid(
                "reshape",
                format!("cannot squeeze dimension {axis} of {}", self.ty()),
            ));
        }
        let mut dims = self.dims().to_vec();
        dims.remove(axis);
        self.reshape(&dims)
    }
}

/// Joins tensors along `dim`.
pub fn concatenate(values: &[&Tensor], dim: usize) -> Result<Tensor> {
    if values.len() == 1 {
        return Ok(values[0].clone());
    }
    Scope::apply1(Op::Concatenate { dim }, values, None)
}
