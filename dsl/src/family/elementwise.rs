//! Elementwise ops: unary and binary functions, comparisons, `select`, `convert` and
//! `stop_gradient`. Their text is the generic op line; only `compare` has properties.

use std::fmt;

use super::{Cotangents, Grads};
use crate::dtype::DType;
use crate::emit::writer::{Site, Writer};
use crate::error::{Error, Result};
use crate::infer::{Operands, float, same_dims, same_type};
use crate::ir::{BinaryOp, Comparison, UnaryOp};
use crate::types::TensorType;

pub(crate) fn infer_unary(a: &Operands<'_>) -> Result<Vec<TensorType>> {
    let [x] = a.exactly::<1>()?;
    float(a.op, x)?;
    Ok(vec![x.clone()])
}

pub(crate) fn infer_binary(a: &Operands<'_>) -> Result<Vec<TensorType>> {
    let [l, r] = a.exactly::<2>()?;
    same_type(a.op, l, r)?;
    if l.dtype == DType::Bool {
        return Err(Error::UnsupportedDType {
            op: a.op,
            expected: "a numeric",
            actual: l.clone(),
        });
    }
    Ok(vec![l.clone()])
}

pub(crate) fn infer_compare(a: &Operands<'_>) -> Result<Vec<TensorType>> {
    let [l, r] = a.exactly::<2>()?;
    same_type(a.op, l, r)?;
    Ok(vec![l.with_dtype(DType::Bool)])
}

pub(crate) fn infer_select(a: &Operands<'_>) -> Result<Vec<TensorType>> {
    let [pred, on_true, on_false] = a.exactly::<3>()?;
    if pred.dtype != DType::Bool {
        return Err(Error::UnsupportedDType {
            op: a.op,
            expected: "a bool predicate",
            actual: pred.clone(),
        });
    }
    same_type(a.op, on_true, on_false)?;
    same_dims(a.op, pred, on_true)?;
    Ok(vec![on_true.clone()])
}

pub(crate) fn infer_convert(a: &Operands<'_>) -> Result<Vec<TensorType>> {
    let [x] = a.exactly::<1>()?;
    let t = a.target()?;
    same_dims(a.op, x, &t)?;
    Ok(vec![t])
}

pub(crate) fn infer_stop_gradient(a: &Operands<'_>) -> Result<Vec<TensorType>> {
    let [x] = a.exactly::<1>()?;
    Ok(vec![x.clone()])
}

pub(crate) fn write_compare<W: fmt::Write>(
    w: &mut Writer<W>,
    s: &Site<'_>,
    c: Comparison,
) -> fmt::Result {
    w.simple(s, &compare_props(c, compare_type(s.operand(0).dtype)))
}

/// The properties of a `compare` in direction `c`, comparing as `compare_type`.
pub(crate) fn compare_props(c: Comparison, compare_type: &str) -> String {
    let direction = match c {
        Comparison::Eq => "EQ",
        Comparison::Ne => "NE",
        Comparison::Lt => "LT",
        Comparison::Le => "LE",
        Comparison::Gt => "GT",
        Comparison::Ge => "GE",
    };
    format!(
        "comparison_direction = #stablehlo<comparison_direction {direction}>, compare_type = #stablehlo<comparison_type {compare_type}>"
    )
}

/// How StableHLO compares values of a type.
pub(crate) fn compare_type(dtype: DType) -> &'static str {
    match dtype {
        DType::I32 | DType::I64 => "SIGNED",
        DType::Bool => "UNSIGNED",
        _ => "FLOAT",
    }
}

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
