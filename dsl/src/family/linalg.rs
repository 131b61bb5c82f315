//! Linear algebra: `dot_general` and `triangular_solve`. Their VJPs are themselves dot
//! products and solves, arranged so that the common `x · W` needs no extra transpose.

use std::fmt;

use super::{Cotangents, Grads};
use crate::builder::Tensor;
use crate::dtype::DType;
use crate::emit::writer::{Site, Writer, list};
use crate::error::{Error, Result};
use crate::infer::{Operands, float};
use crate::ir::{DotDims, LhsCotangent, TriangularSolve};
use crate::types::TensorType;

pub(crate) fn infer_dot_general(a: &Operands<'_>, d: &DotDims) -> Result<Vec<TensorType>> {
    let [l, r] = a.exactly::<2>()?;
    if l.dtype != r.dtype {
        return Err(Error::DTypeMismatch {
            op: a.op,
            lhs: l.dtype,
            rhs: r.dtype,
        });
    }
    let all_l: Vec<usize> = d.lhs_batch.iter().chain(&d.lhs_contract).copied().collect();
    let all_r: Vec<usize> = d.rhs_batch.iter().chain(&d.rhs_contract).copied().collect();
    let distinct = |v: &[usize], t: &TensorType| {
        v.iter()
            .enumerate()
            .all(|(i, &a)| a < t.rank() && !v[..i].contains(&a))
    };
    let paired = d.lhs_batch.len() == d.rhs_batch.len()
        && d.lhs_contract.len() == d.rhs_contract.len()
        && distinct(&all_l, l)
        && distinct(&all_r, r)
        && d.lhs_batch
            .iter()
            .zip(&d.rhs_batch)
            .all(|(&a, &b)| l.dims[a] == r.dims[b])
        && d.lhs_contract
            .iter()
            .zip(&d.rhs_contract)
            .all(|(&a, &b)| l.dims[a] == r.dims[b]);
    if !paired {
        return Err(Error::invalid(
            a.op,
            format!("dimension numbers {d:?} do not fit {l} and {r}"),
        ));
    }
    let mut dims: Vec<i64> = d.lhs_batch.iter().map(|&a| l.dims[a]).collect();
    dims.extend(
        (0..l.rank())
            .filter(|i| !all_l.contains(i))
            .map(|i| l.dims[i]),
    );
    dims.extend(
        (0..r.rank())
            .filter(|i| !all_r.contains(i))
            .map(|i| r.dims[i]),
    );
    Ok(vec![l.with_dims(dims)])
}

pub(crate) fn infer_triangular_solve(
    a: &Operands<'_>,
    opts: &TriangularSolve,
) -> Result<Vec<TensorType>> {
    let [m, b] = a.exactly::<2>()?;
    float(a.op, m)?;
    let r = m.rank();
    let square = r >= 2 && m.dims[r - 1] == m.dims[r - 2];
    let n = if r >= 2 { m.dims[r - 1] } else { -1 };
    let fits = square
        && b.rank() == r
        && b.dtype == m.dtype
        && m.dims[..r - 2] == b.dims[..r - 2]
        && if opts.left_side {
            b.dims[r - 2] == n
        } else {
            b.dims[r - 1] == n
        };
    if !fits {
        return Err(Error::ShapeMismatch {
            op: a.op,
            lhs: m.clone(),
            rhs: b.clone(),
        });
    }
    Ok(vec![b.clone()])
}

pub(crate) fn write_dot_general<W: fmt::Write>(
    w: &mut Writer<W>,
    s: &Site<'_>,
    d: &DotDims,
) -> fmt::Result {
    let mut fields = Vec::new();
    let mut field = |name: &str, v: &[usize]| {
        if !v.is_empty() {
            fields.push(format!("{name} = {}", list(v)));
        }
    };
    field("lhs_batching_dimensions", &d.lhs_batch);
    field("rhs_batching_dimensions", &d.rhs_batch);
    field("lhs_contracting_dimensions", &d.lhs_contract);
    field("rhs_contracting_dimensions", &d.rhs_contract);
    w.simple(
        s,
        &format!(
            "dot_dimension_numbers = #stablehlo.dot<{}>",
            fields.join(", ")
        ),
    )
}

