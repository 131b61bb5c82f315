//! What the compiler's schedule does with the collectives: which run asynchronously (a
//! start and a done with other work between them), and how many matrix products each one
//! spans. On an accelerator this is the overlap a prefetch is for: a gather whose start and
//! done enclose a layer's products runs while they compute.

use std::collections::{BTreeMap, BTreeSet};

use super::{HloComputation, HloInstruction, OptimizedModule};

/// The collectives whose kind the analysis names (XLA opcodes).
const COLLECTIVES: [&str; 5] = [
    "all-gather",
    "reduce-scatter",
    "all-reduce",
    "all-to-all",
    "collective-permute",
];

/// One collective of a computation, in the order the schedule runs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduledCollective {
    /// Its kind (`all-gather`, `reduce-scatter`, …).
    pub kind: String,
    /// The name of its start (asynchronous) or of the instruction itself.
    pub name: String,
    /// Whether it is split into a start and a done.
    pub asynchronous: bool,
    /// Position of its start in the computation's schedule.
    pub start: usize,
    /// Position of its done (the start's, when synchronous).
    pub done: usize,
    /// Matrix products (a `dot` or `convolution`, or a fusion holding one, and those of the
    /// loops and calls) scheduled between its start and its done: the compute it overlaps.
    pub spanned_products: usize,
    /// Compute instructions scheduled between its start and its done (fusions, products,
    /// elementwise and reduction ops, loops; not the bookkeeping of tuples, bitcasts,
    /// parameters, constants, copies and other collectives' starts and dones): all the work
    /// it overlaps, of which the products are the largest part in a transformer layer.
    pub spanned_compute: usize,
    /// Frontend attributes of the collective (the start's), as the compiler kept them.
    pub frontend_attributes: Vec<(String, String)>,
    /// For an all-reduce the compiler built from another collective, that collective
    /// (`all-gather`, `reduce-scatter`): see [`stands_for`]. `None` for any other.
    pub stands_for: Option<String>,
}

impl ScheduledCollective {
    /// The collective whose work it does: its own kind, or the one it stands for.
    pub fn role(&self) -> &str {
        self.stands_for.as_deref().unwrap_or(&self.kind)
    }
}

/// A computation's schedule, reduced to its products and collectives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ComputationSchedule {
    /// Matrix products in the computation, in schedule order (positions).
    pub products: Vec<usize>,
    /// Loops and calls that run products, in schedule order: `(position, products a run of
    /// their computations holds)` (one trip of a loop).
    pub nested: Vec<(usize, usize)>,
    /// Its collectives, by start position.
    pub collectives: Vec<ScheduledCollective>,
}

impl OptimizedModule {
    /// The products and collectives of `computation` in the order its schedule runs them
    /// (the module's order where it has no schedule).
    pub fn schedule_of(&self, computation: &HloComputation) -> ComputationSchedule {
        let by_id: BTreeMap<i64, &HloComputation> =
            self.computations.iter().map(|c| (c.id, c)).collect();
        let order = computation.in_order();
        let position: BTreeMap<i64, usize> =
            order.iter().enumerate().map(|(n, i)| (i.id, n)).collect();
        let by_instruction: BTreeMap<i64, &HloInstruction> =
            order.iter().map(|i| (i.id, *i)).collect();
        let products: Vec<usize> = order
            .iter()
            .enumerate()
            .filter(|(_, i)| holds_product(i, &by_id, &mut BTreeSet::new()))
            .map(|(n, _)| n)
            .collect();
        let nested: Vec<(usize, usize)> = order
            .iter()
            .enumerate()
            .filter(|(_, i)| i.opcode != "fusion" && !i.opcode.ends_with("-start"))
            .map(|(n, i)| (n, nested_products(i, &by_id, 0)))
            .filter(|&(_, count)| count > 0)
            .collect();
        let mut collectives = Vec::new();
        for (n, i) in order.iter().enumerate() {
            let (kind, asynchronous) = match collective_kind(i, &by_id) {
                Some(k) => k,
                None => continue,
            };
            let done = if asynchronous {
                match done_of(i, &order, &by_instruction) {
                    Some(d) => position[&d],
                    None => continue,
                }
            } else {
                n
            };
            let spanned_compute = order[n + 1..done.max(n + 1)]
                .iter()
                .filter(|i| is_compute(i))
                .count();
            let spanned_products = products.iter().filter(|&&p| p > n && p < done).count()
                + nested
                    .iter()
                    .filter(|&&(p, _)| p > n && p < done)
                    .map(|&(_, count)| count)
                    .sum::<usize>();
            let done_id = order[done].id;
            let stands_for = (kind == "all-reduce")
                .then(|| stands_for(i, done_id, &order, &by_id))
                .flatten();
            collectives.push(ScheduledCollective {
                kind,
                stands_for,
                name: i.name.clone(),
                asynchronous,
                start: n,
                done,
                spanned_products,
                spanned_compute,
                frontend_attributes: i.frontend_attributes.clone(),
            });
        }
        ComputationSchedule {
            products,
            nested,
            collectives,
        }
    }
}

