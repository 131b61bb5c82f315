//! The Qwen3.5-style hybrid's lowered step has the plan's shape: every group of the plan is
//! one loop in the program, in the plan's order, the peeled GDN 2 and attention steps are
//! single-trip loops carrying the skip-simplify mark, each step loop gathers each weight of
//! the layer it fetches once, and the program is the same size at any depth from two blocks
//! on (where each pass already has its block loop, of one trip).

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan::Axis;
use stackscan::fsdp::{StackModel, train_step};
use stackscan::ir::{Function, Op};
use stackscan::layer_stack;
use stackscan::plan::{LoopForm, Pass, PlanOptions, Segment, Signature, WeightSource};
use stackscan_models::gdn_layer::GdnForm;
use stackscan_models::qwen35::{Attention, Gdn, Qwen35Config, model};

/// The hybrid block at the config's depth, without options of its own (each test gives them):
/// 2 blocks (8 layers), 4 (16: the first with a block loop of two trips in both passes) and
/// 12 (48).
#[layer_stack(block = [Gdn, Gdn, Gdn, Attention], layers = cfg.layers)]
#[derive(Debug)]
struct Hybrid;

const KEEP: &str = "skip-simplify-while-loops_trip-count-one";

fn config(layers: usize) -> Qwen35Config {
    let mut c = Qwen35Config::small(1, GdnForm::Chunked(4));
    c.layers = layers;
    c
}

fn axis(n: usize) -> Axis {
    Axis {
        name: "fsdp".into(),
        size: n,
    }
}

/// The loops of a program level (a function's own nodes), in program order.
fn loops(f: &Function) -> Vec<&stackscan::ir::Node> {
    f.nodes
        .iter()
        .filter(|n| matches!(n.op, Op::Scan { .. }))
        .collect()
}

/// Whether `f` runs the chunked delta rule: a loop over chunks, labelled as the GDN core
/// labels it, at any depth.
fn runs_gdn_chunks(f: &Function) -> bool {
    f.nodes.iter().any(|n| {
        let labelled = matches!(&n.op, Op::Scan { frontend_attributes, .. }
        if frontend_attributes.iter().any(|(k, v)| {
            k == stackscan::fsdp::LOOP_LABEL && v.starts_with("gdn chunks")
        }));
        labelled || n.op.regions().into_iter().any(runs_gdn_chunks)
    })
}

/// The full shapes of `kind`'s sharded weights, sorted: what one layer's gathers produce.
/// A weight sharded on another dimension than its first is gathered with that dimension
/// moved to the front (contiguous slabs), then laid out again.
fn gathered_shapes(m: &StackModel, kind: usize) -> Vec<Vec<i64>> {
    let mut v: Vec<Vec<i64>> = m.kinds[kind]
        .params
        .iter()
        .filter_map(|p| {
            let mut dims = p.full_type().dims.clone();
            let sharded = dims.remove(p.shard_dim?);
            dims.insert(0, sharded);
            Some(dims)
        })
        .collect();
    v.sort();
    v
}

/// What one step of `sig` gathers: its own layer's weights without prefetch, the next
/// layer's with it.
fn step_gathers(m: &StackModel, sig: &Signature) -> Vec<Vec<i64>> {
    let mut v = Vec::new();
    if sig.weights == WeightSource::GatheredAtUse {
        v.extend(gathered_shapes(m, sig.run));
    }
    if let Some(k) = sig.prefetch {
        v.extend(gathered_shapes(m, k));
    }
    v
}

/// One step loop as the plan describes it.
#[derive(Debug)]
struct Expected {
    trips: usize,
    steps_per_trip: usize,
    peeled: bool,
    sig: Signature,
}

/// The loops a group lowers to, in order.
fn group_loops(form: LoopForm, sig: Signature) -> Vec<Expected> {
    let one = |peeled| Expected {
        trips: 1,
        steps_per_trip: 1,
        peeled,
        sig,
    };
    match form {
        LoopForm::Peeled => vec![one(true)],
        LoopForm::Simple { trips } => vec![Expected {
            trips,
            steps_per_trip: 1,
            peeled: false,
            sig,
        }],
        LoopForm::PingPong { trips, peel_first } => {
            let mut v = Vec::new();
            if peel_first {
                v.push(one(false));
            }
            v.push(Expected {
                trips,
                steps_per_trip: 2,
                peeled: false,
                sig,
            });
            v
        }
        other => panic!("a loop form this test does not know: {other:?}"),
    }
}

/// Checks one step loop against the plan.
fn check_step_loop(m: &StackModel, node: &stackscan::ir::Node, e: &Expected, what: &str) {
    let Op::Scan {
        body,
        length,
        num_carry,
        frontend_attributes,
        ..
    } = &node.op
    else {
        unreachable!("filtered to scans");
    };
    assert_eq!(*length, e.trips, "{what}: trips");
    let kept = frontend_attributes
        .iter()
        .any(|(k, v)| k == KEEP && v == "true");
    assert_eq!(kept, *length == 1, "{what}: the skip-simplify mark");
    // A peeled step passes its kind-shaped state (if any) out as scanned outputs; a
    // counted loop has none.
    assert!(
        e.peeled || node.results.len() == *num_carry,
        "{what}: a counted loop with scanned outputs"
    );
    let name = &m.kinds[e.sig.run].name;
    // The body runs the planned kind: only the GDN layer runs the chunked delta rule.
    assert_eq!(
        runs_gdn_chunks(body),
        name == "GDN",
        "{what}: body runs {name}"
    );
    let mut gathered: Vec<Vec<i64>> = body
        .nodes
        .iter()
        .filter(|n| matches!(n.op, Op::AllGather { .. }))
        .map(|n| body.values[n.results[0]].dims.clone())
        .collect();
    gathered.sort();
    let mut want: Vec<Vec<i64>> = (0..e.steps_per_trip)
        .flat_map(|_| step_gathers(m, &e.sig))
        .collect();
    want.sort();
    assert_eq!(
        gathered, want,
        "{what}: one gather per weight per layer step"
    );
}

