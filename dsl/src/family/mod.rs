//! The op table's rules, one module per op family.
//!
//! Each family module holds, for its ops, the type rule (`infer_*`, run by `infer` before a
//! node enters a graph), the StableHLO text (`write_*`, run by the writer over validated IR)
//! and the VJP (`vjp_*`, run by autodiff), so adding or changing an op touches its family
//! and one arm in each of the three dispatchers (`infer::infer`, the writer's `write_node`,
//! `autodiff::rules::vjp_rule`), whose `match`es are exhaustive over [`Op`](crate::ir::Op).
//!
//! Names are those of [`Op::name`](crate::ir::Op::name); a family spells only the StableHLO
//! ops that have no `Op` of their own (`gather`, `sort`, `reduce_window`, …).

pub(crate) mod collective;
pub(crate) mod constant;
pub(crate) mod control;
pub(crate) mod elementwise;
pub(crate) mod index;
pub(crate) mod linalg;
pub(crate) mod reduce;
pub(crate) mod shape;

use crate::builder::Tensor;
use crate::error::{Error, Result};

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