/// The collective `i` starts or is, and whether it is a start (asynchronous): an
/// `all-gather-start`-style opcode, an `async-start` whose computation holds a collective,
/// or a plain collective. `None` for anything else, and for dones and updates.
fn collective_kind(
    i: &HloInstruction,
    by_id: &BTreeMap<i64, &HloComputation>,
) -> Option<(String, bool)> {
    if let Some(kind) = i.opcode.strip_suffix("-start")
        && COLLECTIVES.contains(&kind)
    {
        return Some((kind.to_owned(), true));
    }
    if COLLECTIVES.contains(&i.opcode.as_str()) {
        return Some((i.opcode.clone(), false));
    }
    if i.opcode == "async-start" {
        return wrapped_collective(i, by_id, 0).map(|kind| (kind, true));
    }
    None
}

/// The collective an `async-start` runs: in the computation it calls, or in one that calls
/// (libtpu wraps a collective in a call inside the async computation).
fn wrapped_collective(
    i: &HloInstruction,
    by_id: &BTreeMap<i64, &HloComputation>,
    depth: usize,
) -> Option<String> {
    if depth > 4 {
        return None;
    }
    for c in i.called.iter().filter_map(|id| by_id.get(id)) {
        for w in &c.instructions {
            if let Some(kind) = w
                .opcode
                .strip_suffix("-start")
                .filter(|k| COLLECTIVES.contains(k))
            {
                return Some(kind.to_owned());
            }
            if COLLECTIVES.contains(&w.opcode.as_str()) {
                return Some(w.opcode.clone());
            }
            if let Some(kind) = wrapped_collective(w, by_id, depth + 1) {
                return Some(kind);
            }
        }
    }
    None
}

/// The collective an all-reduce does the work of, where the compiler built it from another:
/// TPU compilers turn an all-gather into an all-reduce of each device's shard written into
/// zeros, and a reduce-scatter into an all-reduce each device then slices its part of. Read,
/// in this order, from
/// - its operands: one written by a `dynamic-update-slice` (or a fusion holding one) makes
///   it a gather (an all-reduce the compiler combined from several keeps the gathers' shards
///   among its operands);
/// - the name of the op it was made from ([`HloInstruction::op_name`]), where the compiler
///   kept one: `…/all-gather.16`, `…/reduce-scatter.3`;
/// - what reads its result (through tuple elements): only `dynamic-slice`s (or fusions
///   holding one) make it a scatter.
///
/// `None` for an all-reduce that is one (a loss's, a replicated weight's gradient).
/// `start` is the all-reduce or its start, `done` its done (itself when synchronous).
fn stands_for(
    start: &HloInstruction,
    done: i64,
    order: &[&HloInstruction],
    by_id: &BTreeMap<i64, &HloComputation>,
) -> Option<String> {
    let by_instruction: BTreeMap<i64, &HloInstruction> = order.iter().map(|i| (i.id, *i)).collect();
    let holds = |i: &HloInstruction, opcode: &str| {
        i.opcode == opcode
            || (i.opcode == "fusion"
                && i.called
                    .iter()
                    .filter_map(|id| by_id.get(id))
                    .any(|c| c.instructions.iter().any(|inner| inner.opcode == opcode)))
    };
    if start
        .operands
        .iter()
        .filter_map(|id| by_instruction.get(id))
        .any(|o| holds(o, "dynamic-update-slice"))
    {
        return Some("all-gather".to_owned());
    }
    let made_from = start.op_name.rsplit('/').next().unwrap_or("");
    for kind in ["all-gather", "reduce-scatter"] {
        if made_from.starts_with(kind) {
            return Some(kind.to_owned());
        }
    }
    let users = |id: i64| -> Vec<&HloInstruction> {
        order
            .iter()
            .filter(|i| i.operands.contains(&id))
            .copied()
            .collect()
    };
    let readers: Vec<&HloInstruction> = users(done)
        .into_iter()
        .flat_map(|u| {
            if u.opcode == "get-tuple-element" {
                users(u.id)
            } else {
                vec![u]
            }
        })
        .collect();
    (!readers.is_empty() && readers.iter().all(|r| holds(r, "dynamic-slice")))
        .then(|| "reduce-scatter".to_owned())
}

