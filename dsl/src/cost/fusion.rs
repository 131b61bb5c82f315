//! HBM traffic after fusion: what a compiler such as XLA actually moves to and from memory,
//! rather than the unfused upper bound of every op reading and writing its own tensors.
//!
//! **The rule.** Ops are of four classes:
//! - *aliases* (`reshape`, `stop_gradient`, `optimization_barrier`) are bitcasts or markers:
//!   their result is their operand's buffer;
//! - *fusible* ops (elementwise unary/binary/compare/select/convert, broadcast, iota,
//!   constants, transpose, slice, dynamic_slice, pad, concatenate, axis_index) join every
//!   fusible producer they read into one fusion, so an elementwise chain never touches memory
//!   between its ops;
//! - *reductions* (`reduce`, `cumsum`, `top_k`) are fusion roots: the fusible chain feeding
//!   them is fused in (XLA's input fusion), but their results are always written out;
//! - *boundaries* (`dot_general`, `triangular_solve`, `take`, `scatter_add`,
//!   `dynamic_update_slice`, collectives, loops) run on their own.
//!
//! A value is *materialised* when it crosses a fusion boundary: it is a result of the function,
//! or something outside the fusion that produced it reads it. Each materialised value is
//! written once, by its producer, and read once by every fusion or boundary op that consumes
//! it; the function's parameters are read the same way and never written. A fusion that only
//! slices an input reads the slice, not the whole input; a gather reads its result's worth of
//! rows and its indices; an in-place update (`dynamic_update_slice`, `scatter_add`) reads and
//! writes its update's worth (twice for the scatter's read-modify-write). Collectives move
//! their bytes on their own lanes ([`Cost::collective`](super::Cost::collective)) and loops are
//! costed by their bodies, so neither adds traffic here beyond materialising its operands.
//!
//! Each fusion and each boundary op other than a loop or a collective is one kernel launch
//! ([`Cost::kernels`](super::Cost::kernels)): on a CPU, where each launch is a dispatch to a
//! thread pool, a fixed cost per kernel is a large part of a small layer's time.
//!
//! **The single-consumer rule** ([`Rule::SingleConsumer`]) is XLA's CPU compiler's, read from
//! its optimized HLO of the Adam update: a fusible producer joins its consumer's fusion only
//! when that consumer is its one reader (a value two fusions read is written once and read by
//! each, never recomputed), and a reduction fuses no producer (its input is written out and
//! read back: the CPU compiler rewrites large reductions into trees of `reduce-window`s that
//! take a materialised operand). Constants, `iota` and broadcasts are the exception under
//! both rules: every consumer recomputes them, reading what the broadcast reads. Fusions are
//! then trees, so none can reach itself through a boundary op.
//!
//! Traffic of matrix products (their operands and results) is kept apart, in
//! [`Cost::dot_bytes`](super::Cost::dot_bytes), so a hardware model can bound the products by
//! the larger of their FLOP time and their traffic time (a roofline) and the rest by theirs.

use std::collections::{HashMap, HashSet};

use crate::ir::{Function, Op, ValueId};

use super::count::PerDType;

/// How an op takes part in fusion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Alias,
    Fusible,
    Reduction,
    Boundary,
}

fn class(op: &Op) -> Class {
    match op {
        Op::Reshape | Op::StopGradient | Op::OptimizationBarrier => Class::Alias,
        Op::Constant(_)
        | Op::Iota { .. }
        | Op::Unary(_)
        | Op::Binary(_)
        | Op::Compare(_)
        | Op::Select
        | Op::Convert
        | Op::BroadcastInDim { .. }
        | Op::Transpose { .. }
        | Op::Slice { .. }
        | Op::DynamicSlice { .. }
        | Op::Pad { .. }
        | Op::Concatenate { .. }
        | Op::AxisIndex { .. } => Class::Fusible,
        // A softmax is expanded into its composite before the walk (`walk::of_with`); were it
        // not, its reductions would make it one.
        Op::Reduce { .. } | Op::Cumsum { .. } | Op::Softmax { .. } | Op::TopK { .. } => {
            Class::Reduction
        }
        Op::DotGeneral { .. }
        | Op::TriangularSolve(_)
        | Op::Take { .. }
        | Op::ScatterAdd { .. }
        | Op::DynamicUpdateSlice
        | Op::AllGather { .. }
        | Op::ReduceScatter { .. }
        | Op::AllReduce { .. }
        | Op::AllToAll { .. }
        | Op::While { .. }
        | Op::Case { .. }
        | Op::Scan { .. } => Class::Boundary,
    }
}

/// Which producers a fusion takes in; see the [module docs](self).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// Every fusible producer, whatever else reads it; reductions take their inputs' chains
    /// (XLA's accelerator compilers, with multi-output and input fusion).
    Shared,
    /// A fusible producer only when it has one reader, and none into a reduction (XLA's CPU
    /// compiler).
    SingleConsumer,
}

