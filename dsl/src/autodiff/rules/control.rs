//! The VJPs of control flow: `scan` by a reverse scan over the residuals its forward replay
//! saves; a general `while` has none (its trip count is unknown).

use super::Grads;
use crate::builder::{Scope, Tensor};
use crate::error::{Error, Result};
use crate::ir::{Op, ScanParts};
use crate::types::TensorType;

pub(crate) fn vjp_while(op: &Op) -> Result<Grads> {
    Err(Error::NotDifferentiable {
        op: op.name(),
        reason: "a general while loop has no fixed trip count; write it as a `scan`".into(),
    })
}

pub(crate) fn vjp_case(op: &Op) -> Result<Grads> {
    Err(Error::NotDifferentiable {
        op: op.name(),
        reason: "a case is built after differentiation (a kept single-trip scan); \
                 differentiate the scan"
            .into(),
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
