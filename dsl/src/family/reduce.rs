//! Reductions: `reduce` (sum or max over dimensions) and `cumsum`, written as a
//! `reduce_window` whose window covers the whole prefix.

use std::fmt;

use super::{Cotangents, Grads, constant};
use crate::dtype::DType;
use crate::emit::writer::{OpLine, Site, Writer, i64_array, signature};
use crate::error::{Error, Result};
use crate::infer::{Operands, check_axis};
use crate::ir::{BinaryOp, Literal, ReduceKind};
use crate::types::TensorType;

pub(crate) fn infer_reduce(
    a: &Operands<'_>,
    kind: ReduceKind,
    axes: &[usize],
) -> Result<Vec<TensorType>> {
    let [x] = a.exactly::<1>()?;
    if kind == ReduceKind::Sum && x.dtype == DType::Bool {
        return Err(Error::UnsupportedDType {
            op: a.op,
            expected: "a numeric",
            actual: x.clone(),
        });
    }
    for (i, &axis) in axes.iter().enumerate() {
        check_axis(a.op, axis, x)?;
        if axes[..i].iter().any(|&b| b >= axis) {
            return Err(Error::invalid(
                a.op,
                format!("axes {axes:?} must be ascending and distinct"),
            ));
        }
    }
    let dims: Vec<i64> = (0..x.rank())
        .filter(|i| !axes.contains(i))
        .map(|i| x.dims[i])
        .collect();
    Ok(vec![x.with_dims(dims)])
}

pub(crate) fn infer_cumsum(a: &Operands<'_>, axis: usize) -> Result<Vec<TensorType>> {
    let [x] = a.exactly::<1>()?;
    check_axis(a.op, axis, x)?;
    Ok(vec![x.clone()])
}

/// A `reduce` seeded with the reduction's identity.
pub(crate) fn write_reduce<W: fmt::Write>(
    w: &mut Writer<W>,
    s: &Site<'_>,
    kind: ReduceKind,
    axes: &[usize],
) -> fmt::Result {
    let dtype = s.operand(0).dtype;
    let (seed, combine) = match kind {
        ReduceKind::Sum => (constant::zero(dtype), BinaryOp::Add),
        ReduceKind::Max => (constant::lowest(dtype), BinaryOp::Max),
    };
    let props = format!("dimensions = {}", i64_array(axes.iter().map(|&a| a as i64)));
    write_seeded(w, s, s.node.op.name(), seed, combine, &props)
}

/// A sum over a window as long as the axis, padded so that each output sees its prefix (or
/// suffix, reversed).
pub(crate) fn write_cumsum<W: fmt::Write>(
    w: &mut Writer<W>,
    s: &Site<'_>,
    axis: usize,
    reverse: bool,
) -> fmt::Result {
    let x = s.operand(0);
    let n = x.dims[axis];
    // Nothing to sum along an empty axis (and a window of 0 would pad by −1).
    if n == 0 {
        w.alias(s.node);
        return Ok(());
    }
    let window: Vec<i64> = (0..x.rank())
        .map(|d| if d == axis { n } else { 1 })
        .collect();
    let pads: Vec<String> = (0..x.rank())
        .map(|d| match (d == axis, reverse) {
            (true, false) => format!("[{}, 0]", n - 1),
            (true, true) => format!("[0, {}]", n - 1),
            _ => "[0, 0]".to_owned(),
        })
        .collect();
    let props = format!(
        "window_dimensions = {}, window_strides = {}, padding = dense<[{}]> : tensor<{}x2xi64>",
        i64_array(window),
        i64_array(vec![1; x.rank()]),
        pads.join(", "),
        x.rank()
    );
    let seed = constant::zero(x.dtype);
    write_seeded(w, s, "reduce_window", seed, BinaryOp::Add, &props)
}

/// Writes the node as op `name` over its operand and a scalar `seed` (written first, as its
/// own constant), combining with `combine`.
fn write_seeded<W: fmt::Write>(
    w: &mut Writer<W>,
    s: &Site<'_>,
    name: &str,
    seed: Literal,
    combine: BinaryOp,
    props: &str,
) -> fmt::Result {
    let x = s.operand(0).clone();
    let st = TensorType::scalar(x.dtype);
    let init = w.fresh("v");
    constant::write_literal(w, s.depth, &init, seed, &st)?;
    let region = w.scalar_region(combine, x.dtype, s.depth)?;
    let operands = format!("{}, {init}", w.operands(s.node));
    let lhs = w.bind(s.node);
    w.op(
        s.depth,
        OpLine {
            lhs: &lhs,
            name,
            operands: &operands,
            props,
            regions: &[region],
            types: &signature(&[x, st], &s.result_types()),
            ..OpLine::default()
        },
    )
}

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
