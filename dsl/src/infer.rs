//! Shape and element-type rules of every op: the check that runs before a node enters a graph.
//!
//! Each rule returns the result types or an [`Error`] naming the op and the offending types, so
//! a mistake in model code is reported where it is made, never by XLA at compile time. The
//! rules live with their op family (`crate::family`); this module dispatches to them and holds
//! the checks they share.

use crate::dtype::DType;
use crate::error::Result;
use crate::family::operands::Operands;
use crate::family::{collective, constant, control, elementwise, index, linalg, reduce, shape};
use crate::ir::{Literal, Op};
use crate::types::TensorType;

/// Result types of `op` applied to operands of types `args`. Ops whose result type is not a
/// function of their operands (constant, iota, convert, reshape) take it as `target`.
pub(crate) fn infer(
    op: &Op,
    args: &[TensorType],
    target: Option<&TensorType>,
) -> Result<Vec<TensorType>> {
    let a = Operands::new(op.name(), args, target);
    match op {
        Op::Constant(lit) => constant::infer_constant(&a, lit),
        Op::Iota { dim } => constant::infer_iota(&a, *dim),
        Op::Unary(_) => elementwise::infer_unary(&a),
        Op::Binary(_) => elementwise::infer_binary(&a),
        Op::Compare(_) => elementwise::infer_compare(&a),
        Op::Select => elementwise::infer_select(&a),
        Op::Convert => elementwise::infer_convert(&a),
        Op::StopGradient => elementwise::infer_stop_gradient(&a),
        Op::BroadcastInDim { dims } => shape::infer_broadcast_in_dim(&a, dims),
        Op::Reshape => shape::infer_reshape(&a),
        Op::Transpose { perm } => shape::infer_transpose(&a, perm),
        Op::Slice {
            start,
            limit,
            stride,
        } => shape::infer_slice(&a, start, limit, stride),
        Op::DynamicSlice { sizes } => shape::infer_dynamic_slice(&a, sizes),
        Op::DynamicUpdateSlice => shape::infer_dynamic_update_slice(&a),
        Op::Concatenate { dim } => shape::infer_concatenate(&a, *dim),
        Op::Pad {
            low,
            high,
            interior,
        } => shape::infer_pad(&a, low, high, interior),
        Op::Reduce { kind, axes } => reduce::infer_reduce(&a, *kind, axes),
        Op::Cumsum { axis, .. } | Op::Softmax { axis } => reduce::infer_cumsum(&a, *axis),
        Op::DotGeneral { dims: d, .. } => linalg::infer_dot_general(&a, d),
        Op::TriangularSolve(opts) => linalg::infer_triangular_solve(&a, opts),
        Op::Take { axis } => index::infer_take(&a, *axis),
        Op::ScatterAdd { axis } => index::infer_scatter_add(&a, *axis),
        Op::TopK { k } => index::infer_top_k(&a, *k),
        Op::OptimizationBarrier => Ok(control::infer_optimization_barrier(&a)),
        Op::While { cond, body, .. } => control::infer_while(&a, cond, body),
        Op::Case { branches, .. } => control::infer_case(&a, branches),
        Op::Scan {
            body,
            length,
            num_carry,
            num_xs,
            ..
        } => control::infer_scan(&a, body, *length, *num_carry, *num_xs),
        Op::AllGather { dim, axis } => collective::infer_all_gather(&a, *dim, axis),
        Op::ReduceScatter { dim, axis } => collective::infer_reduce_scatter(&a, *dim, axis),
        Op::AllReduce { .. } => collective::infer_all_reduce(&a),
        Op::AllToAll {
            split_dim,
            concat_dim,
            axis,
        } => collective::infer_all_to_all(&a, *split_dim, *concat_dim, axis),
        Op::AxisIndex { .. } => collective::infer_axis_index(&a),
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
