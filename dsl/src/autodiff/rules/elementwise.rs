//! The VJPs of the elementwise ops.

use super::{Cotangents, Grads};
use crate::error::Result;
use crate::ir::{BinaryOp, UnaryOp};

pub(crate) fn vjp_unary(c: &Cotangents<'_>, u: UnaryOp) -> Result<Grads> {
    let (g, x, y) = (c.g0()?, &c.x[0], &c.y[0]);
    let d = match u {
        UnaryOp::Neg => g.neg()?,
        UnaryOp::Exp => g.mul(y)?,
        UnaryOp::Log => g.div(x)?,
        UnaryOp::Log1p => g.div(&x.add_scalar(1.0)?)?,
        UnaryOp::Tanh => g.mul(&y.square()?.neg()?.add_scalar(1.0)?)?,
        UnaryOp::Logistic => g.mul(&y.mul(&y.neg()?.add_scalar(1.0)?)?)?,
        UnaryOp::Sqrt => g.div(&y.scale(2.0)?)?,
        UnaryOp::Rsqrt => g.mul(&y.div(x)?.scale(-0.5)?)?,
        UnaryOp::Abs => g.mul(&x.sign()?)?,
        UnaryOp::Sign => return Ok(vec![None]),
        UnaryOp::Sin => g.mul(&x.cos()?)?,
        UnaryOp::Cos => g.mul(&x.sin()?)?.neg()?,
    };
    Ok(vec![Some(d)])
}

pub(crate) fn vjp_binary(c: &Cotangents<'_>, b: BinaryOp) -> Result<Grads> {
    let (g, l, r, y) = (c.g0()?, &c.x[0], &c.x[1], &c.y[0]);
    let (dl, dr) = match b {
        BinaryOp::Add => (g.clone(), g),
        BinaryOp::Sub => (g.clone(), g.neg()?),
        BinaryOp::Mul => (g.mul(r)?, g.mul(l)?),
        BinaryOp::Div => (g.div(r)?, g.mul(y)?.div(r)?.neg()?),
        BinaryOp::Pow => (
            g.mul(r)?.mul(&l.pow(&r.add_scalar(-1.0)?)?)?,
            g.mul(y)?.mul(&l.log()?)?,
        ),
        BinaryOp::Max | BinaryOp::Min => {
            let pick_l = if b == BinaryOp::Max {
                l.ge(r)?
            } else {
                l.le(r)?
            };
            let zero = g.zeros_like()?;
            (pick_l.select(&g, &zero)?, pick_l.select(&zero, &g)?)
        }
    };
    Ok(vec![Some(dl), Some(dr)])
}

pub(crate) fn vjp_select(c: &Cotangents<'_>) -> Result<Grads> {
    let g = c.g0()?;
    let zero = g.zeros_like()?;
    Ok(vec![
        None,
        Some(c.x[0].select(&g, &zero)?),
        Some(c.x[0].select(&zero, &g)?),
    ])
}

/// A float operand gets the cotangent converted back to its type; an integer or boolean
/// operand has none.
pub(crate) fn vjp_convert(c: &Cotangents<'_>) -> Result<Grads> {
    let x = &c.x[0];
    if x.dtype().is_float() {
        Ok(vec![Some(c.g0()?.convert(x.dtype())?)])
    } else {
        Ok(vec![None])
    }
}
