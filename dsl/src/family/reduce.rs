//! Reductions: `reduce` (sum or max over dimensions) and `cumsum`, written as a
//! `reduce_window` whose window covers the whole prefix.

use std::fmt;

use super::constant;
use crate::dtype::DType;
use crate::emit::text::{OpLine, Site, Writer, i64_array, signature};
use crate::error::{Error, Result};
use crate::family::operands::{Operands, check_axis};
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
pub(crate) fn write_reduce(
    w: &mut Writer,
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
pub(crate) fn write_cumsum(
    w: &mut Writer,
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
fn write_seeded(
    w: &mut Writer,
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
