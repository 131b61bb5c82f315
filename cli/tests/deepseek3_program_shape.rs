//! The DeepSeek-V3 training step's program shape with expert parallelism on (8 devices as
//! `fsdp × expert` = 2 × 4): its text is flat in depth (4 vs 48 MoE layers within 1 %), and
//! each ping-pong loop body over MoE layers gathers every weight once per layer step (expert
//! banks over `fsdp`, everything else over both axes) and exchanges the tokens with one
//! `all_to_all` pair over `expert` per layer step forward, plus the pair's VJP backward.
//! No plugin is needed: the checks read the lowered program.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan::fsdp::{TrainStep, train_step_on};
use stackscan::ir::{Function, Op};
use stackscan::layer_stack;
use stackscan::plan::PlanOptions;
use stackscan_models::deepseek3::{DeepSeek3Config, Dense, MoeLayer, model};
use stackscan_models::moe::{EXPERT_AXIS, FSDP_AXIS};

/// 3 dense, then MoE layers: the config's depth (7 and 51 here).
#[layer_stack(prefix = [Dense, Dense, Dense], block = [MoeLayer], layers = cfg.layers)]
#[derive(Debug)]
struct DenseThenMoe;

/// 3 dense, then 4 MoE layers.
const SHALLOW: usize = 7;
/// 3 dense, then 48 MoE layers.
const DEEP: usize = 51;

const DEVICES: usize = 8;
const EP: usize = 4;

fn config(layers: usize) -> DeepSeek3Config {
    DeepSeek3Config {
        layers,
        ..DeepSeek3Config::tiny()
    }
    .with_expert_parallel(DEVICES, EP)
    .unwrap()
}

fn step(layers: usize, options: PlanOptions) -> TrainStep {
    let c = config(layers);
    train_step_on(
        &model::<DenseThenMoe>(&c).unwrap(),
        options,
        &c.expert_mesh.mesh().unwrap(),
    )
    .unwrap()
}

/// Collectives directly in one loop body.
#[derive(Debug, Default, PartialEq, Eq)]
struct Body {
    trips: usize,
    /// All-gathers over `fsdp` only (expert banks).
    gathers_fsdp: usize,
    /// All-gathers over `fsdp,expert` (everything else).
    gathers_both: usize,
    scatters: usize,
    /// all_to_all over `expert`.
    exchanges: usize,
    /// Any other collective axis (must stay 0).
    other: usize,
}

fn loop_bodies(f: &Function, out: &mut Vec<Body>) {
    let both = format!("{FSDP_AXIS},{EXPERT_AXIS}");
    for node in &f.nodes {
        if let Op::Scan { body, length, .. } = &node.op {
            let mut b = Body {
                trips: *length,
                ..Body::default()
            };
            for n in &body.nodes {
                match &n.op {
                    Op::AllGather { axis, .. } if axis.name == FSDP_AXIS => b.gathers_fsdp += 1,
                    Op::AllGather { axis, .. } if axis.name == both => b.gathers_both += 1,
                    Op::ReduceScatter { axis, .. }
                        if axis.name == FSDP_AXIS || axis.name == both =>
                    {
                        b.scatters += 1
                    }
                    Op::AllToAll { axis, .. } if axis.name == EXPERT_AXIS => b.exchanges += 1,
                    Op::AllGather { .. } | Op::ReduceScatter { .. } | Op::AllToAll { .. } => {
                        b.other += 1
                    }
                    _ => {}
                }
            }
            out.push(b);
        }
        for r in node.op.regions() {
            loop_bodies(r, out);
        }
    }
}

const OPTIONS: [PlanOptions; 3] = [
    PlanOptions::baseline(),
    PlanOptions::prefetch(),
    PlanOptions::prefetch_deferred(),
];

#[test]
fn expert_parallel_program_text_is_flat_in_depth() {
    for options in OPTIONS {
        let small = step(SHALLOW, options).program.emit().unwrap();
        let large = step(DEEP, options).program.emit().unwrap();
        let ratio = large.len() as f64 / small.len() as f64;
        eprintln!(
            "{options:?}: {} bytes at 4 MoE layers, {} at 48 ({ratio:.5})",
            small.len(),
            large.len()
        );
        assert!(
            (ratio - 1.0).abs() <= 0.01,
            "{options:?}: {} bytes at 4 MoE layers, {} at 48 ({ratio:.4})",
            small.len(),
            large.len()
        );
        let count = |t: &str, op: &str| t.matches(&format!("\"stablehlo.{op}\"")).count();
        for op in ["all_gather", "reduce_scatter", "all_to_all"] {
            assert_eq!(
                count(&small, op),
                count(&large, op),
                "{options:?}: {op}s depend on depth"
            );
        }
        // The exchanges run over `expert` only: groups of 4 devices sharing an fsdp coordinate.
        assert!(
            large
                .contains("replica_groups = dense<[[0, 1, 2, 3], [4, 5, 6, 7]]> : tensor<2x4xi64>"),
            "{options:?}: no collective over `expert`"
        );
    }
}

