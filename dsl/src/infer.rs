//! Shape and element-type rules of every op: the check that runs before a node enters a graph.
//!
//! Each rule returns the result types or an [`Error`] naming the op and the offending types, so
//! a mistake in model code is reported where it is made, never by XLA at compile time.

use crate::error::{Error, Result};
use crate::ir::{Literal, Op, ReduceKind};
use crate::{DType, TensorType};

/// Result types of `op` applied to operands of types `args`. Ops whose result type is not a
/// function of their operands (constant, iota, convert, reshape) take it as `target`.
pub(crate) fn infer(
    op: &Op,
    args: &[TensorType],
    target: Option<&TensorType>,
) -> Result<Vec<TensorType>> {
    let name = op.name();
    let arity = |n: usize| -> Result<()> {
        if args.len() == n {
            Ok(())
        } else {
            Err(Error::invalid(
                name,
                format!("expected {n} operands, got {}", args.len()),
            ))
        }
    };
    let target = || {
        target
            .cloned()
            .ok_or_else(|| Error::invalid(name, "needs a result type"))
    };
    match op {
        Op::Constant(lit) => {
            arity(0)?;
            let t = target()?;
            if !lit.fits(t.dtype) {
                return Err(Error::invalid(
                    name,
                    format!("{lit:?} cannot hold {}", t.dtype),
                ));
            }
            if lit.len() != 1 && lit.len() != t.num_elements() {
                return Err(Error::invalid(
                    name,
                    format!(
                        "{} values for {t} ({} elements)",
                        lit.len(),
                        t.num_elements()
                    ),
                ));
            }
            if let (Literal::Int(v), DType::I32) = (lit, t.dtype)
                && let Some(bad) = v.iter().find(|&&x| i32::try_from(x).is_err())
            {
                return Err(Error::invalid(name, format!("{bad} does not fit {t}")));
            }
            Ok(vec![t])
        }
        Op::Iota { dim } => {
            arity(0)?;
            let t = target()?;
            check_axis(name, *dim, &t)?;
            Ok(vec![t])
        }
        Op::Unary(_) => {
            arity(1)?;
            float(name, &args[0])?;
            Ok(vec![args[0].clone()])
        }
        Op::Binary(_) => {
            arity(2)?;
            same_type(name, &args[0], &args[1])?;
            if args[0].dtype == DType::Bool {
                return Err(Error::UnsupportedDType {
                    op: name,
                    expected: "a numeric",
                    actual: args[0].clone(),
                });
            }
            Ok(vec![args[0].clone()])
        }
        Op::Compare(_) => {
            arity(2)?;
            same_type(name, &args[0], &args[1])?;
            Ok(vec![args[0].with_dtype(DType::Bool)])
        }
        Op::Select => {
            arity(3)?;
            if args[0].dtype != DType::Bool {
                return Err(Error::UnsupportedDType {
                    op: name,
                    expected: "a bool predicate",
                    actual: args[0].clone(),
                });
            }
            same_type(name, &args[1], &args[2])?;
            same_dims(name, &args[0], &args[1])?;
            Ok(vec![args[1].clone()])
        }
        Op::Convert => {
            arity(1)?;
            let t = target()?;
            same_dims(name, &args[0], &t)?;
            Ok(vec![t])
        }
        Op::StopGradient => {
            arity(1)?;
            Ok(vec![args[0].clone()])
        }
        Op::BroadcastInDim { dims } => {
            arity(1)?;
            let t = target()?;
            let x = &args[0];
            if t.dtype != x.dtype || dims.len() != x.rank() {
                return Err(Error::invalid(
                    name,
                    format!("cannot broadcast {x} to {t} with dims {dims:?}"),
                ));
            }
            for (i, &d) in dims.iter().enumerate() {
                let fits = d < t.rank()
                    && (x.dims[i] == 1 || x.dims[i] == t.dims[d])
                    && dims[..i].iter().all(|&e| e < d);
                if !fits {
                    return Err(Error::invalid(
                        name,
                        format!("cannot broadcast {x} to {t} with dims {dims:?}"),
                    ));
                }
            }
            Ok(vec![t])
        }
        Op::Reshape => {
            arity(1)?;
            let t = target()?;
            if t.dtype != args[0].dtype || t.num_elements() != args[0].num_elements() {
                return Err(Error::ShapeMismatch {
                    op: name,
                    lhs: args[0].clone(),
                    rhs: t,
                });
            }
            Ok(vec![t])
        }
        Op::Transpose { perm } => {
            arity(1)?;
            let x = &args[0];
            let mut seen = vec![false; x.rank()];
            if perm.len() != x.rank()
                || perm
                    .iter()
                    .any(|&p| p >= x.rank() || std::mem::replace(&mut seen[p], true))
            {
                return Err(Error::invalid(
                    name,
                    format!("{perm:?} is not a permutation of the dimensions of {x}"),
                ));
            }
            Ok(vec![x.with_dims(
                perm.iter().map(|&p| x.dims[p]).collect::<Vec<_>>(),
            )])
        }
        Op::Slice {
            start,
            limit,
            stride,
        } => {
            arity(1)?;
            let x = &args[0];
            let ok = start.len() == x.rank()
                && limit.len() == x.rank()
                && stride.len() == x.rank()
                && (0..x.rank()).all(|i| {
                    0 <= start[i] && start[i] <= limit[i] && limit[i] <= x.dims[i] && stride[i] >= 1
                });
            if !ok {
                return Err(Error::invalid(
                    name,
                    format!("[{start:?}, {limit:?}) step {stride:?} does not fit {x}"),
                ));
            }
            let dims: Vec<i64> = (0..x.rank())
                .map(|i| (limit[i] - start[i] + stride[i] - 1) / stride[i])
                .collect();
            Ok(vec![x.with_dims(dims)])
        }
        Op::DynamicSlice { sizes } => {
            let x = &args[0];
            if args.len() != 1 + x.rank() || sizes.len() != x.rank() {
                return Err(Error::invalid(
                    name,
                    format!("{x} needs {} start indices and sizes", x.rank()),
                ));
            }
            scalar_indices(name, &args[1..])?;
            if sizes.iter().zip(&x.dims).any(|(&s, &d)| s < 0 || s > d) {
                return Err(Error::invalid(
                    name,
                    format!("sizes {sizes:?} do not fit {x}"),
                ));
            }
            Ok(vec![x.with_dims(sizes.clone())])
        }
        Op::DynamicUpdateSlice => {
            let x = &args[0];
            if args.len() != 2 + x.rank() {
                return Err(Error::invalid(
                    name,
                    format!("{x} needs {} start indices", x.rank()),
                ));
            }
            let u = &args[1];
            if u.dtype != x.dtype
                || u.rank() != x.rank()
                || u.dims.iter().zip(&x.dims).any(|(a, b)| a > b)
            {
                return Err(Error::ShapeMismatch {
                    op: name,
                    lhs: x.clone(),
                    rhs: u.clone(),
                });
            }
            scalar_indices(name, &args[2..])?;
            Ok(vec![x.clone()])
        }
        Op::Concatenate { dim } => {
            let first = args
                .first()
                .ok_or_else(|| Error::invalid(name, "needs at least one operand"))?;
            check_axis(name, *dim, first)?;
            let mut dims = first.dims.clone();
            for a in &args[1..] {
                let compatible = a.dtype == first.dtype
                    && a.rank() == first.rank()
                    && (0..a.rank()).all(|i| i == *dim || a.dims[i] == first.dims[i]);
                if !compatible {
                    return Err(Error::ShapeMismatch {
                        op: name,
                        lhs: first.clone(),
                        rhs: a.clone(),
                    });
                }
                dims[*dim] += a.dims[*dim];
            }
            Ok(vec![first.with_dims(dims)])
        }
        Op::Pad {
            low,
            high,
            interior,
        } => {
            arity(2)?;
            let x = &args[0];
            if args[1] != TensorType::scalar(x.dtype) {
                return Err(Error::invalid(
                    name,
                    format!(
                        "padding value must be a {} scalar, got {}",
                        x.dtype, args[1]
                    ),
                ));
            }
            if low.len() != x.rank()
                || high.len() != x.rank()
                || interior.len() != x.rank()
                || interior.iter().any(|&i| i < 0)
            {
                return Err(Error::invalid(
                    name,
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
                        .ok_or_else(|| Error::invalid(name, format!("padding {x} overflows")))
                })
                .collect::<Result<_>>()?;
            if dims.iter().any(|&d| d < 0) {
                return Err(Error::invalid(
                    name,
                    format!("negative result size padding {x}"),
                ));
            }
            Ok(vec![x.with_dims(dims)])
        }
        Op::Reduce { kind, axes } => {
            arity(1)?;
            let x = &args[0];
            if *kind == ReduceKind::Sum && x.dtype == DType::Bool {
                return Err(Error::UnsupportedDType {
                    op: name,
                    expected: "a numeric",
                    actual: x.clone(),
                });
            }
            for (i, &a) in axes.iter().enumerate() {
                check_axis(name, a, x)?;
                if axes[..i].iter().any(|&b| b >= a) {
                    return Err(Error::invalid(
                        name,
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
        Op::Cumsum { axis, .. } => {
            arity(1)?;
            check_axis(name, *axis, &args[0])?;
            Ok(vec![args[0].clone()])
        }
        Op::DotGeneral(d) => {
            arity(2)?;
            let (l, r) = (&args[0], &args[1]);
            if l.dtype != r.dtype {
                return Err(Error::DTypeMismatch {
                    op: name,
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
                    name,
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
        Op::Take { axis } => {
            arity(2)?;
            let (x, idx) = (&args[0], &args[1]);
            check_axis(name, *axis, x)?;
            int(name, idx)?;
            let mut dims = x.dims[..*axis].to_vec();
            dims.extend(&idx.dims);
            dims.extend(&x.dims[axis + 1..]);
            Ok(vec![x.with_dims(dims)])
        }
        Op::ScatterAdd { axis } => {
            arity(3)?;
            let (x, idx, upd) = (&args[0], &args[1], &args[2]);
            check_axis(name, *axis, x)?;
            int(name, idx)?;
            let mut dims = x.dims[..*axis].to_vec();
            dims.extend(&idx.dims);
            dims.extend(&x.dims[axis + 1..]);
            if upd.dtype != x.dtype || upd.dims != dims {
                return Err(Error::ShapeMismatch {
                    op: name,
                    lhs: x.with_dims(dims),
                    rhs: upd.clone(),
                });
            }
            Ok(vec![x.clone()])
        }
        Op::TopK { k } => {
            arity(1)?;
            let x = &args[0];
            let last = x
                .dims
                .last()
                .copied()
                .ok_or_else(|| Error::invalid(name, "needs rank ≥ 1"))?;
            if *k == 0 || *k as i64 > last {
                return Err(Error::invalid(name, format!("k = {k} does not fit {x}")));
            }
            let mut dims = x.dims.clone();
            *dims.last_mut().unwrap_or(&mut 0) = *k as i64;
            Ok(vec![
                x.with_dims(dims.clone()),
                TensorType::new(DType::I32, dims),
            ])
        }
        Op::TriangularSolve(opts) => {
            arity(2)?;
            let (a, b) = (&args[0], &args[1]);
            float(name, a)?;
            let r = a.rank();
            let square = r >= 2 && a.dims[r - 1] == a.dims[r - 2];
            let n = if r >= 2 { a.dims[r - 1] } else { -1 };
            let fits = square
                && b.rank() == r
                && b.dtype == a.dtype
                && a.dims[..r - 2] == b.dims[..r - 2]
                && if opts.left_side {
                    b.dims[r - 2] == n
                } else {
                    b.dims[r - 1] == n
                };
            if !fits {
                return Err(Error::ShapeMismatch {
                    op: name,
                    lhs: a.clone(),
                    rhs: b.clone(),
                });
            }
            Ok(vec![b.clone()])
        }
        Op::OptimizationBarrier => Ok(args.to_vec()),
        Op::While { cond, body, .. } => {
            let carry = args.to_vec();
            if cond.param_types() != carry
                || cond.result_types() != vec![TensorType::scalar(DType::Bool)]
            {
                return Err(Error::invalid(
                    name,
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
                    name,
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
        Op::Scan {
            body,
            length,
            num_carry,
            num_xs,
            ..
        } => {
            let (carry, rest) = args.split_at((*num_carry).min(args.len()));
            let (xs, consts) = rest.split_at((*num_xs).min(rest.len()));
            let mut expected: Vec<TensorType> = carry.to_vec();
            for x in xs {
                if x.dims.first() != Some(&(*length as i64)) {
                    return Err(Error::invalid(
                        name,
                        format!("scanned input {x} must have {length} rows"),
                    ));
                }
                expected.push(x.with_dims(x.dims[1..].to_vec()));
            }
            expected.extend(consts.iter().cloned());
            if body.param_types() != expected {
                return Err(Error::invalid(
                    name,
                    format!(
                        "the body's parameters must be [carry…, x…, consts…] = ({}), not ({})",
                        list_types(&expected),
                        list_types(&body.param_types())
                    ),
                ));
            }
            let results = body.result_types();
            if results.len() < *num_carry || results[..*num_carry] != *carry {
                return Err(Error::invalid(
                    name,
                    format!(
                        "the body must return the carry ({}) first, with unchanged types; it returns ({})",
                        list_types(carry),
                        list_types(&results)
                    ),
                ));
            }
            let mut out = carry.to_vec();
            for y in &results[*num_carry..] {
                let mut dims = vec![*length as i64];
                dims.extend(&y.dims);
                out.push(y.with_dims(dims));
            }
            Ok(out)
        }
        Op::AllGather { dim, axis } => {
            arity(1)?;
            check_axis(name, *dim, &args[0])?;
            let mut dims = args[0].dims.clone();
            dims[*dim] = dims[*dim].checked_mul(axis.size as i64).ok_or_else(|| {
                Error::invalid(name, format!("gathering {} is too large", args[0]))
            })?;
            Ok(vec![args[0].with_dims(dims)])
        }
        Op::ReduceScatter { dim, axis } => {
            arity(1)?;
            let x = &args[0];
            check_axis(name, *dim, x)?;
            if x.dims[*dim].checked_rem(axis.size as i64) != Some(0) {
                return Err(Error::invalid(
                    name,
                    format!(
                        "dimension {dim} of {x} does not split over {} devices",
                        axis.size
                    ),
                ));
            }
            let mut dims = x.dims.clone();
            dims[*dim] /= axis.size as i64;
            Ok(vec![x.with_dims(dims)])
        }
        Op::AllReduce { .. } => {
            arity(1)?;
            Ok(vec![args[0].clone()])
        }
        Op::AllToAll {
            split_dim,
            concat_dim,
            axis,
        } => {
            arity(1)?;
            let x = &args[0];
            check_axis(name, *split_dim, x)?;
            check_axis(name, *concat_dim, x)?;
            if x.dims[*split_dim].checked_rem(axis.size as i64) != Some(0) {
                return Err(Error::invalid(
                    name,
                    format!(
                        "dimension {split_dim} of {x} does not split over {} devices",
                        axis.size
                    ),
                ));
            }
            let mut dims = x.dims.clone();
            dims[*split_dim] /= axis.size as i64;
            dims[*concat_dim] = dims[*concat_dim]
                .checked_mul(axis.size as i64)
                .ok_or_else(|| Error::invalid(name, format!("exchanging {x} is too large")))?;
            Ok(vec![x.with_dims(dims)])
        }
        Op::AxisIndex { .. } => {
            arity(0)?;
            Ok(vec![TensorType::scalar(DType::I32)])
        }
    }
}

fn list_types(ts: &[TensorType]) -> String {
    ts.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) fn check_axis(op: &'static str, axis: usize, t: &TensorType) -> Result<()> {
    if axis < t.rank() {
        Ok(())
    } else {
        Err(Error::AxisOutOfRange {
            op,
            axis: axis as i64,
            operand: t.clone(),
        })
    }
}

fn same_type(op: &'static str, a: &TensorType, b: &TensorType) -> Result<()> {
    if a.dtype != b.dtype {
        return Err(Error::DTypeMismatch {
            op,
            lhs: a.dtype,
            rhs: b.dtype,
        });
    }
    same_dims(op, a, b)
}

fn same_dims(op: &'static str, a: &TensorType, b: &TensorType) -> Result<()> {
    if a.dims != b.dims {
        return Err(Error::ShapeMismatch {
            op,
            lhs: a.clone(),
            rhs: b.clone(),
        });
    }
    Ok(())
}

fn float(op: &'static str, t: &TensorType) -> Result<()> {
    if t.dtype.is_float() {
        Ok(())
    } else {
        Err(Error::UnsupportedDType {
            op,
            expected: "a floating-point",
            actual: t.clone(),
        })
    }
}

fn int(op: &'static str, t: &TensorType) -> Result<()> {
    if matches!(t.dtype, DType::I32 | DType::I64) {
        Ok(())
    } else {
        Err(Error::UnsupportedDType {
            op,
            expected: "an integer index",
            actual: t.clone(),
        })
    }
}

fn scalar_indices(op: &'static str, idx: &[TensorType]) -> Result<()> {
    match idx.iter().find(|t| **t != TensorType::scalar(DType::I32)) {
        None => Ok(()),
        Some(t) => Err(Error::UnsupportedDType {
            op,
            expected: "an i32[] start index",
            actual: t.clone(),
        }),
    }
}

/// Whether a literal kind fits a type (used by the builder for scalar constants).
pub(crate) fn literal_for(dtype: DType, value: f64) -> Literal {
    match dtype {
        // Saturates outside i64; the constant's range check then names the value.
        DType::I32 | DType::I64 => Literal::Int(vec![value as i64]),
        DType::Bool => Literal::Bool(vec![value != 0.0]),
        _ => Literal::Float(vec![value]),
    }
}
