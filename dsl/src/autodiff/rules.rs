//! The VJP rule of every op: given operands, results and result cotangents, the operand
//! cotangents (`None` where there is none: integer operands, zero derivatives).

use crate::builder::{Scope, Tensor};
use crate::error::{Error, Result};
use crate::ir::{BinaryOp, DotDims, Op, ReduceKind, ScanParts, TriangularSolve, UnaryOp};
use crate::{DType, TensorType};

/// Operand cotangents of one node.
pub(super) fn vjp_rule(
    op: &Op,
    x: &[Tensor],
    y: &[Tensor],
    g: &[Option<Tensor>],
    residuals: Option<&[Tensor]>,
) -> Result<Vec<Option<Tensor>>> {
    // Single-result ops: the cotangent of the result.
    let g0 = || -> Result<Tensor> {
        g[0].clone()
            .ok_or_else(|| Error::invalid(op.name(), "missing result cotangent"))
    };
    let none = |n: usize| vec![None; n];
    Ok(match op {
        Op::Constant(_) | Op::Iota { .. } | Op::AxisIndex { .. } => Vec::new(),
        Op::Compare(_) | Op::StopGradient => none(x.len()),
        Op::Unary(u) => {
            let (g, x, y) = (g0()?, &x[0], &y[0]);
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
                UnaryOp::Sign => return Ok(none(1)),
                UnaryOp::Sin => g.mul(&x.cos()?)?,
                UnaryOp::Cos => g.mul(&x.sin()?)?.neg()?,
            };
            vec![Some(d)]
        }
        Op::Binary(b) => {
            let (g, a, c, y) = (g0()?, &x[0], &x[1], &y[0]);
            let (da, dc) = match b {
                BinaryOp::Add => (g.clone(), g),
                BinaryOp::Sub => (g.clone(), g.neg()?),
                BinaryOp::Mul => (g.mul(c)?, g.mul(a)?),
                BinaryOp::Div => (g.div(c)?, g.mul(y)?.div(c)?.neg()?),
                BinaryOp::Pow => (
                    g.mul(c)?.mul(&a.pow(&c.add_scalar(-1.0)?)?)?,
                    g.mul(y)?.mul(&a.log()?)?,
                ),
                BinaryOp::Max | BinaryOp::Min => {
                    let pick_a = if *b == BinaryOp::Max {
                        a.ge(c)?
                    } else {
                        a.le(c)?
                    };
                    let zero = g.zeros_like()?;
                    (pick_a.select(&g, &zero)?, pick_a.select(&zero, &g)?)
                }
            };
            vec![Some(da), Some(dc)]
        }
        Op::Select => {
            let g = g0()?;
            let zero = g.zeros_like()?;
            vec![
                None,
                Some(x[0].select(&g, &zero)?),
                Some(x[0].select(&zero, &g)?),
            ]
        }
        Op::Convert => {
            if x[0].dtype().is_float() {
                vec![Some(g0()?.convert(x[0].dtype())?)]
            } else {
                none(1)
            }
        }
        Op::BroadcastInDim { dims } => vec![Some(unbroadcast(&g0()?, &x[0], dims)?)],
        Op::Reshape => vec![Some(g0()?.reshape(x[0].dims())?)],
        Op::Transpose { perm } => {
            let mut inv = vec![0; perm.len()];
            for (i, &p) in perm.iter().enumerate() {
                inv[p] = i;
            }
            vec![Some(g0()?.transpose(&inv)?)]
        }
        Op::Slice {
            start,
            limit: _,
            stride,
        } => {
            let g = g0()?;
            let xd = x[0].dims();
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
            vec![Some(g.pad(&zero, start, &high, &interior)?)]
        }
        Op::DynamicSlice { .. } => {
            let idx: Vec<&Tensor> = x[1..].iter().collect();
            let dx = x[0].zeros_like()?.dynamic_update_slice(&g0()?, &idx)?;
            let mut out = vec![Some(dx)];
            out.extend(none(idx.len()));
            out
        }
        Op::DynamicUpdateSlice => {
            let g = g0()?;
            let idx: Vec<&Tensor> = x[2..].iter().collect();
            let dx = g.dynamic_update_slice(&x[1].zeros_like()?, &idx)?;
            let du = g.dynamic_slice(&idx, x[1].dims())?;
            let mut out = vec![Some(dx), Some(du)];
            out.extend(none(idx.len()));
            out
        }
        Op::Concatenate { dim } => {
            let g = g0()?;
            let mut at = 0;
            x.iter()
                .map(|xi| {
                    let n = xi.dims()[*dim];
                    let piece = g.slice_axis(*dim, at, at + n);
                    at += n;
                    piece.map(Some)
                })
                .collect::<Result<Vec<_>>>()?
        }
        Op::Pad {
            low,
            high,
            interior,
        } => {
            if low.iter().chain(high).any(|&p| p < 0) {
                return Err(Error::NotDifferentiable {
                    op: "pad",
                    reason: "negative (cropping) padding; slice instead".into(),
                });
            }
            let g = g0()?;
            let xd = x[0].dims();
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
            vec![Some(dx), Some(dv)]
        }
        Op::Reduce { kind, axes } => {
            let g = g0()?;
            let keep: Vec<usize> = (0..x[0].rank()).filter(|i| !axes.contains(i)).collect();
            let gb = g.broadcast_in_dim(x[0].dims(), &keep)?;
            match kind {
                ReduceKind::Sum => vec![Some(gb)],
                ReduceKind::Max => {
                    let yb = y[0].broadcast_in_dim(x[0].dims(), &keep)?;
                    let hit = x[0].eq(&yb)?;
                    let ones = x[0].full_like(1.0)?;
                    let zeros = x[0].zeros_like()?;
                    let mask = hit.select(&ones, &zeros)?;
                    let count = mask.sum(axes)?.broadcast_in_dim(x[0].dims(), &keep)?;
                    vec![Some(gb.mul(&mask)?.div(&count)?)]
                }
            }
        }
        Op::Cumsum { axis, reverse } => vec![Some(g0()?.cumsum(*axis, !reverse)?)],
        Op::DotGeneral(d) => {
            let (dl, dr) = dot_vjp(&g0()?, &x[0], &x[1], d)?;
            vec![Some(dl), Some(dr)]
        }
        Op::Take { axis } => {
            let dx = x[0].zeros_like()?.scatter_add(&x[1], &g0()?, *axis)?;
            vec![Some(dx), None]
        }
        Op::ScatterAdd { axis } => {
            let g = g0()?;
            let du = g.take(&x[1], *axis)?;
            vec![Some(g), None, Some(du)]
        }
        Op::TopK { .. } => match &g[0] {
            None => none(1),
            Some(gv) => {
                let xd = &x[0];
                let n = *xd.dims().last().unwrap_or(&0) as usize;
                let r = xd.rank();
                let hot = y[1].one_hot(n, xd.dtype())?; // [.., k, n]
                let batch: Vec<usize> = (0..r - 1).collect();
                let dx = gv.dot_general(
                    &hot,
                    DotDims {
                        lhs_batch: batch.clone(),
                        rhs_batch: batch,
                        lhs_contract: vec![r - 1],
                        rhs_contract: vec![r - 1],
                    },
                )?;
                vec![Some(dx)]
            }
        },
        Op::TriangularSolve(opts) => {
            let (da, db) = triangular_solve_vjp(&g0()?, &x[0], &y[0], *opts)?;
            vec![Some(da), Some(db)]
        }
        Op::OptimizationBarrier => g.to_vec(),
        Op::While { .. } => {
            return Err(Error::NotDifferentiable {
                op: "while",
                reason: "a general while loop has no fixed trip count; write it as a `scan`".into(),
            });
        }
        Op::Scan { .. } => scan_backward(op, x, g, residuals.unwrap_or(&[]))?,
        Op::AllGather { dim, axis } => vec![Some(g0()?.reduce_scatter(*dim, axis)?)],
        Op::ReduceScatter { dim, axis } => vec![Some(g0()?.all_gather(*dim, axis)?)],
        Op::AllReduce { axis } => vec![Some(g0()?.psum(axis)?)],
        Op::AllToAll {
            split_dim,
            concat_dim,
            axis,
        } => {
            vec![Some(g0()?.all_to_all(*concat_dim, *split_dim, axis)?)]
        }
    })
}

