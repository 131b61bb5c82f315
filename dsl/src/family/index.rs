//! Indexing: `take` (a `gather`), its transpose `scatter_add` (a `scatter`), and `top_k`
//! (a stable descending `sort` of values and indices, then a slice of each).

use std::fmt;

use super::{constant, elementwise, shape};
use crate::dtype::DType;
use crate::emit::text::{OpLine, Site, Writer, i64_array, list, region, signature};
use crate::error::{Error, Result};
use crate::family::operands::{Operands, check_axis, int};
use crate::ir::{BinaryOp, Comparison, Op};
use crate::types::TensorType;

/// `x[..axis] ++ indices ++ x[axis+1..]`: what `take` makes and `scatter_add` adds in.
fn taken_dims(x: &TensorType, indices: &TensorType, axis: usize) -> Vec<i64> {
    let mut dims = x.dims[..axis].to_vec();
    dims.extend(&indices.dims);
    dims.extend(&x.dims[axis + 1..]);
    dims
}

pub(crate) fn infer_take(a: &Operands<'_>, axis: usize) -> Result<Vec<TensorType>> {
    let [x, idx] = a.exactly::<2>()?;
    check_axis(a.op, axis, x)?;
    int(a.op, idx)?;
    Ok(vec![x.with_dims(taken_dims(x, idx, axis))])
}

pub(crate) fn infer_scatter_add(a: &Operands<'_>, axis: usize) -> Result<Vec<TensorType>> {
    let [x, idx, upd] = a.exactly::<3>()?;
    check_axis(a.op, axis, x)?;
    int(a.op, idx)?;
    let dims = taken_dims(x, idx, axis);
    if upd.dtype != x.dtype || upd.dims != dims {
        return Err(Error::ShapeMismatch {
            op: a.op,
            lhs: x.with_dims(dims),
            rhs: upd.clone(),
        });
    }
    Ok(vec![x.clone()])
}

pub(crate) fn infer_top_k(a: &Operands<'_>, k: usize) -> Result<Vec<TensorType>> {
    let [x] = a.exactly::<1>()?;
    let last = x
        .dims
        .last()
        .copied()
        .ok_or_else(|| Error::invalid(a.op, "needs rank ≥ 1"))?;
    if k == 0 || k as i64 > last {
        return Err(Error::invalid(a.op, format!("k = {k} does not fit {x}")));
    }
    let mut dims = x.dims.clone();
    *dims.last_mut().unwrap_or(&mut 0) = k as i64;
    Ok(vec![
        x.with_dims(dims.clone()),
        TensorType::new(DType::I32, dims),
    ])
}

/// The dimensions of a gathered or scattered window: all but `axis`, shifted past the
/// `q` index dimensions.
fn window_dims(axis: usize, q: usize, rank: usize) -> Vec<usize> {
    (0..axis).chain(axis + q..rank - 1 + q).collect()
}

/// The dimension numbers of a gather or scatter along one `axis` with `q` index dimensions,
/// under the op's own names for (window dimensions, the dimension indexed away, the index
/// map): gather and scatter describe the same layout with different words.
fn dimension_numbers(names: [&str; 3], axis: usize, q: usize, rank: usize) -> String {
    let [window_name, collapsed_name, map_name] = names;
    let window = window_dims(axis, q, rank);
    let mut fields = Vec::new();
    if !window.is_empty() {
        fields.push(format!("{window_name} = {}", list(&window)));
    }
    fields.push(format!("{collapsed_name} = [{axis}]"));
    fields.push(format!("{map_name} = [{axis}]"));
    fields.push(format!("index_vector_dim = {q}"));
    fields.join(", ")
}