pub(crate) fn write_triangular_solve<W: fmt::Write>(
    w: &mut Writer<W>,
    s: &Site<'_>,
    o: &TriangularSolve,
) -> fmt::Result {
    let transpose = if o.transpose_a {
        "TRANSPOSE"
    } else {
        "NO_TRANSPOSE"
    };
    w.simple(
        s,
        &format!(
            "left_side = {}, lower = {}, transpose_a = #stablehlo<transpose {transpose}>, unit_diagonal = {}",
            o.left_side, o.lower, o.unit_diagonal
        ),
    )
}

pub(crate) fn vjp_dot_general(
    c: &Cotangents<'_>,
    d: &DotDims,
    lhs_cotangent: LhsCotangent,
) -> Result<Grads> {
    let (dl, dr) = dot_vjp(&c.g0()?, &c.x[0], &c.x[1], d, lhs_cotangent)?;
    Ok(vec![Some(dl), Some(dr)])
}

/// Cotangents of `dot_general` through dimension numbers, one transpose of each product at
/// most (plus, for [`LhsCotangent::TransposedRhs`], the transposed copy of `r`).
fn dot_vjp(
    g: &Tensor,
    l: &Tensor,
    r: &Tensor,
    d: &DotDims,
    lhs_cotangent: LhsCotangent,
) -> Result<(Tensor, Tensor)> {
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
    let dl = match lhs_cotangent {
        LhsCotangent::InPlace => {
            let p = g.dot_general(
                r,
                DotDims {
                    lhs_batch: g_batch.clone(),
                    rhs_batch: d.rhs_batch.clone(),
                    lhs_contract: g_rf.clone(),
                    rhs_contract: rf.clone(),
                },
            )?;
            // p's trailing dims are r's contracting dims in ascending order.
            let mut r_left: Vec<usize> = d.rhs_contract.clone();
            r_left.sort_unstable();
            let mut src: Vec<usize> = d.lhs_batch.clone();
            src.extend(&lf);
            src.extend(r_left.iter().map(|rc| {
                let k = d.rhs_contract.iter().position(|c| c == rc).unwrap_or(0);
                d.lhs_contract[k]
            }));
            p.transpose(&crate::layout::inverse(&src))?
        }
        LhsCotangent::TransposedRhs => {
            // rᵀ: [batch…, free…, contracting…], the contracting dims paired with l's in
            // the dot's order, so p's trailing dims are l's contracting dims in that order.
            let mut perm: Vec<usize> = d.rhs_batch.clone();
            perm.extend(&rf);
            perm.extend(&d.rhs_contract);
            let rt = r.transpose(&perm)?;
            let p = g.dot_general(
                &rt,
                DotDims {
                    lhs_batch: g_batch.clone(),
                    rhs_batch: (0..nb).collect(),
                    lhs_contract: g_rf.clone(),
                    rhs_contract: (nb..nb + rf.len()).collect(),
                },
            )?;
            let mut src: Vec<usize> = d.lhs_batch.clone();
            src.extend(&lf);
            src.extend(&d.lhs_contract);
            p.transpose(&crate::layout::inverse(&src))?
        }
    };

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
    let dr = q.transpose(&crate::layout::inverse(&src))?;
    Ok((dl, dr))
}

fn swap_last_two(t: &Tensor) -> Result<Tensor> {
    let r = t.rank();
    let mut perm: Vec<usize> = (0..r).collect();
    perm.swap(r - 1, r - 2);
    t.transpose(&perm)
}

/// Cotangents of a triangular solve `op(A) X = B` (or `X op(A) = B`).
pub(crate) fn vjp_triangular_solve(c: &Cotangents<'_>, o: TriangularSolve) -> Result<Grads> {
    let (g, a, xs) = (c.g0()?, &c.x[0], &c.y[0]);
    let flipped = TriangularSolve {
        transpose_a: !o.transpose_a,
        ..o
    };
    let db = a.triangular_solve(&g, flipped)?;
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
    Ok(vec![Some(keep.select(&da, &da.zeros_like()?)?), Some(db)])
}
