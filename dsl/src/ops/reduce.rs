//! Reductions and prefix sums.

use crate::builder::{Scope, Tensor};
use crate::error::Result;
use crate::ir::{Op, ReduceKind};

impl Tensor {
    fn reduce(&self, kind: ReduceKind, axes: &[usize]) -> Result<Tensor> {
        let mut axes = axes.to_vec();
        axes.sort_unstable();
        Scope::apply1(Op::Reduce { kind, axes }, &[self], None)
    }

    /// Sum over `axes` (removed from the result).
    pub fn sum(&self, axes: &[usize]) -> Result<Tensor> {
        self.reduce(ReduceKind::Sum, axes)
    }

    /// Maximum over `axes` (removed from the result).
    pub fn max_over(&self, axes: &[usize]) -> Result<Tensor> {
        self.reduce(ReduceKind::Max, axes)
    }

    /// Sum of all elements, as a scalar.
    pub fn sum_all(&self) -> Result<Tensor> {
        let axes: Vec<usize> = (0..self.rank()).collect();
        self.sum(&axes)
    }

    /// Mean over `axes`.
    pub fn mean(&self, axes: &[usize]) -> Result<Tensor> {
        let n: i64 = axes
            .iter()
            .map(|&a| self.dims().get(a).copied().unwrap_or(1))
            .product();
        self.sum(axes)?.scale(1.0 / n as f64)
    }

    /// `softmax` along `axis` ([`Op::Softmax`]): `exp(x − max) / Σ exp(x − max)`.
    pub fn softmax(&self, axis: usize) -> Result<Tensor> {
        Scope::apply1(Op::Softmax { axis }, &[self], None)
    }

    /// Inclusive prefix sum along `axis` (from the end when `reverse`).
    pub fn cumsum(&self, axis: usize, reverse: bool) -> Result<Tensor> {
        Scope::apply1(Op::Cumsum { axis, reverse }, &[self], None)
    }
}
