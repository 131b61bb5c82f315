//! Collectives over a mesh axis: `all_gather`, `reduce_scatter`, `all_reduce`,
//! `all_to_all` and `axis_index`.
//!
//! Building one needs only the axis; emitting one needs the program's mesh to hold that axis
//! (one of its axes, or a compound of several), which only the program knows, so that check
//! runs in the writer's validation pass; the replica groups come from the mesh too
//! ([`Mesh::replica_groups`]). On a one-device axis every collective is the identity and
//! `axis_index` is 0. Their VJPs (`autodiff::rules::collective`) are the dual collectives.

use std::fmt;

use super::constant;
use crate::dtype::DType;
use crate::emit::text::{Site, Writer};
use crate::error::{Error, Result};
use crate::family::operands::{Operands, check_axis as check_dim};
use crate::ir::{Axis, BinaryOp, Literal, Op};
use crate::mesh::Mesh;
use crate::types::TensorType;

pub(crate) fn infer_all_gather(
    a: &Operands<'_>,
    dim: usize,
    axis: &Axis,
) -> Result<Vec<TensorType>> {
    let [x] = a.exactly::<1>()?;
    check_dim(a.op, dim, x)?;
    let mut dims = x.dims.clone();
    dims[dim] = dims[dim]
        .checked_mul(axis.size as i64)
        .ok_or_else(|| Error::invalid(a.op, format!("gathering {x} is too large")))?;
    Ok(vec![x.with_dims(dims)])
}

pub(crate) fn infer_reduce_scatter(
    a: &Operands<'_>,
    dim: usize,
    axis: &Axis,
) -> Result<Vec<TensorType>> {
    let [x] = a.exactly::<1>()?;
    check_dim(a.op, dim, x)?;
    Ok(vec![x.with_dims(split(a, x, dim, axis)?)])
}

/// `x`'s dimensions with `dim` (in range) cut into one piece per device of `axis`.
fn split(a: &Operands<'_>, x: &TensorType, dim: usize, axis: &Axis) -> Result<Vec<i64>> {
    if x.dims[dim].checked_rem(axis.size as i64) != Some(0) {
        return Err(Error::invalid(
            a.op,
            format!(
                "dimension {dim} of {x} does not split over {} devices",
                axis.size
            ),
        ));
    }
    let mut dims = x.dims.clone();
    dims[dim] /= axis.size as i64;
    Ok(dims)
}

pub(crate) fn infer_all_reduce(a: &Operands<'_>) -> Result<Vec<TensorType>> {
    let [x] = a.exactly::<1>()?;
    Ok(vec![x.clone()])
}

pub(crate) fn infer_all_to_all(
    a: &Operands<'_>,
    split_dim: usize,
    concat_dim: usize,
    axis: &Axis,
) -> Result<Vec<TensorType>> {
    let [x] = a.exactly::<1>()?;
    check_dim(a.op, split_dim, x)?;
    check_dim(a.op, concat_dim, x)?;
    let mut dims = split(a, x, split_dim, axis)?;
    dims[concat_dim] = dims[concat_dim]
        .checked_mul(axis.size as i64)
        .ok_or_else(|| Error::invalid(a.op, format!("exchanging {x} is too large")))?;
    Ok(vec![x.with_dims(dims)])
}

pub(crate) fn infer_axis_index(a: &Operands<'_>) -> Result<Vec<TensorType>> {
    a.exactly::<0>()?;
    Ok(vec![TensorType::scalar(DType::I32)])
}

/// A collective `op` on `axis` can be written only in a program whose mesh holds that axis.
pub(crate) fn check_axis(op: &'static str, axis: &Axis, mesh: Option<&Mesh>) -> Result<()> {
    match mesh {
        Some(m) => m.resolve(axis).map(|_| ()).map_err(|e| {
            Error::invalid(
                op,
                format!(
                    "collective on axis `{}` in a program on the mesh {}: {}",
                    axis.name,
                    m.describe(),
                    detail(&e)
                ),
            )
        }),
        None => Err(Error::invalid(
            op,
            format!(
                "collective on axis `{}` in a single-device program; use Program::on_mesh",
                axis.name
            ),
        )),
    }
}

/// `axis_index` on `axis` can be written only in a program whose mesh holds that axis.
pub(crate) fn check_axis_index(op: &'static str, axis: &Axis, mesh: Option<&Mesh>) -> Result<()> {
    match mesh.map(|m| m.resolve(axis)) {
        Some(Ok(_)) => Ok(()),
        _ => Err(Error::invalid(
            op,
            format!("axis `{}` is not an axis of the program's mesh", axis.name),
        )),
    }
}

