//! The loops of an optimized program, read for `compile-report`: every `while` reachable
//! from the entry, with its body's size and the bytes its copies write per trip.

use std::collections::{BTreeMap, BTreeSet};

use stackscan_runtime::hlo::{HloComputation, OptimizedModule};

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
        let called = i.called.iter().filter_map(|id| by_id.get(id));
        if i.opcode == "while" {
            let name = i
                .attribute(stackscan::fsdp::LOOP_LABEL)
                .map_or_else(|| i.name.clone(), str::to_owned);
            let here = if path.is_empty() {
                name
            } else {
                format!("{path} > {name}")
            };
            // A while calls its condition and its body; both run every trip.
            let (mut own, mut inside, mut copied) = (0, 0, 0);
            for body in called {
                let (o, f) = size(body, by_id, fused);
                own += o;
                inside += f;
                copied += copied_bytes(body, by_id, fused);
                walk(body, &here, depth + 1, by_id, fused, out);
            }
            out.push(LoopBody {
                path: here,
                trips: i.known_trip_count(),
                depth,
                instructions: own,
                fused: inside,
                copied_bytes: copied,
            });
        } else if i.opcode != "fusion" {
            for callee in called {
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
        if i.opcode == "while" {
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
            "while" | "fusion" => 0,
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
