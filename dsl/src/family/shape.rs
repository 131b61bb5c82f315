//! Shape ops: `broadcast_in_dim`, `reshape`, `transpose`, static and dynamic slices,
//! `concatenate` and `pad`: each moves elements without computing on them (their VJPs, the
//! adjoint movements: `autodiff::rules::shape`).

use std::fmt;

use crate::emit::text::{Site, Writer, i64_array, i64_fields};
use crate::error::{Error, Result};
use crate::family::operands::{Operands, check_axis, scalar_indices};
use crate::types::TensorType;

pub(crate) fn infer_broadcast_in_dim(a: &Operands<'_>, dims: &[usize]) -> Result<Vec<TensorType>> {
    let [x] = a.exactly::<1>()?;
    let t = a.target()?;
    let bad = || {
        Error::invalid(
            a.op,
            format!("cannot broadcast {x} to {t} with dims {dims:?}"),
        )
    };
    if t.dtype != x.dtype || dims.len() != x.rank() {
        return Err(bad());
    }
    for (i, &d) in dims.iter().enumerate() {
        let fits = d < t.rank()
            && (x.dims[i] == 1 || x.dims[i] == t.dims[d])
            && dims[..i].iter().all(|&e| e < d);
        if !fits {
            return Err(bad());
        }
    }
    Ok(vec![t])
}

pub(crate) fn infer_reshape(a: &Operands<'_>) -> Result<Vec<TensorType>> {
    let [x] = a.exactly::<1>()?;
    let t = a.target()?;
    if t.dtype != x.dtype || t.num_elements() != x.num_elements() {
        return Err(Error::ShapeMismatch {
            op: a.op,
            lhs: x.clone(),
            rhs: t,
        });
    }
    Ok(vec![t])
}

pub(crate) fn infer_transpose(a: &Operands<'_>, perm: &[usize]) -> Result<Vec<TensorType>> {
    let [x] = a.exactly::<1>()?;
    let mut seen = vec![false; x.rank()];
    if perm.len() != x.rank()
        || perm
            .iter()
            .any(|&p| p >= x.rank() || std::mem::replace(&mut seen[p], true))
    {
        return Err(Error::invalid(
            a.op,
            format!("{perm:?} is not a permutation of the dimensions of {x}"),
        ));
    }
    Ok(vec![x.with_dims(
        perm.iter().map(|&p| x.dims[p]).collect::<Vec<_>>(),
    )])
}

pub(crate) fn infer_slice(
    a: &Operands<'_>,
    start: &[i64],
    limit: &[i64],
    stride: &[i64],
) -> Result<Vec<TensorType>> {
    let [x] = a.exactly::<1>()?;
    let ok = start.len() == x.rank()
        && limit.len() == x.rank()
        && stride.len() == x.rank()
        && (0..x.rank()).all(|i| {
            0 <= start[i] && start[i] <= limit[i] && limit[i] <= x.dims[i] && stride[i] >= 1
        });
    if !ok {
        return Err(Error::invalid(
            a.op,
            format!("[{start:?}, {limit:?}) step {stride:?} does not fit {x}"),
        ));
    }
    let dims: Vec<i64> = (0..x.rank())
        .map(|i| (limit[i] - start[i] + stride[i] - 1) / stride[i])
        .collect();
    Ok(vec![x.with_dims(dims)])
}

pub(crate) fn infer_dynamic_slice(a: &Operands<'_>, sizes: &[i64]) -> Result<Vec<TensorType>> {
    let x = &a.args[0];
    if a.args.len() != 1 + x.rank() || sizes.len() != x.rank() {
        return Err(Error::invalid(
            a.op,
            format!("{x} needs {} start indices and sizes", x.rank()),
        ));
    }
    scalar_indices(a.op, &a.args[1..])?;
    if sizes.iter().zip(&x.dims).any(|(&s, &d)| s < 0 || s > d) {
        return Err(Error::invalid(
            a.op,
            format!("sizes {sizes:?} do not fit {x}"),
        ));
    }
    Ok(vec![x.with_dims(sizes.to_vec())])
}