/// The message of an invalid-argument error, without the op it names.
fn detail(e: &Error) -> String {
    match e {
        Error::InvalidOp { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

/// On a one-device axis a collective is the identity: writes nothing and returns `true`.
/// Validation has made the axis the program's, so this is a one-device program.
fn identity(w: &mut Writer, s: &Site<'_>, axis: &Axis) -> bool {
    let one_device = axis.size == 1;
    if one_device {
        w.alias(s.node);
    }
    one_device
}

pub(crate) fn write_all_gather(
    w: &mut Writer,
    s: &Site<'_>,
    dim: usize,
    axis: &Axis,
) -> fmt::Result {
    if identity(w, s, axis) {
        return Ok(());
    }
    let ch = channel_props(w, axis);
    w.simple(
        s,
        &format!("all_gather_dim = {dim} : i64, {ch}, use_global_device_ids"),
    )
}

pub(crate) fn write_reduce_scatter(
    w: &mut Writer,
    s: &Site<'_>,
    dim: usize,
    axis: &Axis,
) -> fmt::Result {
    write_summing(w, s, axis, |ch| {
        format!("{ch}, scatter_dimension = {dim} : i64, use_global_device_ids")
    })
}

pub(crate) fn write_all_reduce(w: &mut Writer, s: &Site<'_>, axis: &Axis) -> fmt::Result {
    write_summing(w, s, axis, |ch| format!("{ch}, use_global_device_ids"))
}

/// A collective that sums across devices: its region adds, and `props` get the channel.
fn write_summing(
    w: &mut Writer,
    s: &Site<'_>,
    axis: &Axis,
    props: impl FnOnce(&str) -> String,
) -> fmt::Result {
    if identity(w, s, axis) {
        return Ok(());
    }
    let ch = channel_props(w, axis);
    let region = w.scalar_region(BinaryOp::Add, s.operand(0).dtype, s.depth)?;
    w.node_as(s, s.node.op.name(), &props(&ch), &[region])
}

pub(crate) fn write_all_to_all(
    w: &mut Writer,
    s: &Site<'_>,
    split_dim: usize,
    concat_dim: usize,
    axis: &Axis,
) -> fmt::Result {
    if identity(w, s, axis) {
        return Ok(());
    }
    let ch = channel_props(w, axis);
    w.simple(
        s,
        &format!(
            "{ch}, concat_dimension = {concat_dim} : i64, split_count = {} : i64, split_dimension = {split_dim} : i64",
            axis.size
        ),
    )
}

/// This device's index along `axis`: the partition id, converted to `i32`, on the axis over
/// every device; its coordinates along the axis's mesh axes on another; 0 on one device.
pub(crate) fn write_axis_index(w: &mut Writer, s: &Site<'_>, axis: &Axis) -> fmt::Result {
    let i32_ty = TensorType::scalar(DType::I32);
    if axis.size == 1 {
        let lhs = w.bind(s.node);
        return constant::write_literal(w, s.depth, &lhs, Literal::Int(vec![0]), &i32_ty);
    }
    // Validation resolved the axis in the mesh.
    let terms = w
        .mesh()
        .and_then(|m| m.index_terms(axis).ok())
        .ok_or(fmt::Error)?;
    let devices = w.mesh().map_or(axis.size, Mesh::size);
    let pid = w.fresh("v");
    w.line(
        s.depth,
        &format!("{pid} = \"stablehlo.partition_id\"() : () -> tensor<ui32>"),
    )?;
    let convert = |w: &mut Writer, lhs: &str| {
        w.line(
            s.depth,
            &format!(
                "{lhs} = \"stablehlo.{}\"({pid}) : (tensor<ui32>) -> tensor<i32>",
                Op::Convert.name()
            ),
        )
    };
    if terms == [(1, devices, 1)] {
        let lhs = w.bind(s.node);
        return convert(w, &lhs);
    }
    let id = w.fresh("v");
    convert(w, &id)?;
    let ty = i32_ty.to_string();
    let binary = |w: &mut Writer, op: &str, a: &str, k: usize| -> Result<String, fmt::Error> {
        let c = w.fresh("v");
        constant::write_literal(w, s.depth, &c, Literal::Int(vec![k as i64]), &i32_ty)?;
        let out = w.fresh("v");
        w.line(
            s.depth,
            &format!("{out} = \"stablehlo.{op}\"({a}, {c}) : ({ty}, {ty}) -> {ty}"),
        )?;
        Ok(out)
    };
    let mut sum: Option<String> = None;
    for (stride, size, weight) in terms {
        let mut v = id.clone();
        if stride != 1 {
            v = binary(w, "divide", &v, stride)?;
        }
        if stride * size != devices {
            v = binary(w, "remainder", &v, size)?;
        }
        if weight != 1 {
            v = binary(w, "multiply", &v, weight)?;
        }
        sum = Some(match sum {
            None => v,
            Some(acc) => {
                let out = w.fresh("v");
                w.line(
                    s.depth,
                    &format!("{out} = \"stablehlo.add\"({acc}, {v}) : ({ty}, {ty}) -> {ty}"),
                )?;
                out
            }
        });
    }
    // One term at least: an axis names one mesh axis or more.
    let value = sum.ok_or(fmt::Error)?;
    w.alias_to(s.node, &value);
    Ok(())
}

/// A fresh channel over the axis's groups of devices (one group of every device on a
/// one-axis mesh).
fn channel_props(w: &mut Writer, axis: &Axis) -> String {
    let groups = w
        .mesh()
        .and_then(|m| m.replica_groups(axis).ok())
        .unwrap_or_else(|| vec![(0..axis.size).collect()]);
    let h = w.channel();
    let text: Vec<String> = groups
        .iter()
        .map(|g| {
            let ids: Vec<String> = g.iter().map(ToString::to_string).collect();
            format!("[{}]", ids.join(", "))
        })
        .collect();
    format!(
        "channel_handle = #stablehlo.channel_handle<handle = {h}, type = 1>, replica_groups = dense<[{}]> : tensor<{}x{}xi64>",
        text.join(", "),
        groups.len(),
        axis.size
    )
}