/// Sums a broadcast result's cotangent back to the operand's shape.
fn unbroadcast(g: &Tensor, x: &Tensor, dims: &[usize]) -> Result<Tensor> {
    let out_rank = g.rank();
    let summed: Vec<usize> = (0..out_rank)
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
    s.reshape(x.dims())
}

/// Cotangents of `dot_general` through dimension numbers, one transpose each at most.
fn dot_vjp(g: &Tensor, l: &Tensor, r: &Tensor, d: &DotDims) -> Result<(Tensor, Tensor)> {
    let nb = d.lhs_batch.len();
    let free = |t: &Tensor, batch: &[usize], contract: &[usize]| -> Vec<usize> {
        (0..t.rank())
            .filter(|i| !batch.contains(i) && !contract.contains(i))
            .collect()
    };
    let lf = free(l, &d.lhs_batch, &d.lhs_contract);
    let rf = free(r, &d.rhs_batch, &d.rhs_contract);
    let g_batch: Vec<usize> = (0..nb).collect();
    let g_lf: Vec<usize> = (nb..nb + lf.len()).collect();
    let g_rf: Vec<usize> = (nb + lf.len()..g.rank()).collect();

    // dL: contract g's right-free dims with r's free dims.
    let p = g.dot_general(
        r,
        DotDims {
            lhs_batch: g_batch.clone(),
            rhs_batch: d.rhs_batch.clone(),
            lhs_contract: g_rf.clone(),
            rhs_contract: rf.clone(),
        },
    )?;
    let mut r_left: Vec<usize> = d.rhs_contract.clone();
    r_left.sort_unstable();
    let mut src: Vec<usize> = d.lhs_batch.clone();
    src.extend(&lf);
    src.extend(r_left.iter().map(|rc| {
        let k = d.rhs_contract.iter().position(|c| c == rc).unwrap_or(0);
        d.lhs_contract[k]
    }));
    let dl = p.transpose(&inverse_positions(&src))?;

    // dR: contract l's free dims with g's left-free dims, l first, so that for `x · W` the
    // product already has W's layout (`xᵀ g`) and needs no transpose.
    let q = l.dot_general(
        g,
        DotDims {
            lhs_batch: d.lhs_batch.clone(),
            rhs_batch: g_batch,
            lhs_contract: lf,
            rhs_contract: g_lf,
        },
    )?;
    let mut l_left: Vec<usize> = d.lhs_contract.clone();
    l_left.sort_unstable();
    let mut src: Vec<usize> = d.rhs_batch.clone();
    src.extend(l_left.iter().map(|lc| {
        let k = d.lhs_contract.iter().position(|c| c == lc).unwrap_or(0);
        d.rhs_contract[k]
    }));
    src.extend(&rf);
    let dr = q.transpose(&inverse_positions(&src))?;
    Ok((dl, dr))
}

