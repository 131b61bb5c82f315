//! Scheduling tags (issue 15, item 3): every step of the lowered program is one contiguous
//! `_scheduling_group_id` group, prefetch gathers carry `xla_explicit_fsdp`, the option turns
//! both off, and the tags change no result on either CPU plugin (the newer one knows the
//! scheduling-group attribute).
//!
//! The model is the inhomogeneous toy block `[A, A, A, B] × 2`: block loops, ping-pong and
//! peeled groups, and two weight shapes, on 4 devices.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use std::collections::{BTreeMap, BTreeSet};

use stackscan_runtime::testing as common;

use common::fsdp::{Fixture, assert_close, fixture, run_step};
use common::graph::Arg;
use stackscan::fsdp::{EXPLICIT_FSDP, SCHEDULING_GROUP, StackModel, train_step};
use stackscan::ir::{Function, Op, ValueId};
use stackscan::plan::{PlanOptions, PrefetchIssue};
use stackscan::{Axis, DType, Scope, TensorType};
use stackscan_models::toy::{self, ToyConfig};
use stackscan_runtime::{Client, ClientOptions};

const DEVICES: usize = 4;
const D: i64 = 8;
const B: i64 = 2;

fn model() -> StackModel {
    toy::hand_built(&ToyConfig::small(), 2).unwrap()
}

fn axis() -> Axis {
    Axis {
        name: "fsdp".into(),
        size: DEVICES,
    }
}

fn attribute<'a>(f: &'a Function, node: usize, key: &str) -> Option<&'a str> {
    f.nodes[node]
        .attributes
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// Every function of the program: `f` and, depth first, the bodies of its loops.
fn functions(f: &Function) -> Vec<&Function> {
    let mut all = vec![f];
    for n in &f.nodes {
        for r in n.op.regions() {
            all.extend(functions(r));
        }
    }
    all
}

/// XLA's rule for one function: walking from a group's ops through ops outside the group
/// must never reach an op of the same group (`LegalizeSchedulingAnnotations`' "annotation
/// groups with gaps"). Returns the offending `(group, node)` if any.
fn first_gap(f: &Function) -> Option<(String, usize)> {
    let mut producer: BTreeMap<ValueId, usize> = BTreeMap::new();
    for (i, n) in f.nodes.iter().enumerate() {
        for &r in &n.results {
            producer.insert(r, i);
        }
    }
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); f.nodes.len()];
    for (i, n) in f.nodes.iter().enumerate() {
        for v in &n.operands {
            if let Some(&p) = producer.get(v) {
                users[p].push(i);
            }
        }
    }
    let group = |i: usize| attribute(f, i, SCHEDULING_GROUP);
    let ids: BTreeSet<&str> = (0..f.nodes.len()).filter_map(group).collect();
    for id in ids {
        let members: Vec<usize> = (0..f.nodes.len())
            .filter(|&i| group(i) == Some(id))
            .collect();
        // The ops outside the group that members feed, and everything downstream of them.
        let mut stack: Vec<usize> = members
            .iter()
            .flat_map(|&m| users[m].iter().copied())
            .filter(|&u| group(u) != Some(id))
            .collect();
        let mut seen: BTreeSet<usize> = stack.iter().copied().collect();
        while let Some(i) = stack.pop() {
            for &u in &users[i] {
                if group(u) == Some(id) {
                    return Some((id.to_owned(), u));
                }
                if seen.insert(u) {
                    stack.push(u);
                }
            }
        }
    }
    None
}