pub(crate) fn write_take(w: &mut Writer, s: &Site<'_>, axis: usize) -> fmt::Result {
    let x = s.operand(0);
    let q = s.operand(1).rank();
    let mut sizes = x.dims.clone();
    sizes[axis] = 1;
    let fields = dimension_numbers(
        ["offset_dims", "collapsed_slice_dims", "start_index_map"],
        axis,
        q,
        x.rank(),
    );
    w.node_as(
        s,
        "gather",
        &format!(
            "dimension_numbers = #stablehlo.gather<{}>, indices_are_sorted = false, slice_sizes = {}",
            fields,
            i64_array(sizes)
        ),
        &[],
    )
}

pub(crate) fn write_scatter_add(w: &mut Writer, s: &Site<'_>, axis: usize) -> fmt::Result {
    let x = s.operand(0);
    let q = s.operand(1).rank();
    let fields = dimension_numbers(
        [
            "update_window_dims",
            "inserted_window_dims",
            "scatter_dims_to_operand_dims",
        ],
        axis,
        q,
        x.rank(),
    );
    let region = w.scalar_region(BinaryOp::Add, x.dtype, s.depth)?;
    w.node_as(
        s,
        "scatter",
        &format!(
            "indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<{}>, unique_indices = false",
            fields
        ),
        &[region],
    )
}

/// Top-k as a stable descending sort of (values, indices) along the last dimension,
/// then a slice of the first `k`.
pub(crate) fn write_top_k(w: &mut Writer, s: &Site<'_>, k: usize) -> fmt::Result {
    let depth = s.depth;
    let x = s.operand(0).clone();
    let r = x.rank();
    let it = x.with_dtype(DType::I32);
    let iota = w.fresh("v");
    constant::write_iota_of(w, depth, &iota, r - 1, &it)?;
    let st = TensorType::scalar(x.dtype);
    let si = TensorType::scalar(DType::I32);
    let (a, b, c, d, p) = (
        w.fresh("a"),
        w.fresh("a"),
        w.fresh("a"),
        w.fresh("a"),
        w.fresh("v"),
    );
    // Floats compare in total order so that NaNs sort deterministically.
    let order = if x.dtype.is_float() {
        "TOTALORDER"
    } else {
        elementwise::compare_type(x.dtype)
    };
    let mut compare = String::new();
    OpLine {
        lhs: &p,
        name: Op::Compare(Comparison::Gt).name(),
        operands: &format!("{a}, {b}"),
        props: &elementwise::compare_props(Comparison::Gt, order),
        types: &signature(
            &[st.clone(), st.clone()],
            &[TensorType::scalar(DType::Bool)],
        ),
        ..OpLine::default()
    }
    .write_to(&mut compare, depth + 2)?;
    let region = region(
        depth,
        &[
            format!("{a}: {st}"),
            format!("{b}: {st}"),
            format!("{c}: {si}"),
            format!("{d}: {si}"),
        ],
        &compare,
        &p,
        &[TensorType::scalar(DType::Bool)],
    );
    let sorted = w.fresh("v");
    let operand = w.operand(s.node, 0);
    let pair = [x.clone(), it.clone()];
    w.op(
        depth,
        OpLine {
            lhs: &format!("{sorted}:2"),
            name: "sort",
            operands: &format!("{operand}, {iota}"),
            props: &format!("dimension = {} : i64, is_stable = true", r - 1),
            regions: &[region],
            types: &signature(&pair, &pair),
            ..OpLine::default()
        },
    )?;
    let start = vec![0; r];
    let mut limit = x.dims.clone();
    limit[r - 1] = k as i64;
    let stride = vec![1; r];
    let props = shape::slice_props(&start, &limit, &stride);
    let slice = Op::Slice {
        start,
        limit: limit.clone(),
        stride,
    };
    for (i, src_ty) in pair.into_iter().enumerate() {
        let out = w.fresh("v");
        w.name_result(s.node, i, out.clone());
        w.op(
            depth,
            OpLine {
                lhs: &out,
                name: slice.name(),
                operands: &format!("{sorted}#{i}"),
                props: &props,
                types: &signature(
                    std::slice::from_ref(&src_ty),
                    &[src_ty.with_dims(limit.clone())],
                ),
                ..OpLine::default()
            },
        )?;
    }
    Ok(())
}
