//! Collectives over a named mesh axis: one axis of the program's [`Mesh`](crate::Mesh) (the
//! devices that differ only in that coordinate, in index order) or a compound of several
//! ([`Axis::compound`]). Inside a program on a mesh every value is a per-device value; these
//! ops exchange them within each group of devices the axis spans.

use crate::builder::{Scope, Tensor};
use crate::error::Result;
use crate::ir::{Axis, Op};

impl Tensor {
    /// Concatenates every device's value along `dim`.
    pub fn all_gather(&self, dim: usize, axis: &Axis) -> Result<Tensor> {
        Scope::apply1(
            Op::AllGather {
                dim,
                axis: axis.clone(),
            },
            &[self],
            None,
        )
    }

    /// Sums every device's value and keeps this device's slice along `dim`.
    pub fn reduce_scatter(&self, dim: usize, axis: &Axis) -> Result<Tensor> {
        Scope::apply1(
            Op::ReduceScatter {
                dim,
                axis: axis.clone(),
            },
            &[self],
            None,
        )
    }

    /// Sums every device's value (`psum`).
    pub fn psum(&self, axis: &Axis) -> Result<Tensor> {
        Scope::apply1(Op::AllReduce { axis: axis.clone() }, &[self], None)
    }

    /// `all_to_all` over `axis` (size `n`): this device's value is cut into `n` equal pieces
    /// along `split_dim`, piece `i` goes to the device at index `i` along `axis`, and the `n`
    /// pieces that arrive are concatenated along `concat_dim` in source-index order. The
    /// result has `split_dim` divided and `concat_dim` multiplied by `n`; the bytes each
    /// device sends are `(n − 1)/n` of its operand. Its VJP is the inverse exchange
    /// (`all_to_all(concat_dim, split_dim, axis)`). Expert parallelism dispatches tokens to
    /// their experts' ranks and back with a pair of these over the `expert` axis.
    pub fn all_to_all(&self, split_dim: usize, concat_dim: usize, axis: &Axis) -> Result<Tensor> {
        Scope::apply1(
            Op::AllToAll {
                split_dim,
                concat_dim,
                axis: axis.clone(),
            },
            &[self],
            None,
        )
    }
}
