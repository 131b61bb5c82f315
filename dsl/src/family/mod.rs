//! The op table's rules, one module per op family.
//!
//! Each family module holds, for its ops, the type rule (`infer_*`, run by `infer` before a
//! node enters a graph) and the StableHLO text (`write_*`, run by the writer over validated
//! IR); its VJPs (`vjp_*`) are the module of the same name under `autodiff::rules`, since they
//! build graphs and graph building runs these type rules. Adding or changing an op touches
//! its family, its VJP and one arm in each of the three dispatchers (`infer::infer`, the
//! writer's `node_text`, `autodiff::rules::vjp_rule`), whose `match`es are exhaustive over
//! [`Op`](crate::ir::Op).
//!
//! The families build on the leaf helpers below them ([`operands`], `emit::text`) and on
//! nothing that dispatches back into them.
//!
//! Names are those of [`Op::name`](crate::ir::Op::name); a family spells only the StableHLO
//! ops that have no `Op` of their own (`gather`, `sort`, `reduce_window`, …).

pub(crate) mod collective;
pub(crate) mod constant;
pub(crate) mod control;
pub(crate) mod elementwise;
pub(crate) mod index;
pub(crate) mod linalg;
pub(crate) mod operands;
pub(crate) mod reduce;
pub(crate) mod shape;
