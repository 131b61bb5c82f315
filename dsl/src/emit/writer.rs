//! The StableHLO writer: one `write_*` per construct over a validated (scan-free) function.
//!
//! Every op is written in MLIR's generic form (`"stablehlo.add"(%a, %b) : (…) -> …`), with
//! inherent attributes as properties (`<{…}>`), which every StableHLO parser accepts
//! regardless of the pretty-printing conventions of its version. Output is deterministic:
//! names are numbered in emission order.
//!
//! What an op looks like in text lives with its family (`crate::family`); this module holds
//! the module layout and hands each node to its family. The naming of values and the generic
//! op line those texts go through are `emit::text`'s, below the families.
//! The IR's types were checked by `infer` as it was built; what only emission can check (the
//! mesh axis of every collective, that no scan is left) `validate` checks before the first
//! character is written, so writing itself can only fail if the output sink does.

use std::fmt;

use super::text::{Site, Writer};
use super::{Alias, Sharding};
use crate::error::{Error, Result};
use crate::family::{collective, constant, control, elementwise, index, linalg, reduce, shape};
use crate::ir::{Function, Op};
use crate::mesh::Mesh;

mod program;

type MeshView<'a> = (&'a Mesh, &'a [Sharding], &'a [Sharding]);

/// Writes the whole module.
pub(crate) fn write_program(
    main: &Function,
    mesh: Option<MeshView<'_>>,
    aliases: &[Alias],
) -> Result<String> {
    validate(main, mesh.map(|m| m.0))?;
    let mut w = Writer::new(mesh.map(|m| m.0.clone()), node_text);
    let written = match mesh {
        None => w.write_single(main, aliases),
        // One device: every collective is the identity, and XLA leaves Shardy's
        // manual-computation markers unlowered when there is nothing to partition.
        Some((m, _, _)) if m.size() == 1 => w.write_single(main, aliases),
        Some((m, params, results)) => w.write_sharded(main, m, params, results, aliases),
    };
    // A `String` never refuses text; the only other source of `fmt::Error` is an op that
    // `validate` lets through but no family can write, which would be a bug here.
    written.map_err(|fmt::Error| {
        Error::invalid("program", "internal: validated IR could not be written")
    })?;
    Ok(w.into_text())
}

/// The checks only emission can make, over `f` and its regions in writing order (so the
/// error is the one the first offending op would have met): every scan was lowered, and every
/// collective runs on axes of the program's mesh.
fn validate(f: &Function, mesh: Option<&Mesh>) -> Result<()> {
    for node in &f.nodes {
        match &node.op {
            Op::Scan { .. } | Op::Softmax { .. } => control::check_lowered(node.op.name())?,
            Op::AllGather { axis, .. }
            | Op::ReduceScatter { axis, .. }
            | Op::AllReduce { axis }
            | Op::AllToAll { axis, .. } => collective::check_axis(node.op.name(), axis, mesh)?,
            Op::AxisIndex { axis } => collective::check_axis_index(node.op.name(), axis, mesh)?,
            _ => {}
        }
        for region in node.op.regions() {
            validate(region, mesh)?;
        }
    }
    Ok(())
}

/// Hands `s`'s node to its family's text.
fn node_text(w: &mut Writer, s: &Site<'_>) -> fmt::Result {
    match &s.node.op {
        Op::Constant(lit) => constant::write_constant(w, s, lit),
        Op::Iota { dim } => constant::write_iota(w, s, *dim),
        Op::Unary(_) | Op::Binary(_) | Op::Select | Op::Convert => w.simple(s, ""),
        Op::Compare(c) => elementwise::write_compare(w, s, *c),
        Op::StopGradient => {
            w.alias(s.node);
            Ok(())
        }
        Op::BroadcastInDim { dims } => shape::write_broadcast_in_dim(w, s, dims),
        Op::Reshape => w.simple(s, ""),
        Op::Transpose { perm } => shape::write_transpose(w, s, perm),
        Op::Slice {
            start,
            limit,
            stride,
        } => w.simple(s, &shape::slice_props(start, limit, stride)),
        Op::DynamicSlice { sizes } => shape::write_dynamic_slice(w, s, sizes),
        Op::DynamicUpdateSlice => w.simple(s, ""),
        Op::Concatenate { dim } => shape::write_concatenate(w, s, *dim),
        Op::Pad {
            low,
            high,
            interior,
        } => shape::write_pad(w, s, low, high, interior),
        Op::Reduce { kind, axes } => reduce::write_reduce(w, s, *kind, axes),
        Op::Cumsum { axis, reverse } => reduce::write_cumsum(w, s, *axis, *reverse),
        Op::DotGeneral { dims: d, .. } => linalg::write_dot_general(w, s, d),
        Op::TriangularSolve(o) => linalg::write_triangular_solve(w, s, o),
        Op::Take { axis } => index::write_take(w, s, *axis),
        Op::ScatterAdd { axis } => index::write_scatter_add(w, s, *axis),
        Op::TopK { k } => index::write_top_k(w, s, *k),
        Op::OptimizationBarrier => w.simple(s, ""),
        Op::While {
            cond,
            body,
            frontend_attributes,
        } => control::write_while(w, s, cond, body, frontend_attributes),
        Op::Case {
            branches,
            frontend_attributes,
        } => control::write_case(w, s, branches, frontend_attributes),
        // `validate` rejects scans: they are lowered to `while` before writing.
        Op::Scan { .. } | Op::Softmax { .. } => Err(fmt::Error),
        Op::AllGather { dim, axis } => collective::write_all_gather(w, s, *dim, axis),
        Op::ReduceScatter { dim, axis } => collective::write_reduce_scatter(w, s, *dim, axis),
        Op::AllReduce { axis } => collective::write_all_reduce(w, s, axis),
        Op::AllToAll {
            split_dim,
            concat_dim,
            axis,
        } => collective::write_all_to_all(w, s, *split_dim, *concat_dim, axis),
        Op::AxisIndex { axis } => collective::write_axis_index(w, s, axis),
    }
}