/// `perm` with `perm[src[j]] = j`: the transpose that puts axis `src[j]` of the target at `j`.
fn inverse_positions(src: &[usize]) -> Vec<usize> {
    let mut perm = vec![0; src.len()];
    for (j, &s) in src.iter().enumerate() {
        perm[s] = j;
    }
    perm
}

fn swap_last_two(t: &Tensor) -> Result<Tensor> {
    let r = t.rank();
    let mut perm: Vec<usize> = (0..r).collect();
    perm.swap(r - 1, r - 2);
    t.transpose(&perm)
}

/// Cotangents of a triangular solve `op(A) X = B` (or `X op(A) = B`).
fn triangular_solve_vjp(
    g: &Tensor,
    a: &Tensor,
    xs: &Tensor,
    o: TriangularSolve,
) -> Result<(Tensor, Tensor)> {
    let flipped = TriangularSolve {
        transpose_a: !o.transpose_a,
        ..o
    };
    let db = a.triangular_solve(g, flipped)?;
    // d op(A) = -dB Xᵀ (left) or -Xᵀ dB (right).
    let d_op = if o.left_side {
        db.matmul(&swap_last_two(xs)?)?.neg()?
    } else {
        swap_last_two(xs)?.matmul(&db)?.neg()?
    };
    let da = if o.transpose_a {
        swap_last_two(&d_op)?
    } else {
        d_op
    };
    // Only the referenced triangle of A is an input.
    let r = a.rank();
    let s = a.scope();
    let ity = TensorType::new(DType::I32, a.dims());
    let row = s.iota(ity.clone(), r - 2)?;
    let col = s.iota(ity, r - 1)?;
    let keep = match (o.lower, o.unit_diagonal) {
        (true, false) => row.ge(&col)?,
        (true, true) => row.gt(&col)?,
        (false, false) => row.le(&col)?,
        (false, true) => row.lt(&col)?,
    };
    Ok((keep.select(&da, &da.zeros_like()?)?, db))
}

/// Replays a scan, also stacking each step's input carry (the residuals of the backward
/// pass). Returns the scan's results and the stacked carries.
pub(super) fn scan_forward(
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

/// The reverse scan: per step, re-run the body's VJP at the saved carry.
fn scan_backward(
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
        .ok_or_else(|| Error::invalid("scan", "no operands"))?;

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
    let attrs: Vec<(&str, &str)> = attrs
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
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
                    .ok_or_else(|| Error::invalid("scan", "missing const cotangent"))?;
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