pub(crate) fn infer_dynamic_update_slice(a: &Operands<'_>) -> Result<Vec<TensorType>> {
    let x = &a.args[0];
    if a.args.len() != 2 + x.rank() {
        return Err(Error::invalid(
            a.op,
            format!("{x} needs {} start indices", x.rank()),
        ));
    }
    let u = &a.args[1];
    if u.dtype != x.dtype
        || u.rank() != x.rank()
        || u.dims.iter().zip(&x.dims).any(|(ud, xd)| ud > xd)
    {
        return Err(Error::ShapeMismatch {
            op: a.op,
            lhs: x.clone(),
            rhs: u.clone(),
        });
    }
    scalar_indices(a.op, &a.args[2..])?;
    Ok(vec![x.clone()])
}

pub(crate) fn infer_concatenate(a: &Operands<'_>, dim: usize) -> Result<Vec<TensorType>> {
    let first = a
        .args
        .first()
        .ok_or_else(|| Error::invalid(a.op, "needs at least one operand"))?;
    check_axis(a.op, dim, first)?;
    let mut dims = first.dims.clone();
    for x in &a.args[1..] {
        let compatible = x.dtype == first.dtype
            && x.rank() == first.rank()
            && (0..x.rank()).all(|i| i == dim || x.dims[i] == first.dims[i]);
        if !compatible {
            return Err(Error::ShapeMismatch {
                op: a.op,
                lhs: first.clone(),
                rhs: x.clone(),
            });
        }
        dims[dim] += x.dims[dim];
    }
    Ok(vec![first.with_dims(dims)])
}

pub(crate) fn infer_pad(
    a: &Operands<'_>,
    low: &[i64],
    high: &[i64],
    interior: &[i64],
) -> Result<Vec<TensorType>> {
    let [x, value] = a.exactly::<2>()?;
    if *value != TensorType::scalar(x.dtype) {
        return Err(Error::invalid(
            a.op,
            format!("padding value must be a {} scalar, got {value}", x.dtype),
        ));
    }
    if low.len() != x.rank()
        || high.len() != x.rank()
        || interior.len() != x.rank()
        || interior.iter().any(|&i| i < 0)
    {
        return Err(Error::invalid(
            a.op,
            format!("padding does not match the rank of {x}"),
        ));
    }
    let dims: Vec<i64> = (0..x.rank())
        .map(|i| {
            let d = x.dims[i];
            (d - 1)
                .max(0)
                .checked_mul(interior[i])
                .and_then(|v| v.checked_add(d))
                .and_then(|v| v.checked_add(low[i]))
                .and_then(|v| v.checked_add(high[i]))
                .ok_or_else(|| Error::invalid(a.op, format!("padding {x} overflows")))
        })
        .collect::<Result<_>>()?;
    if dims.iter().any(|&d| d < 0) {
        return Err(Error::invalid(
            a.op,
            format!("negative result size padding {x}"),
        ));
    }
    Ok(vec![x.with_dims(dims)])
}

fn usize_array(v: &[usize]) -> String {
    i64_array(v.iter().map(|&d| d as i64))
}

pub(crate) fn write_broadcast_in_dim(w: &mut Writer, s: &Site<'_>, dims: &[usize]) -> fmt::Result {
    w.simple(s, &format!("broadcast_dimensions = {}", usize_array(dims)))
}

pub(crate) fn write_transpose(w: &mut Writer, s: &Site<'_>, perm: &[usize]) -> fmt::Result {
    w.simple(s, &format!("permutation = {}", usize_array(perm)))
}

/// The properties of a static slice (also used for the slices the writer makes itself).
pub(crate) fn slice_props(start: &[i64], limit: &[i64], stride: &[i64]) -> String {
    i64_fields(&[
        ("start_indices", start),
        ("limit_indices", limit),
        ("strides", stride),
    ])
}

pub(crate) fn write_dynamic_slice(w: &mut Writer, s: &Site<'_>, sizes: &[i64]) -> fmt::Result {
    w.simple(
        s,
        &format!("slice_sizes = {}", i64_array(sizes.iter().copied())),
    )
}

pub(crate) fn write_concatenate(w: &mut Writer, s: &Site<'_>, dim: usize) -> fmt::Result {
    w.simple(s, &format!("dimension = {dim} : i64"))
}

pub(crate) fn write_pad(
    w: &mut Writer,
    s: &Site<'_>,
    low: &[i64],
    high: &[i64],
    interior: &[i64],
) -> fmt::Result {
    w.simple(
        s,
        &i64_fields(&[
            ("edge_padding_low", low),
            ("edge_padding_high", high),
            ("interior_padding", interior),
        ]),
    )
}
