//! The compiled replay against schedules written by hand, with times whose totals are worked
//! out below.

use super::*;
use stackscan::plan::Plan;
use stackscan::sim::simulate;

/// Three layers of one kind: forward 10, gather 4 (per layer), no reduce-scatter forward.
fn three_layers() -> (Stack, Plan, KindTimes) {
    let stack = Stack::homogeneous("L", 3).unwrap();
    let plan = Plan::new(&stack, PlanOptions::prefetch_deferred()).unwrap();
    let t = KindTimes {
        forward: 10.0,
        backward: 20.0,
        gather: 4.0,
        reduce_scatter: 6.0,
        ..KindTimes::default()
    };
    (stack, plan, t)
}

/// The forward pass's two loops: the ping-pong body of layers 0 and 1 (products at 2, 3, 5
/// and 6 of 8 positions, its one gather from `window.0` to `window.1`) and layer 2's peeled
/// body (two products, nothing to gather).
fn forward_loops(window: (usize, usize)) -> Vec<CompiledLoop> {
    vec![
        CompiledLoop {
            label: "forward L, layers 0–1, ping-pong".into(),
            product_positions: vec![2, 3, 5, 6],
            scheduled: 8,
            gathers: Windows {
                windows: vec![window],
                bytes: Vec::new(),
            },
            scatters: Windows::default(),
        },
        CompiledLoop {
            label: "forward L, layer 2, peeled".into(),
            product_positions: vec![1, 2],
            scheduled: 3,
            gathers: Windows::default(),
            scatters: Windows::default(),
        },
    ]
}

/// `pass` of a one-kind `stack` (costs `t`) replayed over `loops`, beside its simulation.
fn replay_one_kind(
    pass: &Pass,
    stack: &Stack,
    t: KindTimes,
    loops: &[CompiledLoop],
) -> Result<CompiledPass> {
    let simulated = simulate(pass, stack, &[t], SimOptions::default()).unwrap();
    replay_stack(
        pass,
        stack,
        &["L".to_owned()],
        &[t],
        SimOptions::default(),
        loops,
        &simulated,
    )
}

fn forward(window: (usize, usize)) -> CompiledPass {
    let (stack, plan, t) = three_layers();
    replay_one_kind(&plan.forward, &stack, t, &forward_loops(window)).unwrap()
}

#[test]
fn a_gather_in_flight_across_the_products_is_hidden() {
    // The first layer's gather before the loop: 0–4. The ping-pong trip from 4: its gather
    // (layers 1 and 2, 8) runs 4–12 beside the four products of 5 (layers 0 and 1, 20),
    // 4–24, and is done by then. Layer 2: 24–34.
    let p = forward((1, 7));
    assert_eq!(p.timeline.total, 34.0);
    assert_eq!(p.timeline.compute, 30.0);
    assert_eq!(p.timeline.exposed_communication, 4.0);
    // The first loop's time counts the gather before it.
    assert_eq!(p.loops[0].compiled, 24.0);
    assert_eq!(p.loops[0].unhidden, (0, 1));
    assert_eq!(p.loops[1].compiled, 10.0);
}

#[test]
fn a_gather_run_after_the_products_is_exposed() {
    // The same trip with its gather synchronous at the body's end: 24–32, then layer 2.
    let p = forward((7, 7));
    assert_eq!(p.timeline.total, 42.0);
    assert_eq!(p.timeline.exposed_communication, 12.0);
    assert_eq!(p.loops[0].compiled, 32.0);
    assert_eq!(p.loops[0].unhidden, (1, 1));
    // The plan hides that gather: the simulated trip is the first gather and the products.
    assert!(p.loops[0].simulated < p.loops[0].compiled);
}

#[test]
fn a_loop_the_report_lacks_is_named() {
    let (stack, plan, t) = three_layers();
    let mut loops = forward_loops((1, 7));
    loops.remove(1);
    let e = replay_one_kind(&plan.forward, &stack, t, &loops)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no loop `forward L, layer 2, peeled`"), "{e}");
}