#[test]
fn each_moe_loop_body_gathers_each_weight_once_and_exchanges_once_per_layer_step() {
    let m = model::<DenseThenMoe>(&config(DEEP)).unwrap();
    let moe = m.kinds.iter().find(|k| k.name == "M").unwrap();
    let sharded = moe.params.iter().filter(|p| p.shard_dim.is_some()).count();
    let banks = moe
        .params
        .iter()
        .filter(|p| p.gathered_over.is_some())
        .count();
    assert_eq!(banks, 3, "gate, up and down expert banks");
    for options in OPTIONS {
        let step = step(DEEP, options);
        let mut bodies = Vec::new();
        loop_bodies(step.program.main(), &mut bodies);
        // The loops over the MoE run, two layer steps a trip (without prefetch all 48 MoE
        // layers; with it M3 … M49, one step peeled, then 23 trips): the longest ones.
        let trips = bodies.iter().map(|b| b.trips).max().unwrap();
        assert!(trips >= 23, "{options:?}: {bodies:#?}");
        let ping_pong: Vec<&Body> = bodies.iter().filter(|b| b.trips == trips).collect();
        assert_eq!(ping_pong.len(), 2, "{options:?}: {bodies:#?}");
        for b in &ping_pong {
            assert_eq!(b.other, 0, "{options:?}: {b:?}");
            assert_eq!(b.gathers_fsdp, 2 * banks, "{options:?}: {b:?}");
            assert_eq!(b.gathers_both, 2 * (sharded - banks), "{options:?}: {b:?}");
        }
        let (forward, backward): (Vec<&Body>, Vec<&Body>) =
            ping_pong.iter().partition(|b| b.scatters == 0);
        let (forward, backward) = (forward[0], backward[0]);
        // Forward: dispatch and combine once per layer step.
        assert_eq!(forward.exchanges, 2 * 2, "{options:?}: {forward:?}");
        // Backward: the recomputed forward's pair and the pair's VJP (the inverse
        // all_to_alls) per layer step.
        assert_eq!(backward.exchanges, 2 * 4, "{options:?}: {backward:?}");
        // Each of the body's two layers' gradients is reduce-scattered once (over the axis
        // its weight was gathered over).
        assert_eq!(backward.scatters, 2 * sharded, "{options:?}: {backward:?}");
    }
}

/// `dlhs_transpose_rhs` in the whole expert-parallel training step: on, no expert bank
/// (`gate`, `up: [E / ep, d, f]`, `down: [E / ep, f, d]` as gathered over `fsdp`) is ever
/// transposed; off (the default), every MoE backward transposes each of the three banks once,
/// so the step holds such copies, three to a backward body.
#[test]
fn dlhs_transpose_rhs_removes_every_expert_bank_transpose_from_the_step() {
    let base = config(SHALLOW);
    let (e, d, f) = (base.e() / EP as i64, base.d, base.expert_width);
    let banks = [
        format!("(tensor<{e}x{d}x{f}xf32>) -> tensor<{e}x{f}x{d}xf32>"),
        format!("(tensor<{e}x{f}x{d}xf32>) -> tensor<{e}x{d}x{f}xf32>"),
    ];
    let copies = |dlhs_transpose_rhs: bool| {
        let c = DeepSeek3Config {
            dlhs_transpose_rhs,
            ..base
        };
        let step = train_step_on(
            &model::<DenseThenMoe>(&c).unwrap(),
            PlanOptions::prefetch_deferred(),
            &c.expert_mesh.mesh().unwrap(),
        )
        .unwrap();
        let text = step.program.emit().unwrap();
        banks.each_ref().map(|ty| {
            text.lines()
                .filter(|l| l.contains("\"stablehlo.transpose\"") && l.contains(ty.as_str()))
                .count()
        })
    };
    let [up_gate, down] = copies(false);
    println!("off: {up_gate} gate/up copies, {down} down copies");
    assert!(
        down >= 1 && up_gate == 2 * down,
        "off: {up_gate} gate/up and {down} down copies"
    );
    assert_eq!(copies(true), [0, 0], "on: an expert bank is transposed");
}
