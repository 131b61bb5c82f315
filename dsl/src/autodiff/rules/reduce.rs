//! The VJPs of the reductions: a sum's is a broadcast, a max's goes to its arg-max.

use super::{Cotangents, Grads};
use crate::error::Result;
use crate::ir::ReduceKind;

/// A sum spreads its cotangent over the summed dimensions; a max sends it to the elements
/// that attained the maximum, split evenly between ties.
pub(crate) fn vjp_reduce(c: &Cotangents<'_>, kind: ReduceKind, axes: &[usize]) -> Result<Grads> {
    let (g, x) = (c.g0()?, &c.x[0]);
    let keep: Vec<usize> = (0..x.rank()).filter(|i| !axes.contains(i)).collect();
    let gb = g.broadcast_in_dim(x.dims(), &keep)?;
    Ok(match kind {
        ReduceKind::Sum => vec![Some(gb)],
        ReduceKind::Max => {
            let yb = c.y[0].broadcast_in_dim(x.dims(), &keep)?;
            let hit = x.eq(&yb)?;
            let ones = x.full_like(1.0)?;
            let zeros = x.zeros_like()?;
            let mask = hit.select(&ones, &zeros)?;
            let count = mask.sum(axes)?.broadcast_in_dim(x.dims(), &keep)?;
            vec![Some(gb.mul(&mask)?.div(&count)?)]
        }
    })
}

/// A prefix sum's cotangent is the suffix sum of the result's.
/// `y · (g − Σ g·y)` along `axis`, from the result `y` alone.
pub(crate) fn vjp_softmax(c: &Cotangents<'_>, axis: usize) -> Result<Grads> {
    let (y, g) = (&c.y[0], c.g0()?);
    let kept: Vec<usize> = (0..y.rank()).filter(|&d| d != axis).collect();
    let dot = g.mul(y)?.sum(&[axis])?.broadcast_in_dim(y.dims(), &kept)?;
    Ok(vec![Some(y.mul(&g.sub(&dot)?)?)])
}

pub(crate) fn vjp_cumsum(c: &Cotangents<'_>, axis: usize, reverse: bool) -> Result<Grads> {
    Ok(vec![Some(c.g0()?.cumsum(axis, !reverse)?)])
}