#[test]
fn the_reports_options_are_the_replays() {
    let report = CompiledReport {
        model: "llama".into(),
        devices: 8,
        options: "prefetch_fsdp_weights=false, defer_grad_reduce_scatter=false, unroll=1, \
                  precision=bf16, prefetch_issue=with-input"
            .into(),
        tpu: CompiledTpu {
            topology: "tpu7x:2x2x1".into(),
            loops: Vec::new(),
            out_of_memory: None,
        },
    };
    let o = report
        .plan_options(PlanOptions::prefetch_deferred())
        .unwrap();
    assert!(!o.prefetch_fsdp_weights && !o.defer_grad_reduce_scatter);
    assert_eq!(o.unroll, 1);
    assert_eq!(o.precision, Precision::BF16);
    let bad = CompiledReport {
        options: "unroll=two".into(),
        ..report
    };
    let e = bad.plan_options(PlanOptions::baseline()).unwrap_err();
    assert!(e.to_string().contains("`unroll=two`"), "{e}");
}

#[test]
fn collectives_share_their_time_by_the_bytes_they_write() {
    let w = Windows {
        windows: vec![(0, 1), (2, 3)],
        bytes: vec![1, 3],
    };
    assert_eq!(w.shares(), [0.25, 0.75]);
    // A report that does not say: equal shares.
    let w = Windows {
        bytes: Vec::new(),
        ..w
    };
    assert_eq!(w.shares(), [0.5, 0.5]);
}

#[test]
fn without_prefetch_the_first_gather_is_in_its_loop() {
    // Two layers without prefetch: one ping-pong trip that gathers both (4 each), layer 0's
    // at 0 and waited for at once, layer 1's in flight across layer 0's products. No gather
    // runs before the loop: layer 0's 0–4, then layer 1's 4–8 beside the products (5 each),
    // 4–24. Charging layer 0's gather ahead of the loop, as for a prefetch, would leave the
    // body only layer 1's gather to share between its two windows, and end at 26.
    let stack = Stack::homogeneous("L", 2).unwrap();
    let plan = Plan::new(&stack, PlanOptions::baseline()).unwrap();
    let (_, _, t) = three_layers();
    let loops = vec![CompiledLoop {
        label: "forward L, layers 0–1, ping-pong".into(),
        product_positions: vec![2, 3, 5, 6],
        scheduled: 7,
        gathers: Windows {
            windows: vec![(0, 0), (1, 4)],
            bytes: Vec::new(),
        },
        scatters: Windows::default(),
    }];
    let p = replay_one_kind(&plan.forward, &stack, t, &loops).unwrap();
    assert_eq!(p.timeline.total, 24.0);
    assert_eq!(p.timeline.exposed_communication, 4.0);
    assert_eq!(p.loops[0].compiled, 24.0);
}

#[test]
fn the_epilogue_scatter_runs_after_the_last_loop() {
    // Backward over layers 2, 1, 0 with prefetch and deferral: 20 a layer, reduce-scatter 6.
    // The last step's own deferred gradient is reduce-scattered after the last loop: the pass
    // ends 6 after the last body does, and that body is charged only its own work.
    let (stack, plan, t) = three_layers();
    let labels: Vec<String> = places(&plan.backward, "backward", &|_| "L".to_owned())
        .unwrap()
        .into_iter()
        .map(|p| p.label)
        .fold(Vec::new(), |mut v, l| {
            if !v.contains(&l) {
                v.push(l);
            }
            v
        });
    let loops: Vec<CompiledLoop> = labels
        .iter()
        .map(|label| CompiledLoop {
            label: label.clone(),
            product_positions: vec![1, 2],
            scheduled: 3,
            gathers: Windows::default(),
            scatters: Windows::default(),
        })
        .collect();
    let p = replay_one_kind(&plan.backward, &stack, t, &loops).unwrap();
    let last = p.timeline.steps.last().unwrap();
    assert_eq!(p.timeline.total, last.end + 6.0);
    let epilogue = p
        .timeline
        .bars
        .iter()
        .filter(|b| b.op == OpKind::ReduceScatter)
        .max_by(|a, b| a.start.total_cmp(&b.start))
        .unwrap();
    assert_eq!((epilogue.start, epilogue.end), (last.end, last.end + 6.0));
}
