//! Linear algebra: `dot_general` and `triangular_solve` (their VJPs:
//! `autodiff::rules::linalg`).

use std::fmt;

use crate::emit::text::{Site, Writer, list};
use crate::error::{Error, Result};
use crate::family::operands::{Operands, float};
use crate::ir::{DotDims, TriangularSolve};
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

pub(crate) fn write_dot_general(w: &mut Writer, s: &Site<'_>, d: &DotDims) -> fmt::Result {
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

pub(crate) fn write_triangular_solve(
    w: &mut Writer,
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
