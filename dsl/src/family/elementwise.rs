//! Elementwise ops: unary and binary functions, comparisons, `select`, `convert` and
//! `stop_gradient`. Their text is the generic op line; only `compare` has properties.

use std::fmt;

use crate::dtype::DType;
use crate::emit::text::{Site, Writer};
use crate::error::{Error, Result};
use crate::family::operands::{Operands, float, same_dims, same_type};
use crate::ir::Comparison;
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

pub(crate) fn write_compare(w: &mut Writer, s: &Site<'_>, c: Comparison) -> fmt::Result {
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
