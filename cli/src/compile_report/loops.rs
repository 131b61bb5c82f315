//! The loops of an optimized program, read for `compile-report`: every `while` reachable
//! from the entry, and every labelled `conditional` (a kept single step, written as a case,
//! `stackscan::fsdp` peeled steps), with its body's size and the bytes its copies write per
//! trip.

use std::collections::{BTreeMap, BTreeSet};

use stackscan_runtime::hlo::{HloComputation, HloInstruction, OptimizedModule};

use super::LoopBody;

/// Every `while` of the module reachable from the entry, with its body's size, biggest first.
pub(super) fn loops(module: &OptimizedModule) -> Vec<LoopBody> {
    let by_id: BTreeMap<i64, &HloComputation> =
        module.computations.iter().map(|c| (c.id, c)).collect();
    let fused = module.fused_computations();
    let mut out = Vec::new();
    if let Some(entry) = module.computations.iter().find(|c| c.name == module.entry) {
        walk(entry, "", 0, &by_id, &fused, &mut out);
    }
    out.sort_by(|a, b| {
        (b.instructions + b.fused)
            .cmp(&(a.instructions + a.fused))
            .then_with(|| a.path.cmp(&b.path))
    });
    out
}

/// Records each loop `c` (and the calls it makes) runs, and the loops in their bodies.
fn walk(
    c: &HloComputation,
    path: &str,
    depth: usize,
    by_id: &BTreeMap<i64, &HloComputation>,
    fused: &BTreeSet<i64>,
    out: &mut Vec<LoopBody>,
) {
    for i in &c.instructions {
        if is_loop(i) {
            let name = i
                .attribute(stackscan::fsdp::LOOP_LABEL)
                .map_or_else(|| i.name.clone(), str::to_owned);
            let here = if path.is_empty() {
                name
            } else {
                format!("{path} > {name}")
            };
            // A while calls its condition and its body, both run every trip; a kept step's
            // case, its branches (one runs; the other returns zeros).
            let (mut own, mut inside, mut copied) = (0, 0, 0);
            for body in bodies(i).filter_map(|id| by_id.get(&id)) {
                let (o, f) = size(body, by_id, fused);
                own += o;
                inside += f;
                copied += copied_bytes(body, by_id, fused);
                walk(body, &here, depth + 1, by_id, fused, out);
            }
            out.push(LoopBody {
                path: here,
                trips: if i.opcode == "while" {
                    i.known_trip_count()
                } else {
                    Some(1)
                },
                depth,
                instructions: own,
                fused: inside,
                copied_bytes: copied,
            });
        } else if i.opcode != "fusion" {
            for callee in i.called.iter().filter_map(|id| by_id.get(id)) {
                walk(callee, path, depth, by_id, fused, out);
            }
        }
    }
}

/// Instructions of `c` and of what it calls outside loops: `(outside fusions, inside them)`.
fn size(
    c: &HloComputation,
    by_id: &BTreeMap<i64, &HloComputation>,
    fused: &BTreeSet<i64>,
) -> (usize, usize) {
    let (mut own, mut inside) = (c.instructions.len(), 0);
    for i in &c.instructions {
        if is_loop(i) {
            continue;
        }
        for callee in i.called.iter().filter_map(|id| by_id.get(id)) {
            if fused.contains(&callee.id) {
                let (o, f) = size(callee, by_id, fused);
                inside += o + f;
            } else {
                let (o, f) = size(callee, by_id, fused);
                own += o;
                inside += f;
            }
        }
    }
    (own, inside)
}

/// Bytes the `copy` instructions of `c` write, and those of the computations it calls outside
/// fusions and loops.
fn copied_bytes(
    c: &HloComputation,
    by_id: &BTreeMap<i64, &HloComputation>,
    fused: &BTreeSet<i64>,
) -> u64 {
    c.instructions
        .iter()
        .map(|i| match i.opcode.as_str() {
            "copy" => i.shape.bytes(),
            _ if is_loop(i) => 0,
            "fusion" => 0,
            _ => i
                .called
                .iter()
                .filter_map(|id| by_id.get(id))
                .filter(|callee| !fused.contains(&callee.id))
                .map(|callee| copied_bytes(callee, by_id, fused))
                .sum(),
        })
        .sum()
}

/// Whether `i` is a loop of its own row: a `while`, or a `conditional` that stackscan
/// labelled (a single step kept as a unit).
pub(super) fn is_loop(i: &HloInstruction) -> bool {
    i.opcode == "while"
        || (i.opcode == "conditional" && i.attribute(stackscan::fsdp::LOOP_LABEL).is_some())
}

/// What of `i`'s called computations runs as its body: a while's condition and body; a kept
/// step's branch that runs (the last; the other returns zeros and never runs).
fn bodies(i: &HloInstruction) -> impl Iterator<Item = i64> + '_ {
    let skip = if i.opcode == "conditional" {
        i.called.len().saturating_sub(1)
    } else {
        0
    };
    i.called.iter().copied().skip(skip)
}
