//! What a function costs to run, counted from the graph we emit rather than from hand-written
//! per-layer formulas, so the figures follow the program when the program changes.
//!
//! [`of`] walks a [`Function`](crate::ir::Function)'s nodes and adds up a [`Cost`]: FLOPs of
//! matrix products, FLOPs of elementwise and reduction ops, bytes read and written by
//! memory-bound ops, and bytes each kind of collective moves per device, all kept per element
//! type because a hardware profile's peak and bandwidth depend on it.
//!
//! Conventions (each chosen so a simulator can divide by one hardware figure):
//! - **dot_general**: `2·B·M·N·K` FLOPs (one multiply and one add per term), where
//!   `B·M·K` is the left operand's element count and `N` the product of the right operand's
//!   dimensions that are neither batch nor contracting. `triangular_solve` of `A: [.., n, n]`
//!   and `B` counts `n` FLOPs per element of `B` (`n²` per right-hand side of length `n`).
//!   Both go to [`Cost::matrix_flops`], keyed by the left operand's element type.
//! - **Elementwise** ops (unary, binary, compare, select, convert): one FLOP per result
//!   element. **Reductions** (`reduce`, `cumsum`): one per *input* element. `scatter_add`: one
//!   per update element; `top_k`: one comparison per input element. Kept in
//!   [`Cost::vector_flops`], keyed by the result's element type (an operand's for `compare`,
//!   whose result is always `bool`).
//! - **Memory traffic**: every op other than a matrix product, a collective or a loop reads
//!   all its operands and writes all its results once ([`Cost::bytes_read`],
//!   [`Cost::bytes_written`]). This is the unfused upper bound: XLA fuses elementwise chains,
//!   so real traffic is lower; [`Cost::hbm_bytes`] and [`Cost::dot_bytes`] are the traffic
//!   after fusion, by the rule in [`fusion`]. `reshape`, `stop_gradient` and `optimization_barrier` move
//!   nothing (a bitcast or a marker) and cost nothing. Matrix products are left out so that
//!   `matrix FLOPs / peak + bytes / bandwidth` does not count their operands twice.
//! - **Collectives**: bytes each device sends (equal to what it receives) with the ring
//!   algorithms, for an axis of `n` devices ([`Cost::collective`]):
//!   all_gather of a shard of `s` bytes: `(n−1)·s`; reduce_scatter of `S` bytes: `(n−1)·S/n`;
//!   all_reduce of `S` bytes: `2·(n−1)·S/n` (a reduce_scatter then an all_gather, rounded
//!   down); all_to_all of `S` bytes: `(n−1)·S/n` (one piece of `S/n` to each other device).
//! - **Dead code**: nodes no result depends on are not counted, as XLA removes them.
//! - **Loops**: a scan costs its body times its length. A `while`'s trip count is not in the
//!   graph, so its body is left out and [`Cost::unknown_trip_loops`] counts it: a nonzero
//!   count says the total is a lower bound. The one exception is a loop marked
//!   `skip-simplify-while-loops_trip-count-one`, which runs its body once and its condition
//!   twice. Costs are of the function as built; the scan lowering that emission applies later
//!   turns scans into whiles and is not what should be costed.
//!
//! ```
//! use stackscan::{DType, Scope, TensorType, cost};
//!
//! let f = Scope::new("main");
//! let x = f.param(TensorType::new(DType::BF16, [2, 3]));
//! let w = f.param(TensorType::new(DType::BF16, [3, 4]));
//! let y = x.matmul(&w)?;
//! let c = cost::of(&f.finish(&[y])?)?;
//! // 2·M·K·N = 2·2·3·4
//! assert_eq!(c.matrix_flops.get(DType::BF16), 48);
//! assert_eq!((c * 10).flops(), 480);
//! # Ok::<(), stackscan::Error>(())
//! ```

mod count;
pub mod exchange;
pub mod fusion;
mod layers;
mod memory;
mod walk;

pub use count::{Collective, Cost, PerDType, SIDE_BUCKETS, side_bucket};
pub use exchange::{Exchange, ExpertParallel, token_exchange};
pub use layers::{LayerCost, layer_costs};
pub use memory::{MemoryEstimate, memory_estimate, working_set};
pub use walk::{Accounting, ActiveExperts, of, of_with};

#[cfg(test)]
mod fusion_tests;
#[cfg(test)]
mod layer_tests;
#[cfg(test)]
mod memory_tests;
#[cfg(test)]
mod tests;
