//! The VJP rule of every op: given operands, results and result cotangents, the operand
//! cotangents (`None` where there is none: integer operands, zero derivatives).
//!
//! One module per op family (`crate::family` holds the same families' type rules and text);
//! this module dispatches to them.

mod collective;
mod control;
mod elementwise;
mod index;
mod linalg;
mod reduce;
mod shape;

use crate::builder::Tensor;
use crate::error::{Error, Result};
use crate::ir::Op;

pub(super) use control::scan_forward;

/// What a VJP rule gets for one node: operands, results and result cotangents.
pub(crate) struct Cotangents<'a> {
    /// The op's name, for errors.
    pub(crate) op: &'static str,
    /// Operands.
    pub(crate) x: &'a [Tensor],
    /// Results.
    pub(crate) y: &'a [Tensor],
    /// One cotangent per result, `None` where none reached it.
    pub(crate) g: &'a [Option<Tensor>],
}

impl Cotangents<'_> {
    /// The cotangent of a single-result op's result.
    pub(crate) fn g0(&self) -> Result<Tensor> {
        self.g[0]
            .clone()
            .ok_or_else(|| Error::invalid(self.op, "missing result cotangent"))
    }
}

/// Operand cotangents of one node, `None` where there is none (integer operands, zero
/// derivatives).
pub(crate) type Grads = Vec<Option<Tensor>>;

/// Operand cotangents of one node. `residuals` are what the forward replay saved for it
/// (a scan's per-step carries).
pub(super) fn vjp_rule(
    op: &Op,
    x: &[Tensor],
    y: &[Tensor],
    g: &[Option<Tensor>],
    residuals: Option<&[Tensor]>,
) -> Result<Grads> {
    let c = Cotangents {
        op: op.name(),
        x,
        y,
        g,
    };
    match op {
        // No operands, nothing to return.
        Op::Constant(_) | Op::Iota { .. } | Op::AxisIndex { .. } => Ok(Vec::new()),
        // Piecewise constant, or cut off on purpose.
        Op::Compare(_) | Op::StopGradient => Ok(vec![None; x.len()]),
        Op::Unary(u) => elementwise::vjp_unary(&c, *u),
        Op::Binary(b) => elementwise::vjp_binary(&c, *b),
        Op::Select => elementwise::vjp_select(&c),
        Op::Convert => elementwise::vjp_convert(&c),
        Op::BroadcastInDim { dims } => shape::vjp_broadcast_in_dim(&c, dims),
        Op::Reshape => shape::vjp_reshape(&c),
        Op::Transpose { perm } => shape::vjp_transpose(&c, perm),
        Op::Slice { start, stride, .. } => shape::vjp_slice(&c, start, stride),
        Op::DynamicSlice { .. } => shape::vjp_dynamic_slice(&c),
        Op::DynamicUpdateSlice => shape::vjp_dynamic_update_slice(&c),
        Op::Concatenate { dim } => shape::vjp_concatenate(&c, *dim),
        Op::Pad {
            low,
            high,
            interior,
        } => shape::vjp_pad(&c, low, high, interior),
        Op::Reduce { kind, axes } => reduce::vjp_reduce(&c, *kind, axes),
        Op::Cumsum { axis, reverse } => reduce::vjp_cumsum(&c, *axis, *reverse),
        Op::Softmax { axis } => reduce::vjp_softmax(&c, *axis),
        Op::DotGeneral {
            dims,
            lhs_cotangent,
        } => linalg::vjp_dot_general(&c, dims, *lhs_cotangent),
        Op::TriangularSolve(opts) => linalg::vjp_triangular_solve(&c, *opts),
        Op::Take { axis } => index::vjp_take(&c, *axis),
        Op::ScatterAdd { axis } => index::vjp_scatter_add(&c, *axis),
        Op::TopK { .. } => index::vjp_top_k(&c),
        Op::OptimizationBarrier => Ok(control::vjp_optimization_barrier(g)),
        Op::While { .. } => control::vjp_while(op),
        Op::Case { .. } => control::vjp_case(op),
        Op::Scan { .. } => control::vjp_scan(op, x, g, residuals.unwrap_or(&[])),
        Op::AllGather { dim, axis } => collective::vjp_all_gather(&c, *dim, axis),
        Op::ReduceScatter { dim, axis } => collective::vjp_reduce_scatter(&c, *dim, axis),
        Op::AllReduce { axis } => collective::vjp_all_reduce(&c, axis),
        Op::AllToAll {
            split_dim,
            concat_dim,
            axis,
        } => collective::vjp_all_to_all(&c, *split_dim, *concat_dim, axis),
    }
}
