//! Control flow: `while`, `case`, `scan` and `optimization_barrier`.
//!
//! `while` is written as itself, with its condition and body as regions; `case` with its
//! branches as regions that read its operands by name (StableHLO's branches take no
//! arguments); `scan` is lowered to `while` (a kept single trip to `case`) before writing
//! (so the writer only checks it is gone). Their VJPs are
//! `autodiff::rules::control`'s.

use std::fmt;

use crate::dtype::DType;
use crate::emit::text::{OpLine, Site, Writer};
use crate::error::{Error, Result};
use crate::family::operands::{Operands, list_types};
use crate::ir::Function;
use crate::types::TensorType;

pub(crate) fn infer_optimization_barrier(a: &Operands<'_>) -> Vec<TensorType> {
    a.args.to_vec()
}

pub(crate) fn infer_while(
    a: &Operands<'_>,
    cond: &Function,
    body: &Function,
) -> Result<Vec<TensorType>> {
    let carry = a.args.to_vec();
    if cond.param_types() != carry || cond.result_types() != vec![TensorType::scalar(DType::Bool)] {
        return Err(Error::invalid(
            a.op,
            format!(
                "the condition must map the carry ({}) to tensor<i1>, not ({}) to ({})",
                list_types(&carry),
                list_types(&cond.param_types()),
                list_types(&cond.result_types())
            ),
        ));
    }
    if body.param_types() != carry || body.result_types() != carry {
        return Err(Error::invalid(
            a.op,
            format!(
                "the body must map the carry ({}) to itself, not ({}) to ({})",
                list_types(&carry),
                list_types(&body.param_types()),
                list_types(&body.result_types())
            ),
        ));
    }
    Ok(carry)
}

/// `[index: i32[], args…]`: every branch maps `args` to the same result types.
pub(crate) fn infer_case(a: &Operands<'_>, branches: &[Function]) -> Result<Vec<TensorType>> {
    let Some((index, args)) = a.args.split_first() else {
        return Err(Error::invalid(a.op, "expected an index operand"));
    };
    if *index != TensorType::scalar(DType::I32) {
        return Err(Error::invalid(
            a.op,
            format!("the index must be tensor<i32>, not {index}"),
        ));
    }
    let Some(first) = branches.first() else {
        return Err(Error::invalid(a.op, "expected at least one branch"));
    };
    let results = first.result_types();
    for (k, b) in branches.iter().enumerate() {
        if b.param_types() != args || b.result_types() != results {
            return Err(Error::invalid(
                a.op,
                format!(
                    "branch {k} must map ({}) to ({}), not ({}) to ({})",
                    list_types(args),
                    list_types(&results),
                    list_types(&b.param_types()),
                    list_types(&b.result_types())
                ),
            ));
        }
    }
    Ok(results)
}

pub(crate) fn infer_scan(
    a: &Operands<'_>,
    body: &Function,
    length: usize,
    num_carry: usize,
    num_xs: usize,
) -> Result<Vec<TensorType>> {
    let (carry, rest) = a.args.split_at(num_carry.min(a.args.len()));
    let (xs, consts) = rest.split_at(num_xs.min(rest.len()));
    let mut expected: Vec<TensorType> = carry.to_vec();
    for x in xs {
        if x.dims.first() != Some(&(length as i64)) {
            return Err(Error::invalid(
                a.op,
                format!("scanned input {x} must have {length} rows"),
            ));
        }
        expected.push(x.with_dims(x.dims[1..].to_vec()));
    }
    expected.extend(consts.iter().cloned());
    if body.param_types() != expected {
        return Err(Error::invalid(
            a.op,
            format!(
                "the body's parameters must be [carry…, x…, consts…] = ({}), not ({})",
                list_types(&expected),
                list_types(&body.param_types())
            ),
        ));
    }
    let results = body.result_types();
    if results.len() < num_carry || results[..num_carry] != *carry {
        return Err(Error::invalid(
            a.op,
            format!(
                "the body must return the carry ({}) first, with unchanged types; it returns ({})",
                list_types(carry),
                list_types(&results)
            ),
        ));
    }
    let mut out = carry.to_vec();
    for y in &results[num_carry..] {
        let mut dims = vec![length as i64];
        dims.extend(&y.dims);
        out.push(y.with_dims(dims));
    }
    Ok(out)
}

/// Scans reach the writer only if the lowering before it missed one.
pub(crate) fn check_lowered(op: &'static str) -> Result<()> {
    Err(Error::invalid(
        op,
        "internal: lowered to other ops before emission",
    ))
}

pub(crate) fn write_while(
    w: &mut Writer,
    s: &Site<'_>,
    cond: &Function,
    body: &Function,
    frontend_attributes: &[(String, String)],
) -> fmt::Result {
    let c = w.function_region(cond, s.depth)?;
    let b = w.function_region(body, s.depth)?;
    let operands = w.operands(s.node);
    let lhs = w.bind(s.node);
    let mut all = frontend_attributes.to_vec();
    all.extend(s.node.attributes.iter().cloned());
    let attributes = crate::emit::text::frontend_attributes(&all);
    w.op(
        s.depth,
        OpLine {
            lhs: &lhs,
            name: s.node.op.name(),
            operands: &operands,
            regions: &[c, b],
            attributes: &attributes,
            types: &s.signature(),
            ..OpLine::default()
        },
    )
}

pub(crate) fn write_case(
    w: &mut Writer,
    s: &Site<'_>,
    branches: &[Function],
    frontend_attributes: &[(String, String)],
) -> fmt::Result {
    let args: Vec<String> = (1..s.node.operands.len())
        .map(|i| w.operand(s.node, i))
        .collect();
    let regions = branches
        .iter()
        .map(|b| w.capturing_region(b, &args, s.depth))
        .collect::<Result<Vec<_>, _>>()?;
    let index = w.operand(s.node, 0);
    let lhs = w.bind(s.node);
    let mut all = frontend_attributes.to_vec();
    all.extend(s.node.attributes.iter().cloned());
    let attributes = crate::emit::text::frontend_attributes(&all);
    let index_type = [TensorType::scalar(DType::I32)];
    w.op(
        s.depth,
        OpLine {
            lhs: &lhs,
            name: s.node.op.name(),
            operands: &index,
            regions: &regions,
            attributes: &attributes,
            types: &crate::emit::text::signature(&index_type, &s.result_types()),
            ..OpLine::default()
        },
    )
}
