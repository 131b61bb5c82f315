//! Lowering `scan` to `stablehlo.while`: a counter, per-step dynamic slices of the scanned
//! inputs, and per-step dynamic updates of the stacked outputs. Done on the IR with the
//! builder, so the emitter only ever sees `while`.

use std::collections::HashMap;

use crate::DType;
use crate::builder::{Scope, Tensor};
use crate::error::Result;
use crate::ir::{Function, Op, ValueId};

/// `f` with every `scan` (at any depth) replaced by an equivalent `while`.
pub(crate) fn lower_scans(f: &Function) -> Result<Function> {
    if !contains_scan(f) {
        return Ok(f.clone());
    }
    let s = Scope::new(&f.name);
    let args: Vec<Tensor> = f
        .params
        .iter()
        .map(|&p| s.param(f.values[p].clone()))
        .collect();
    let out = lower_into(&s, f, &args)?;
    s.finish(&out)
}

fn contains_scan(f: &Function) -> bool {
    f.nodes
        .iter()
        .any(|n| matches!(n.op, Op::Scan { .. }) || n.op.regions().into_iter().any(contains_scan))
}

/// Replays `f` into `s`, lowering scans and recursing into loop bodies.
fn lower_into(s: &Scope, f: &Function, args: &[Tensor]) -> Result<Vec<Tensor>> {
    let mut env: HashMap<ValueId, Tensor> = HashMap::new();
    for (&p, a) in f.params.iter().zip(args) {
        env.insert(p, a.clone());
    }
    for node in &f.nodes {
        let operands: Vec<Tensor> = node.operands.iter().map(|v| env[v].clone()).collect();
        let outputs = match &node.op {
            Op::Scan {
                body,
                length,
                num_carry,
                num_xs,
                reverse,
                frontend_attributes,
            } => {
                let body = lower_scans(body)?;
                lower_scan(
                    s,
                    &body,
                    &operands,
                    *length,
                    *num_carry,
                    *num_xs,
                    *reverse,
                    frontend_attributes,
                )?
            }
            Op::While {
                cond,
                body,
                frontend_attributes,
            } => {
                let cond = lower_scans(cond)?;
                let body = lower_scans(body)?;
                let refs: Vec<&Tensor> = operands.iter().collect();
                s.apply_here(
                    Op::While {
                        cond: Box::new(cond),
                        body: Box::new(body),
                        frontend_attributes: frontend_attributes.clone(),
                    },
                    &refs,
                    None,
                )?
            }
            op => {
                let refs: Vec<&Tensor> = operands.iter().collect();
                let target = node.results.first().map(|&r| &f.values[r]);
                s.apply_here(op.clone(), &refs, target)?
            }
        };
        for (&r, t) in node.results.iter().zip(outputs) {
            env.insert(r, t);
        }
    }
    Ok(f.results.iter().map(|r| env[r].clone()).collect())
}

#[expect(clippy::too_many_arguments, reason = "the fields of one Op::Scan")]
fn lower_scan(
    s: &Scope,
    body: &Function,
    operands: &[Tensor],
    length: usize,
    num_carry: usize,
    num_xs: usize,
    reverse: bool,
    attrs: &[(String, String)],
) -> Result<Vec<Tensor>> {
    let (carry, rest) = operands.split_at(num_carry);
    let (xs, consts) = rest.split_at(num_xs);
    let ys_types: Vec<_> = body.result_types()[num_carry..].to_vec();
    if length == 0 {
        // No step runs: the carry passes through and every stacked output is empty.
        let mut out = carry.to_vec();
        for y in &ys_types {
            let mut dims = vec![0];
            dims.extend(&y.dims);
            out.push(s.full(0.0, y.with_dims(dims))?);
        }
        return Ok(out);
    }
    let mut init = vec![s.scalar(0.0, DType::I32)?];
    init.extend(carry.iter().cloned());
    for y in &ys_types {
        let mut dims = vec![length as i64];
        dims.extend(&y.dims);
        init.push(s.full(0.0, y.with_dims(dims))?);
    }
    let attrs: Vec<(&str, &str)> = attrs
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let out = s.while_loop(
        &init,
        |cs, c| c[0].lt(&cs.scalar(length as f64, DType::I32)?),
        |bs, c| {
            let i = &c[0];
            let idx = if reverse {
                bs.scalar((length - 1) as f64, DType::I32)?.sub(i)?
            } else {
                i.clone()
            };
            let zero = bs.scalar(0.0, DType::I32)?;
            let mut args: Vec<Tensor> = c[1..=num_carry].to_vec();
            for x in xs {
                let mut starts = vec![&idx];
                starts.extend(std::iter::repeat_n(&zero, x.rank() - 1));
                let mut sizes = x.dims().to_vec();
                sizes[0] = 1;
                let slice = x.dynamic_slice(&starts, &sizes)?;
                args.push(slice.reshape(&x.dims()[1..])?);
            }
            args.extend(consts.iter().cloned());
            let results = lower_into(bs, body, &args)?;
            let mut next = vec![i.add(&bs.scalar(1.0, DType::I32)?)?];
            next.extend(results[..num_carry].iter().cloned());
            for (acc, y) in c[1 + num_carry..].iter().zip(&results[num_carry..]) {
                let mut starts = vec![&idx];
                starts.extend(std::iter::repeat_n(&zero, y.rank()));
                next.push(acc.dynamic_update_slice(&y.expand_dims(0)?, &starts)?);
            }
            Ok(next)
        },
        &attrs,
    )?;
    Ok(out[1..].to_vec())
}
