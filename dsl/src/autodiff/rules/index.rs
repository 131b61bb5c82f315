//! The VJPs of indexing: `take`'s is a `scatter_add`, `scatter_add`'s a `take`.

use super::{Cotangents, Grads};
use crate::error::Result;
use crate::ir::DotDims;

pub(crate) fn vjp_take(c: &Cotangents<'_>, axis: usize) -> Result<Grads> {
    let g = c.g0()?;
    // The zeros come from the cotangent: made late, not at the start of the step (XLA ran the
    // embedding gradient's there, where it lived through both passes: one more embedding-sized
    // buffer at the backward's peak).
    let dx = g.zeros_from(c.x[0].ty())?.scatter_add(&c.x[1], &g, axis)?;
    Ok(vec![Some(dx), None])
}

pub(crate) fn vjp_scatter_add(c: &Cotangents<'_>, axis: usize) -> Result<Grads> {
    let g = c.g0()?;
    let du = g.take(&c.x[1], axis)?;
    Ok(vec![Some(g), None, Some(du)])
}

/// The values' cotangent goes back to where each came from: a one-hot of the indices,
/// contracted with it. The indices have none.
pub(crate) fn vjp_top_k(c: &Cotangents<'_>) -> Result<Grads> {
    let Some(gv) = &c.g[0] else {
        return Ok(vec![None]);
    };
    let x = &c.x[0];
    let n = *x.dims().last().unwrap_or(&0) as usize;
    let r = x.rank();
    let hot = c.y[1].one_hot(n, x.dtype())?; // [.., k, n]
    let batch: Vec<usize> = (0..r - 1).collect();
    let dx = gv.dot_general(
        &hot,
        DotDims {
            lhs_batch: batch.clone(),
            rhs_batch: batch,
            lhs_contract: vec![r - 1],
            rhs_contract: vec![r - 1],
        },
    )?;
    Ok(vec![Some(dx)])
}