/// Ops every consumer recomputes rather than reads: they make their value from nothing or
/// from a smaller one.
fn duplicated(op: &Op) -> bool {
    matches!(
        op,
        Op::Constant(_) | Op::Iota { .. } | Op::BroadcastInDim { .. }
    )
}

/// What one level of `f` moves and launches after fusion (loop bodies are costed by the
/// caller).
pub(super) struct Fused {
    /// Traffic outside matrix products.
    pub other: PerDType,
    /// Traffic of matrix products.
    pub dots: PerDType,
    /// Kernels launched: one per fusion and one per boundary op other than a loop or a
    /// collective (a loop launches its body's, counted with the body).
    pub kernels: u64,
    /// The values written to memory (each a buffer, aliases seen through): what a memory
    /// estimate holds live ([`super::memory`]); a value fused into its consumer never is.
    pub materialised: HashSet<ValueId>,
}

/// Whether `op` only renames its operand's buffer (a bitcast or a marker).
pub(super) fn is_alias(op: &Op) -> bool {
    class(op) == Class::Alias
}

/// Fusion-aware traffic and kernel count of one level of `f` under `rule`. `live[i]` says
/// whether node `i` runs.
pub(super) fn traffic(f: &Function, live: &[bool], rule: Rule) -> Fused {
    let bytes = |v: ValueId| {
        f.values.get(v).map_or(PerDType::default(), |t| {
            PerDType::one(t.dtype, t.size_in_bytes() as u64)
        })
    };
    // Resolve aliases to the buffer they name.
    let mut alias: HashMap<ValueId, ValueId> = HashMap::new();
    let root = |alias: &HashMap<ValueId, ValueId>, v: ValueId| *alias.get(&v).unwrap_or(&v);
    // The node producing each (root) value.
    let mut producer: HashMap<ValueId, usize> = HashMap::new();
    let mut groups = UnionFind::new(f.nodes.len());
    let readers = readers(f, live);
    let single = rule == Rule::SingleConsumer;
    for (i, node) in f.nodes.iter().enumerate() {
        if !live[i] {
            continue;
        }
        let c = class(&node.op);
        match c {
            Class::Alias => {
                for (r, o) in node.results.iter().zip(&node.operands) {
                    let src = root(&alias, *o);
                    alias.insert(*r, src);
                }
                continue;
            }
            Class::Fusible | Class::Reduction => {
                for &o in &node.operands {
                    let o = root(&alias, o);
                    if let Some(&p) = producer.get(&o)
                        && class(&f.nodes[p].op) == Class::Fusible
                    {
                        let recomputed = duplicated(&f.nodes[p].op);
                        let joins = !single
                            || (!recomputed
                                && c == Class::Fusible
                                && readers.get(&o).copied().unwrap_or(0) == 1);
                        if joins {
                            groups.union(i, p);
                        }
                    }
                }
            }
            Class::Boundary => {}
        }
        for &r in &node.results {
            producer.insert(r, i);
        }
    }

    let mut other = PerDType::default();
    let mut dots = PerDType::default();
    let mut units = HashSet::new();
    // Reads: per consuming unit (a fusion or a boundary op), each distinct input once, at the
    // largest extent any of the unit's ops reads of it.
    let mut reads: HashMap<(usize, ValueId), (PerDType, bool)> = HashMap::new();
    // Values read outside the unit that produced them.
    let mut crossing: HashMap<ValueId, bool> = HashMap::new();
    for (i, node) in f.nodes.iter().enumerate() {
        if !live[i] {
            continue;
        }
        let c = class(&node.op);
        if c == Class::Alias || (single && duplicated(&node.op)) {
            // Under the single-consumer rule a recomputed op is no kernel of its own: each
            // consumer reads what it reads (below).
            continue;
        }
        let unit = if c == Class::Boundary {
            i
        } else {
            groups.find(i)
        };
        let launches = !matches!(
            node.op,
            Op::AllGather { .. }
                | Op::ReduceScatter { .. }
                | Op::AllReduce { .. }
                | Op::AllToAll { .. }
                | Op::While { .. }
                | Op::Case { .. }
                | Op::Scan { .. }
        );
        if launches {
            units.insert(unit);
        }
        // Under the single-consumer rule, a recomputed producer's operands are read in its
        // place.
        let mut operands: Vec<(usize, ValueId)> = Vec::new();
        let mut pending: Vec<(usize, ValueId)> = node
            .operands
            .iter()
            .enumerate()
            .map(|(k, &o)| (k, root(&alias, o)))
            .collect();
        while let Some((k, o)) = pending.pop() {
            match producer.get(&o) {
                // Recomputed all the way down: a broadcast of a constant reads nothing.
                Some(&p) if single && duplicated(&f.nodes[p].op) => pending.extend(
                    f.nodes[p]
                        .operands
                        .iter()
                        .map(|&q| (usize::MAX, root(&alias, q))),
                ),
                _ => operands.push((k, o)),
            }
        }
        for (k, o) in operands {
            // Only a fusible producer shares its fusion: a reduction's result is always
            // written out, even when a consumer is fused with the reduction's own inputs.
            let same_unit = c != Class::Boundary
                && producer.get(&o).is_some_and(|&p| {
                    class(&f.nodes[p].op) == Class::Fusible && groups.find(p) == unit
                });
            if same_unit {
                continue;
            }
            crossing.insert(o, true);
            let extent = match &node.op {
                Op::Slice { .. } | Op::DynamicSlice { .. } if k == 0 => node
                    .results
                    .first()
                    .map_or(PerDType::default(), |&r| bytes(r)),
                Op::Take { .. } if k == 0 => node
                    .results
                    .first()
                    .map_or(PerDType::default(), |&r| bytes(r)),
                Op::DynamicUpdateSlice if k == 0 => PerDType::default(),
                Op::ScatterAdd { .. } if k == 0 => {
                    // Read-modify-write of the updated rows: counted with the updates below.
                    PerDType::default()
                }
                // The updates, and the rows they are added to.
                Op::ScatterAdd { .. } if k == 2 => bytes(o) + bytes(o),
                Op::AllGather { .. }
                | Op::ReduceScatter { .. }
                | Op::AllReduce { .. }
                | Op::AllToAll { .. }
                | Op::While { .. }
                | Op::Case { .. }
                | Op::Scan { .. } => PerDType::default(),
                _ => bytes(o),
            };
            let is_dot = matches!(node.op, Op::DotGeneral { .. } | Op::TriangularSolve(_));
            let e = reads
                .entry((unit, o))
                .or_insert((PerDType::default(), is_dot));
            if extent.total() > e.0.total() {
                e.0 = extent;
            }
        }
    }
    for &(ref extent, is_dot) in reads.values() {
        if is_dot {
            dots += *extent;
        } else {
            other += *extent;
        }
    }
    // Writes: every materialised value its producer writes once.
    let results: Vec<ValueId> = f.results.iter().map(|&r| root(&alias, r)).collect();
    let mut materialised = HashSet::new();
    for (&v, &p) in &producer {
        if !(crossing.contains_key(&v) || results.contains(&v)) {
            continue;
        }
        materialised.insert(v);
        let node = &f.nodes[p];
        let written = match &node.op {
            Op::DynamicUpdateSlice => node
                .operands
                .get(1)
                .map_or(PerDType::default(), |&u| bytes(u)),
            Op::ScatterAdd { .. } => node
                .operands
                .get(2)
                .map_or(PerDType::default(), |&u| bytes(u)),
            Op::AllGather { .. }
            | Op::ReduceScatter { .. }
            | Op::AllReduce { .. }
            | Op::AllToAll { .. }
            | Op::While { .. }
            | Op::Case { .. }
            | Op::Scan { .. } => PerDType::default(),
            _ => bytes(v),
        };
        if matches!(node.op, Op::DotGeneral { .. } | Op::TriangularSolve(_)) {
            dots += written;
        } else {
            other += written;
        }
    }
    Fused {
        other,
        dots,
        kernels: units.len() as u64,
        materialised,
    }
}