/// Walks a pass's segments against the loops of `level` from `at`; returns the next index
/// and the kinds of the peeled steps in order.
fn check_pass(
    m: &StackModel,
    pass: &Pass,
    level: &[&stackscan::ir::Node],
    mut at: usize,
    peeled: &mut Vec<String>,
) -> usize {
    for seg in &pass.segments {
        match seg {
            Segment::Group(g) => {
                for e in group_loops(g.form, g.signature) {
                    let what = format!("{:?} group {:?}", pass.direction, g.layers);
                    check_step_loop(m, level[at], &e, &what);
                    if e.peeled {
                        peeled.push(m.kinds[e.sig.run].name.clone());
                    }
                    at += 1;
                }
            }
            Segment::Blocks { trips, groups, .. } => {
                let Op::Scan { body, length, .. } = &level[at].op else {
                    unreachable!("filtered to scans");
                };
                assert_eq!(length, trips, "{:?} block loop", pass.direction);
                let inner = loops(body);
                let mut i = 0;
                for g in groups {
                    for e in group_loops(g.form, g.signature) {
                        let what = format!("{:?} block loop group {:?}", pass.direction, g.layers);
                        check_step_loop(m, inner[i], &e, &what);
                        if e.peeled {
                            peeled.push(m.kinds[e.sig.run].name.clone());
                        }
                        i += 1;
                    }
                }
                assert_eq!(i, inner.len(), "block loop holds only its groups' loops");
                at += 1;
            }
            other => panic!("a segment this test does not know: {other:?}"),
        }
    }
    at
}

/// Checks the lowered step of `S` on 4 devices under `options`; returns the peeled steps'
/// kinds, forward then backward.
fn check_stack(layers: usize, options: PlanOptions) -> Vec<String> {
    let m = model::<Hybrid>(&config(layers)).unwrap();
    let step = train_step(&m, options, &axis(4)).unwrap();
    let top = loops(step.program.main());
    let mut peeled = Vec::new();
    let at = check_pass(&m, &step.plan.forward, &top, 0, &mut peeled);
    let at = check_pass(&m, &step.plan.backward, &top, at, &mut peeled);
    assert_eq!(at, top.len(), "{options:?}: loops the plan does not have");
    peeled
}

#[test]
fn every_group_is_one_loop_and_the_peeled_steps_are_kept_single_trip_loops() {
    for options in [
        PlanOptions::baseline(),
        PlanOptions::prefetch(),
        PlanOptions::prefetch_deferred(),
    ] {
        for unroll in [1, 2] {
            let o = options.with_unroll(unroll);
            let peeled = check_stack(8, o);
            eprintln!("{o:?}: peeled steps {peeled:?}");
            if o.prefetch_fsdp_weights {
                // The seed's plan, per block: `[GDN 0, GDN 1] → [GDN 2] → [attention]`
                // forward with GDN 2 and the attention step peeled; backward the attention
                // step and GDN 2 first (with deferral GDN 1 and GDN 0 are peeled too: the
                // gradient each carries in is of another kind than the next one's).
                let forward = ["GDN", "attention", "GDN", "attention"];
                assert_eq!(peeled[..4], forward[..], "{o:?}: peeled steps {peeled:?}");
                let backward = ["attention", "GDN"];
                assert_eq!(peeled[4..6], backward[..], "{o:?}: peeled steps {peeled:?}");
            }
            check_stack(16, o);
            check_stack(48, o);
        }
    }
}

#[test]
fn program_size_is_flat_in_the_number_of_blocks() {
    let every = [
        PlanOptions::baseline(),
        PlanOptions::prefetch(),
        PlanOptions::prefetch_deferred(),
    ]
    .into_iter()
    .flat_map(|o| [o.with_unroll(1), o.with_unroll(2)]);
    for options in every {
        let text = |layers: usize| {
            let m = model::<Hybrid>(&config(layers)).unwrap();
            train_step(&m, options, &axis(4))
                .unwrap()
                .program
                .emit()
                .unwrap()
        };
        let (two, four, twelve) = (text(8), text(16), text(48));
        let ratio = |a: &str, b: &str| b.len() as f64 / a.len() as f64;
        eprintln!(
            "{options:?}: {} B at 2 blocks, {} at 4, {} at 12 (12/2 {:.4}, 12/4 {:.4})",
            two.len(),
            four.len(),
            twelve.len(),
            ratio(&two, &twelve),
            ratio(&four, &twelve)
        );
        for (blocks, text) in [(2, &two), (4, &four)] {
            assert!(
                (ratio(text, &twelve) - 1.0).abs() <= 0.01,
                "{options:?}: {blocks} blocks {} B, 12 blocks {} B",
                text.len(),
                twelve.len()
            );
        }
        let gathers = |t: &str| t.matches("\"stablehlo.all_gather\"").count();
        let scatters = |t: &str| t.matches("\"stablehlo.reduce_scatter\"").count();
        let loops = |t: &str| t.matches("stablehlo.while").count();
        for f in [gathers, scatters, loops] {
            assert_eq!(f(&two), f(&twelve), "{options:?}: 2 vs 12 blocks");
            assert_eq!(f(&four), f(&twelve), "{options:?}: 4 vs 12 blocks");
        }
    }
}
