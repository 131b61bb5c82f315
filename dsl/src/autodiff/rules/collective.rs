//! The VJPs of the collectives: each is the dual collective (a gather's is a reduce-scatter,
//! an all_to_all's the all_to_all back, and so on).

use super::{Cotangents, Grads};
use crate::error::Result;
use crate::ir::Axis;

pub(crate) fn vjp_all_gather(c: &Cotangents<'_>, dim: usize, axis: &Axis) -> Result<Grads> {
    Ok(vec![Some(c.g0()?.reduce_scatter(dim, axis)?)])
}

pub(crate) fn vjp_reduce_scatter(c: &Cotangents<'_>, dim: usize, axis: &Axis) -> Result<Grads> {
    Ok(vec![Some(c.g0()?.all_gather(dim, axis)?)])
}

pub(crate) fn vjp_all_reduce(c: &Cotangents<'_>, axis: &Axis) -> Result<Grads> {
    Ok(vec![Some(c.g0()?.psum(axis)?)])
}

pub(crate) fn vjp_all_to_all(
    c: &Cotangents<'_>,
    split_dim: usize,
    concat_dim: usize,
    axis: &Axis,
) -> Result<Grads> {
    Ok(vec![Some(c.g0()?.all_to_all(concat_dim, split_dim, axis)?)])
}
