//! Collectives over one named mesh axis. Inside a program on a mesh every value is a
//! per-device value; these ops exchange them.

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

    /// Splits along `split_dim`, sends piece `i` to device `i`, concatenates what arrives
    /// along `concat_dim`.
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