/// The done that ends the asynchronous `start`: the instruction of `order` whose first operand
/// leads back to it through `async-update`s.
fn done_of(
    start: &HloInstruction,
    order: &[&HloInstruction],
    by_instruction: &BTreeMap<i64, &HloInstruction>,
) -> Option<i64> {
    order
        .iter()
        .filter(|i| i.opcode.ends_with("-done"))
        .find(|done| {
            let mut at = done.operands.first().copied();
            while let Some(id) = at {
                if id == start.id {
                    return true;
                }
                at = by_instruction
                    .get(&id)
                    .filter(|i| i.opcode.ends_with("-update"))
                    .and_then(|i| i.operands.first().copied());
            }
            false
        })
        .map(|done| done.id)
}

/// Whether `i` computes: not the bookkeeping a schedule also lists (tuples and their
/// elements, bitcasts, parameters, constants, the halves of asynchronous operations).
fn is_compute(i: &HloInstruction) -> bool {
    !matches!(
        i.opcode.as_str(),
        "tuple"
            | "get-tuple-element"
            | "bitcast"
            | "parameter"
            | "constant"
            | "copy-start"
            | "copy-done"
            | "opt-barrier"
            | "after-all"
    ) && !i.opcode.ends_with("-start")
        && !i.opcode.ends_with("-done")
        && !i.opcode.ends_with("-update")
        && !COLLECTIVES.contains(&i.opcode.as_str())
}

/// The products one run of the computations `i` calls holds (a loop's body and condition,
/// a call's callee), nested loops and calls included; 0 for a fusion or a product itself.
fn nested_products(
    i: &HloInstruction,
    by_id: &BTreeMap<i64, &HloComputation>,
    depth: usize,
) -> usize {
    if depth > 16 || matches!(i.opcode.as_str(), "fusion" | "dot" | "convolution") {
        return 0;
    }
    i.called
        .iter()
        .filter_map(|id| by_id.get(id))
        .flat_map(|c| &c.instructions)
        .map(|inner| {
            if holds_product(inner, by_id, &mut BTreeSet::new()) {
                1
            } else {
                nested_products(inner, by_id, depth + 1)
            }
        })
        .sum()
}

/// Whether `i` is a matrix product or calls a computation (a fusion's) that holds one.
fn holds_product(
    i: &HloInstruction,
    by_id: &BTreeMap<i64, &HloComputation>,
    seen: &mut BTreeSet<i64>,
) -> bool {
    if matches!(i.opcode.as_str(), "dot" | "convolution") {
        return true;
    }
    if i.opcode != "fusion" {
        return false;
    }
    i.called.iter().any(|id| {
        seen.insert(*id)
            && by_id.get(id).is_some_and(|c| {
                c.instructions
                    .iter()
                    .any(|inner| holds_product(inner, by_id, seen))
            })
    })
}