/// How many live nodes (aliases seen through) read each value, a function result counting as
/// one more reader.
fn readers(f: &Function, live: &[bool]) -> HashMap<ValueId, usize> {
    let mut alias: HashMap<ValueId, ValueId> = HashMap::new();
    let mut count: HashMap<ValueId, usize> = HashMap::new();
    for (i, node) in f.nodes.iter().enumerate() {
        if !live[i] {
            continue;
        }
        let root = |alias: &HashMap<ValueId, ValueId>, v: ValueId| *alias.get(&v).unwrap_or(&v);
        if class(&node.op) == Class::Alias {
            for (r, o) in node.results.iter().zip(&node.operands) {
                let src = root(&alias, *o);
                alias.insert(*r, src);
            }
            continue;
        }
        let mut seen: Vec<ValueId> = node.operands.iter().map(|&o| root(&alias, o)).collect();
        seen.sort_unstable();
        seen.dedup();
        for o in seen {
            *count.entry(o).or_default() += 1;
        }
    }
    for &r in &f.results {
        *count.entry(*alias.get(&r).unwrap_or(&r)).or_default() += 1;
    }
    count
}

/// Disjoint sets of node indices, with path halving.
struct UnionFind(Vec<usize>);

impl UnionFind {
    fn new(n: usize) -> Self {
        UnionFind((0..n).collect())
    }

    fn find(&mut self, mut i: usize) -> usize {
        while self.0[i] != i {
            self.0[i] = self.0[self.0[i]];
            i = self.0[i];
        }
        i
    }

    fn union(&mut self, a: usize, b: usize) {
        let (a, b) = (self.find(a), self.find(b));
        if a != b {
            self.0[a.max(b)] = a.min(b);
        }
    }
}
