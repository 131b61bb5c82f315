//! The VJPs of linear algebra, themselves dot products and solves, arranged so that the
//! common `x · W` needs no extra transpose.

use super::{Cotangents, Grads};
use crate::builder::Tensor;
use crate::dtype::DType;
use crate::error::Result;
use crate::ir::{DotDims, LhsCotangent, TriangularSolve};
use crate::types::TensorType;

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