#[test]
fn every_step_is_one_contiguous_group_and_prefetch_gathers_are_explicit() {
    let m = model();
    for options in [
        PlanOptions::baseline(),
        PlanOptions::prefetch(),
        PlanOptions::prefetch_deferred(),
        PlanOptions::prefetch_deferred().with_unroll(1),
        // What the CPU trainer lowers (`backend::plan_options`).
        PlanOptions::prefetch().with_prefetch_issue(PrefetchIssue::AfterCompute),
        PlanOptions::prefetch_deferred().with_prefetch_issue(PrefetchIssue::AfterCompute),
        PlanOptions::prefetch_deferred()
            .with_unroll(1)
            .with_prefetch_issue(PrefetchIssue::AfterCompute),
    ] {
        let step = train_step(&m, options, &axis()).unwrap();
        let all = functions(step.program.main());
        let mut groups = BTreeSet::new();
        let (mut explicit, mut loop_collectives) = (0, 0);
        // The main function holds the prologue gathers and the outer parts; loop bodies
        // hold the steps.
        for f in &all[1..] {
            assert_eq!(first_gap(f), None, "{options:?}: a group with a gap");
            for (i, n) in f.nodes.iter().enumerate() {
                let id = attribute(f, i, SCHEDULING_GROUP);
                groups.extend(id);
                if matches!(n.op, Op::AllGather { .. } | Op::ReduceScatter { .. }) {
                    loop_collectives += 1;
                    // A peeled step's deferred reduce-scatter too: it is built in the step's
                    // own loop body (tied to the carried fence), not in front of that loop.
                    assert!(
                        id.is_some(),
                        "{options:?}: an untagged collective in a loop"
                    );
                }
                if let Some(v) = attribute(f, i, EXPLICIT_FSDP.0) {
                    assert_eq!(v, EXPLICIT_FSDP.1);
                    assert!(
                        matches!(n.op, Op::AllGather { .. }),
                        "{options:?}: {:?}",
                        n.op
                    );
                    explicit += 1;
                }
            }
        }
        assert!(loop_collectives > 0 && !groups.is_empty());
        // Without prefetch every gather is at use: none is explicit FSDP.
        assert_eq!(
            explicit > 0,
            options.prefetch_fsdp_weights,
            "{options:?}: {explicit} explicit gathers"
        );
        let text = step.program.emit().unwrap();
        assert!(text.contains(&format!("\"{SCHEDULING_GROUP}\" = \"0\"")));
        let gather_lines: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("\"stablehlo.all_gather\""))
            .collect();
        let tagged = format!("\"{}\" = \"{}\"", EXPLICIT_FSDP.0, EXPLICIT_FSDP.1);
        assert_eq!(
            gather_lines.iter().filter(|l| l.contains(&tagged)).count(),
            explicit,
            "{options:?}: the text tags the IR's explicit gathers"
        );

        let off = train_step(&m, options.with_scheduling_tags(false), &axis()).unwrap();
        assert!(
            functions(off.program.main())
                .iter()
                .all(|f| f.nodes.iter().all(|n| n.attributes.is_empty())),
            "{options:?}: tags off leaves attributes"
        );
        let text = off.program.emit().unwrap();
        assert!(!text.contains(SCHEDULING_GROUP) && !text.contains(EXPLICIT_FSDP.0));
    }
}

fn inputs() -> Vec<Arg> {
    common::graph::uniform_rows(17, B * DEVICES as i64, D)
}

/// Loss and gradients of the deferred step with tags on are bit-identical to tags off, and both equal the
/// unsharded reference (rtol 1e-5).
fn check_plugin(client: &Client, fx: &Fixture, m: &StackModel, plugin: &str) {
    let options = PlanOptions::prefetch_deferred();
    let on = run_step(client, m, fx, options, DEVICES);
    let off = run_step(client, m, fx, options.with_scheduling_tags(false), DEVICES);
    assert_eq!(on, off, "{plugin}: the tags changed a result");
    for l in &on.0 {
        assert_close(&format!("{plugin}: loss"), &[*l], &[fx.loss], 1e-5);
    }
    for (j, (g, r)) in on.1.iter().zip(&fx.grads).enumerate() {
        assert_close(&format!("{plugin}: gradient {j}"), g, r, 1e-5);
    }
}

/// The check above finds a gap: `tanh` and `exp` in group 0 with an untagged `negate`
/// between them.
#[test]
fn the_gap_check_finds_a_gap() {
    let s = Scope::new("gap");
    let x = s.param(TensorType::new(DType::F32, [2]));
    let tag = [(SCHEDULING_GROUP, "0")];
    let a = s.with_frontend_attributes(&tag, || x.tanh()).unwrap();
    let b = a.neg().unwrap();
    let c = s.with_frontend_attributes(&tag, || b.exp()).unwrap();
    let gappy = s.finish(&[c]).unwrap();
    assert_eq!(first_gap(&gappy), Some(("0".to_owned(), 2)));

    let s = Scope::new("contiguous");
    let x = s.param(TensorType::new(DType::F32, [2]));
    let c = s
        .with_frontend_attributes(&tag, || x.tanh()?.neg()?.exp())
        .unwrap();
    assert_eq!(first_gap(&s.finish(&[c]).unwrap()), None);
}

#[test]
fn tags_change_no_result_on_either_cpu_plugin() {
    let m = model();
    let client = common::cpu_client(DEVICES);
    let fx = fixture(&client, &m, inputs(), DEVICES, 3);
    check_plugin(&client, &fx, &m, "cpu");
    if let Ok(plugin) = common::newer_cpu_plugin().inspect_err(|why| eprintln!("skipped: {why}")) {
        let newer = Client::new(&plugin, &ClientOptions::cpu(DEVICES)).unwrap();
        check_plugin(&newer, &fx, &m, "cpu-0.115");
    }
}
