//! The VJPs of the shape ops: each the adjoint movement (a slice's is a pad, a pad's a slice,
//! a broadcast's a sum).

use super::{Cotangents, Grads};
use crate::builder::Tensor;
use crate::error::{Error, Result};

/// Sums a broadcast result's cotangent back to the operand's shape.
pub(crate) fn vjp_broadcast_in_dim(c: &Cotangents<'_>, dims: &[usize]) -> Result<Grads> {
    let (g, x) = (c.g0()?, &c.x[0]);
    let summed: Vec<usize> = (0..g.rank())
        .filter(|d| match dims.iter().position(|m| m == d) {
            None => true,
            Some(i) => x.dims()[i] == 1 && g.dims()[*d] != 1,
        })
        .collect();
    let s = if summed.is_empty() {
        g.clone()
    } else {
        g.sum(&summed)?
    };
    Ok(vec![Some(s.reshape(x.dims())?)])
}

pub(crate) fn vjp_reshape(c: &Cotangents<'_>) -> Result<Grads> {
    Ok(vec![Some(c.g0()?.reshape(c.x[0].dims())?)])
}

pub(crate) fn vjp_transpose(c: &Cotangents<'_>, perm: &[usize]) -> Result<Grads> {
    Ok(vec![Some(
        c.g0()?.transpose(&crate::layout::inverse(perm))?,
    )])
}

/// A slice's cotangent is the result's cotangent padded back into place with zeros.
pub(crate) fn vjp_slice(c: &Cotangents<'_>, start: &[i64], stride: &[i64]) -> Result<Grads> {
    let g = c.g0()?;
    let xd = c.x[0].dims();
    let yd = g.dims().to_vec();
    let interior: Vec<i64> = stride.iter().map(|s| s - 1).collect();
    let high: Vec<i64> = (0..xd.len())
        .map(|i| {
            let used = if yd[i] == 0 {
                0
            } else {
                (yd[i] - 1) * stride[i] + 1
            };
            xd[i] - start[i] - used
        })
        .collect();
    let zero = g.scope().scalar(0.0, g.dtype())?;
    Ok(vec![Some(g.pad(&zero, start, &high, &interior)?)])
}

pub(crate) fn vjp_dynamic_slice(c: &Cotangents<'_>) -> Result<Grads> {
    let idx: Vec<&Tensor> = c.x[1..].iter().collect();
    let dx = c.x[0].zeros_like()?.dynamic_update_slice(&c.g0()?, &idx)?;
    let mut out = vec![Some(dx)];
    out.extend(vec![None; idx.len()]);
    Ok(out)
}

pub(crate) fn vjp_dynamic_update_slice(c: &Cotangents<'_>) -> Result<Grads> {
    let g = c.g0()?;
    let idx: Vec<&Tensor> = c.x[2..].iter().collect();
    let dx = g.dynamic_update_slice(&c.x[1].zeros_like()?, &idx)?;
    let du = g.dynamic_slice(&idx, c.x[1].dims())?;
    let mut out = vec![Some(dx), Some(du)];
    out.extend(vec![None; idx.len()]);
    Ok(out)
}

pub(crate) fn vjp_concatenate(c: &Cotangents<'_>, dim: usize) -> Result<Grads> {
    let g = c.g0()?;
    let mut at = 0;
    c.x.iter()
        .map(|xi| {
            let n = xi.dims()[dim];
            let piece = g.slice_axis(dim, at, at + n);
            at += n;
            piece.map(Some)
        })
        .collect()
}

/// A pad's cotangent is the slice of the padded-in elements; the padding value's is the
/// sum of the rest.
pub(crate) fn vjp_pad(
    c: &Cotangents<'_>,
    low: &[i64],
    high: &[i64],
    interior: &[i64],
) -> Result<Grads> {
    if low.iter().chain(high).any(|&p| p < 0) {
        return Err(Error::NotDifferentiable {
            op: c.op,
            reason: "negative (cropping) padding; slice instead".into(),
        });
    }
    let g = c.g0()?;
    let xd = c.x[0].dims();
    let stride: Vec<i64> = interior.iter().map(|i| i + 1).collect();
    // One past the last padded-in element; just `low` for an empty dimension.
    let limit: Vec<i64> = (0..xd.len())
        .map(|i| match xd[i] {
            0 => low[i],
            d => low[i] + (d - 1) * stride[i] + 1,
        })
        .collect();
    let dx = g.slice(low, &limit, &stride)?;
    let dv = g.sum_all()?.sub(&dx.sum_all()?)?;
    Ok(vec![Some(dx), Some(dv)])
}
