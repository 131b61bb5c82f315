//! Control flow: `while`, `scan` and `optimization_barrier`.
//!
//! `while` is written as itself, with its condition and body as regions; `scan` is lowered
//! to `while` before writing (so the writer only checks it is gone) and is differentiated by
//! a reverse scan over the residuals its forward replay saves. A general `while` has no
//! derivative: its trip count is unknown.

use std::fmt;

use super::Grads;
use crate::builder::{Scope, Tensor};
use crate::dtype::DType;
use crate::emit::writer::{OpLine, Site, Writer};
use crate::error::{Error, Result};
use crate::infer::{Operands, list_types};
use crate::ir::{Function, Op, ScanParts};
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

pub(crate) fn write_while<W: fmt::Write>(
    w: &mut Writer<W>,
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
    let attributes = crate::emit::writer::frontend_attributes(&all);
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

pub(crate) fn vjp_while(op: &Op) -> Result<Grads> {
    Err(Error::NotDifferentiable {
        op: op.name(),
        reason: "a general while loop has no fixed trip count; write it as a `scan`".into(),
    })
}

/// The barrier passes cotangents through as it passes values.
pub(crate) fn vjp_optimization_barrier(g: &[Option<Tensor>]) -> Grads {
    g.to_vec()
}

/// Replays a scan, also stacking each step's input carry (the residuals of the backward
/// pass). Returns the scan's results and the stacked carries.
pub(crate) fn scan_forward(
    s: &Scope,
    scan: &ScanParts<'_>,
    x: &[&Tensor],
) -> Result<(Vec<Tensor>, Vec<Tensor>)> {
    let ScanParts {
        body, num_carry, ..
    } = *scan;
    let mut saving = body.clone();
    saving
        .results
        .extend(body.params[..num_carry].iter().copied());
    let num_ys = body.results.len() - num_carry;
    let mut out = s.apply_here(scan.with_body(saving), x, None)?;
    let saved = out.split_off(num_carry + num_ys);
    Ok((out, saved))
}

/// The reverse scan: per step, re-run the body's VJP at the saved carry (the residuals
/// [`scan_forward`] stacked).
pub(crate) fn vjp_scan(
    op: &Op,
    x: &[Tensor],
    g: &[Option<Tensor>],
    saved: &[Tensor],
) -> Result<Vec<Option<Tensor>>> {
    let ScanParts {
        body,
        length,
        num_carry,
        num_xs,
        reverse,
        frontend_attributes: attrs,
    } = ScanParts::try_from(op)?;
    let is_float = |t: &TensorType| t.dtype.is_float();
    let params = body.param_types();
    let results = body.result_types();
    let (carry, rest) = x.split_at(num_carry);
    let (xs, consts) = rest.split_at(num_xs);
    let s = x
        .first()
        .map(|t| t.scope().clone())
        .ok_or_else(|| Error::invalid(op.name(), "no operands"))?;

    let zero_or = |i: usize, shape_of: &Tensor| -> Result<Tensor> {
        match &g[i] {
            Some(t) => Ok(t.clone()),
            None => shape_of.zeros_like(),
        }
    };
    // Carry of the reverse scan: float carry cotangents, then float const accumulators.
    let mut init: Vec<Tensor> = Vec::new();
    for (i, c) in carry.iter().enumerate() {
        if is_float(c.ty()) {
            init.push(zero_or(i, c)?);
        }
    }
    let float_consts: Vec<usize> = (0..consts.len())
        .filter(|&k| is_float(consts[k].ty()))
        .collect();
    for &k in &float_consts {
        init.push(consts[k].zeros_like()?);
    }
    // Scanned inputs: saved carries, xs, float ys cotangents.
    let mut scanned: Vec<Tensor> = saved.to_vec();
    scanned.extend(xs.iter().cloned());
    let float_ys: Vec<usize> = (num_carry..results.len())
        .filter(|&j| is_float(&results[j]))
        .collect();
    for &j in &float_ys {
        let mut dims = vec![length as i64];
        dims.extend(&results[j].dims);
        let ty = results[j].with_dims(dims);
        scanned.push(match &g[j] {
            Some(t) => t.clone(),
            None => s.full(0.0, ty)?,
        });
    }
    let body_vjp = crate::autodiff::vjp(body)?;
    let float_params: Vec<usize> = (0..params.len())
        .filter(|&p| is_float(&params[p]))
        .collect();
    let n_fc = init.len() - float_consts.len();
    // The reverse loop keeps the forward loop's attributes; its label says it is the VJP.
    let labels: Vec<String> = attrs
        .iter()
        .map(|(k, v)| {
            if k == crate::fsdp::LOOP_LABEL {
                format!("vjp of {v}")
            } else {
                v.clone()
            }
        })
        .collect();
    let attrs: Vec<(&str, &str)> = attrs
        .iter()
        .zip(&labels)
        .map(|((k, _), v)| (k.as_str(), v.as_str()))
        .collect();
    let (final_carry, stacked) =
        s.scan_with_attributes(&init, &scanned, length, !reverse, &attrs, |bs, c, sl| {
            let (saved_c, rest) = sl.split_at(num_carry);
            let (x_i, gy) = rest.split_at(num_xs);
            let mut args: Vec<Tensor> = saved_c.to_vec();
            args.extend(x_i.iter().cloned());
            args.extend(consts.iter().cloned());
            args.extend(c[..n_fc].iter().cloned());
            args.extend(gy.iter().cloned());
            let d = bs.inline(&body_vjp, &args)?;
            // `d` holds one cotangent per float parameter, in parameter order.
            let ct_of = |p: usize| {
                float_params
                    .iter()
                    .position(|&q| q == p)
                    .map(|k| d[k].clone())
            };
            let mut next: Vec<Tensor> = (0..num_carry).filter_map(ct_of).collect();
            for (a, &k) in c[n_fc..].iter().zip(&float_consts) {
                let ct = ct_of(num_carry + num_xs + k)
                    .ok_or_else(|| Error::invalid(op.name(), "missing const cotangent"))?;
                next.push(a.add(&ct)?);
            }
            let ys: Vec<Tensor> = (0..num_xs).filter_map(|j| ct_of(num_carry + j)).collect();
            Ok((next, ys))
        })?;
    let mut out: Vec<Option<Tensor>> = Vec::new();
    let mut fc = final_carry[..n_fc].iter();
    for c in carry {
        out.push(if is_float(c.ty()) {
            fc.next().cloned()
        } else {
            None
        });
    }
    let mut fx = stacked.iter();
    for xi in xs {
        out.push(if is_float(xi.ty()) {
            fx.next().cloned()
        } else {
            None
        });
    }
    let mut fk = final_carry[n_fc..].iter();
    for k in consts {
        out.push(if is_float(k.ty()) {
            fk.next().cloned()
        } else {
            None
        });
    }
    Ok(out)
}
