//! Hand-computed timelines of three-layer plans, and properties of random ones: no lane runs
//! two ops at once, and every dependency the plan states holds.

use proptest::prelude::*;

use super::*;
use crate::plan::{Direction, Pass, Plan, PlanOptions, Stack};

const T: KindTimes = KindTimes {
    forward: 10.0,
    backward: 20.0,
    gather: 4.0,
    reduce_scatter: 6.0,
    exchange_forward: 0.0,
    exchange_backward: 0.0,
    carry_copy: 0.0,
};

/// `(lane, label, start, end)` of every bar, in issue order.
fn bars(t: &Timeline) -> Vec<(Lane, String, f64, f64)> {
    t.bars
        .iter()
        .map(|b| (b.lane, b.label(), b.start, b.end))
        .collect()
}

fn run(o: PlanOptions, dir: Direction, rs: Lane) -> Timeline {
    let stack = Stack::homogeneous("L", 3).unwrap();
    let plan = Plan::new(&stack, o).unwrap();
    let pass = match dir {
        Direction::Forward => &plan.forward,
        Direction::Backward => &plan.backward,
    };
    let options = SimOptions {
        reduce_scatter_lane: rs,
        ..SimOptions::default()
    };
    simulate(pass, &stack, &[T], options).unwrap()
}

fn b(lane: Lane, label: &str, start: f64, end: f64) -> (Lane, String, f64, f64) {
    (lane, label.to_owned(), start, end)
}

use Lane::{Compute as C, Fsdp as F, Second as S};

#[test]
fn forward_without_prefetch_exposes_every_gather() {
    let t = run(PlanOptions::baseline(), Direction::Forward, S);
    assert_eq!(
        bars(&t),
        [
            b(F, "AG W0", 0.0, 4.0),
            b(C, "fwd L0", 4.0, 14.0),
            b(F, "AG W1", 14.0, 18.0),
            b(C, "fwd L1", 18.0, 28.0),
            b(F, "AG W2", 28.0, 32.0),
            b(C, "fwd L2", 32.0, 42.0),
        ]
    );
    assert_eq!(
        (t.total, t.compute, t.exposed_communication),
        (42.0, 30.0, 12.0)
    );
}

#[test]
fn forward_prefetch_hides_all_but_the_prologue() {
    // [L0, L1] (one ping-pong trip) → [L2] (peeled). AG W1 runs under nothing (the prologue
    // AG W0 holds the lane, fwd L0 waits on AG W0); AG W2 waits for fwd L0 to free W0.
    let t = run(PlanOptions::prefetch(), Direction::Forward, S);
    assert_eq!(
        bars(&t),
        [
            b(F, "AG W0", 0.0, 4.0),
            b(F, "AG W1", 4.0, 8.0),
            b(C, "fwd L0", 4.0, 14.0),
            b(F, "AG W2", 14.0, 18.0),
            b(C, "fwd L1", 14.0, 24.0),
            b(C, "fwd L2", 24.0, 34.0),
        ]
    );
    assert_eq!((t.total, t.exposed_communication), (34.0, 4.0));
    let spans: Vec<(f64, f64)> = t.steps.iter().map(|s| (s.start, s.end)).collect();
    assert_eq!(spans, [(0.0, 14.0), (14.0, 24.0), (24.0, 34.0)]);
}

#[test]
fn backward_without_prefetch_waits_on_each_trip_end() {
    // [L2] peeled, then [L1, L0] one ping-pong trip: RS dW2 ends trip 1 and is exposed, RS dW1
    // overlaps AG W0 and vjp L0 inside the trip, RS dW0 ends the pass.
    let t = run(PlanOptions::baseline(), Direction::Backward, S);
    assert_eq!(
        bars(&t),
        [
            b(F, "AG W2", 0.0, 4.0),
            b(C, "vjp L2", 4.0, 24.0),
            b(S, "RS dW2", 24.0, 30.0),
            b(F, "AG W1", 30.0, 34.0),
            b(C, "vjp L1", 34.0, 54.0),
            b(S, "RS dW1", 54.0, 60.0),
            b(F, "AG W0", 54.0, 58.0),
            b(C, "vjp L0", 58.0, 78.0),
            b(S, "RS dW0", 78.0, 84.0),
        ]
    );
    assert_eq!((t.total, t.exposed_communication), (84.0, 24.0));
}

#[test]
fn reduce_scatters_on_the_fsdp_lane_delay_the_gathers() {
    let t = run(PlanOptions::baseline(), Direction::Backward, F);
    assert_eq!(
        bars(&t)[5..],
        [
            b(F, "RS dW1", 54.0, 60.0),
            b(F, "AG W0", 60.0, 64.0),
            b(C, "vjp L0", 64.0, 84.0),
            b(F, "RS dW0", 84.0, 90.0),
        ]
    );
    assert_eq!(t.total, 90.0);
}

#[test]
fn backward_deferred_overlaps_each_scatter_with_the_next_vjp() {
    // Three peeled steps: [L2] → [L1] → [L0]; only the prologue gather and the epilogue
    // reduce-scatter are exposed.
    let t = run(PlanOptions::prefetch_deferred(), Direction::Backward, S);
    assert_eq!(
        bars(&t),
        [
            b(F, "AG W2", 0.0, 4.0),
            b(F, "AG W1", 4.0, 8.0),
            b(C, "vjp L2", 4.0, 24.0),
            b(S, "RS dW2", 24.0, 30.0),
            b(F, "AG W0", 24.0, 28.0),
            b(C, "vjp L1", 24.0, 44.0),
            b(S, "RS dW1", 44.0, 50.0),
            b(C, "vjp L0", 44.0, 64.0),
            b(S, "RS dW0", 64.0, 70.0),
        ]
    );
    assert_eq!((t.total, t.exposed_communication), (70.0, 10.0));
}

#[test]
fn a_deferred_scatter_longer_than_the_vjp_holds_the_next_step() {
    // RS dW2 (30) outlasts vjp L1 (20): its buffer is needed by step 2, so vjp L0 waits.
    let stack = Stack::homogeneous("L", 3).unwrap();
    let plan = Plan::new(&stack, PlanOptions::prefetch_deferred()).unwrap();
    let slow = KindTimes {
        reduce_scatter: 30.0,
        ..T
    };
    let t = simulate(&plan.backward, &stack, &[slow], SimOptions::default()).unwrap();
    let vjp0 = t.bars.iter().find(|b| b.label() == "vjp L0").unwrap();
    assert_eq!(vjp0.start, 54.0);
}

#[test]
fn bad_times_are_errors_naming_the_kind() {
    let stack = Stack::blocks(&["attn", "mlp"], 2).unwrap();
    let plan = Plan::new(&stack, PlanOptions::prefetch()).unwrap();
    let e = simulate(&plan.forward, &stack, &[T], SimOptions::default()).unwrap_err();
    assert!(e.to_string().contains("2 kinds need times"), "{e}");
    let bad = KindTimes {
        gather: f64::NAN,
        ..T
    };
    let e = simulate(&plan.forward, &stack, &[T, bad], SimOptions::default()).unwrap_err();
    assert!(e.to_string().contains("kind `mlp`: `gather`"), "{e}");
}

const KINDS: [&str; 3] = ["A", "B", "C"];

fn stacks() -> impl Strategy<Value = Stack> {
    (0usize..3, 1usize..4, 1usize..5).prop_flat_map(|(prefix, block, repeat)| {
        (
            prop::collection::vec(0..3usize, prefix),
            prop::collection::vec(0..3usize, block),
            Just(repeat),
        )
            .prop_map(|(p, b, r)| {
                let p: Vec<&str> = p.iter().map(|&k| KINDS[k]).collect();
                let b: Vec<&str> = b.iter().map(|&k| KINDS[k]).collect();
                Stack::with_prefix(&p, &b, r).unwrap()
            })
    })
}

fn kind_times() -> impl Strategy<Value = KindTimes> {
    (0u32..50, 0u32..50, 0u32..50, 0u32..50).prop_map(|(f, b, g, r)| KindTimes {
        forward: f.into(),
        backward: b.into(),
        gather: g.into(),
        reduce_scatter: r.into(),
        ..KindTimes::default()
    })
}

fn options() -> impl Strategy<Value = PlanOptions> {
    (0usize..3, 1usize..3).prop_map(|(o, u)| {
        [
            PlanOptions::baseline(),
            PlanOptions::prefetch(),
            PlanOptions::prefetch_deferred(),
        ][o]
            .with_unroll(u)
    })
}

/// Every property a replay must have, whatever the times.
fn check(pass: &Pass, stack: &Stack, t: &Timeline) {
    for lane in Lane::ALL {
        let mut on: Vec<&Bar> = t.lane(lane).collect();
        on.sort_by(|a, b| a.start.total_cmp(&b.start));
        for w in on.windows(2) {
            assert!(w[0].end <= w[1].start, "{lane:?} overlaps: {w:?}");
        }
    }
    let steps = pass.steps();
    let find = |op: OpKind, layer: usize| {
        t.bars
            .iter()
            .find(|b| b.op == op && b.layer == layer)
            .unwrap_or_else(|| panic!("{op:?} of layer {layer}"))
    };
    let compute_op = match pass.direction {
        Direction::Forward => OpKind::Forward,
        Direction::Backward => OpKind::Vjp,
    };
    assert_eq!(t.lane(Lane::Compute).count(), stack.len());
    for (pos, s) in steps.iter().enumerate() {
        let c = find(compute_op, s.layer);
        // A layer runs on gathered weights, after the previous layer.
        assert!(find(OpKind::Gather, s.layer).end <= c.start);
        if pos > 0 {
            let prev = find(compute_op, steps[pos - 1].layer);
            assert!(prev.end <= c.start);
            // Gathers wait for the previous layer to release its buffer.
            for &g in &s.gathers {
                assert!(prev.end <= find(OpKind::Gather, g).start);
            }
        }
        for &g in &s.reduce_scatters {
            assert!(find(OpKind::Vjp, g).end <= find(OpKind::ReduceScatter, g).start);
        }
        assert!(t.steps[pos].start <= c.start && c.end <= t.steps[pos].end);
    }
    for w in t.steps.windows(2) {
        assert!(w[0].start <= w[1].start);
    }
    // Every layer is gathered once, and backward every gradient reduce-scattered once.
    assert_eq!(
        t.lane(Lane::Fsdp)
            .filter(|b| b.op == OpKind::Gather)
            .count(),
        stack.len()
    );
    let scatters = t
        .bars
        .iter()
        .filter(|b| b.op == OpKind::ReduceScatter)
        .count();
    let expected = match pass.direction {
        Direction::Forward => 0,
        Direction::Backward => stack.len(),
    };
    assert_eq!(scatters, expected);
    let busy: f64 = t.lane(Lane::Compute).map(|b| b.end - b.start).sum();
    assert_eq!(t.compute, busy);
    assert!(t.total >= t.compute);
    assert_eq!(t.total, t.bars.iter().map(|b| b.end).fold(0.0, f64::max));
}

proptest! {
    #[test]
    fn replays_respect_lanes_and_dependencies(
        stack in stacks(),
        o in options(),
        times in prop::collection::vec(kind_times(), 3),
        rs_on_fsdp in any::<bool>(),
    ) {
        let plan = Plan::new(&stack, o).unwrap();
        let sim = SimOptions {
            reduce_scatter_lane: if rs_on_fsdp { Lane::Fsdp } else { Lane::Second },
            ..SimOptions::default()
        };
        for pass in [&plan.forward, &plan.backward] {
            let t = simulate(pass, &stack, &times, sim).unwrap();
            check(pass, &stack, &t);
        }
    }

    /// Where every layer's compute outlasts any layer's gather plus reduce-scatter, prefetch
    /// with deferral never loses. (Not true in general: with near-zero compute the peeled
    /// loops' barriers and the serial scatters can cost more than they hide.)
    #[test]
    fn prefetch_never_slows_a_compute_bound_pass(
        stack in stacks(),
        times in prop::collection::vec(
            (50u32..100, 50u32..100, 0u32..25, 0u32..25).prop_map(|(f, b, g, r)| KindTimes {
                forward: f.into(),
                backward: b.into(),
                gather: g.into(),
                reduce_scatter: r.into(), ..KindTimes::default()
            }),
            3,
        ),
    ) {
        let off = Plan::new(&stack, PlanOptions::baseline()).unwrap();
        let on = Plan::new(&stack, PlanOptions::prefetch_deferred()).unwrap();
        let sim = SimOptions::default();
        for (a, b) in [(&off.forward, &on.forward), (&off.backward, &on.backward)] {
            let (a, b) = (
                simulate(a, &stack, &times, sim).unwrap(),
                simulate(b, &stack, &times, sim).unwrap(),
            );
            prop_assert!(b.total <= a.total, "on {} > off {}", b.total, a.total);
        }
    }
}

#[test]
fn a_token_exchange_splits_the_layer_and_waits_on_the_second_lane() {
    // One layer, prefetch off: AG W0 [0, 4]; fwd L0 halves of 5 around A2A L0 (4) on the
    // second lane: [4, 9], A2A [9, 13], [13, 18]. The compute lane waits 4 + 4 of 18.
    let stack = Stack::homogeneous("M", 1).unwrap();
    let plan = Plan::new(&stack, PlanOptions::baseline()).unwrap();
    let times = KindTimes {
        exchange_forward: 4.0,
        ..T
    };
    let t = simulate(&plan.forward, &stack, &[times], SimOptions::default()).unwrap();
    let spans: Vec<(String, f64, f64)> =
        t.bars.iter().map(|b| (b.label(), b.start, b.end)).collect();
    assert_eq!(
        spans,
        [
            ("AG W0".to_owned(), 0.0, 4.0),
            ("fwd L0".to_owned(), 4.0, 9.0),
            ("A2A L0".to_owned(), 9.0, 13.0),
            ("fwd L0".to_owned(), 13.0, 18.0),
        ]
    );
    assert_eq!(t.lane(Lane::Second).count(), 1);
    assert_eq!(
        (t.total, t.compute, t.exposed_communication),
        (18.0, 10.0, 8.0)
    );
}

#[test]
fn on_a_cpu_nothing_overlaps_so_prefetch_buys_nothing() {
    // Every collective on the compute lane: forward 3 × (4 + 10) = 42 either way; backward
    // 3 × (4 + 20 + 6) = 90 either way. Communication is what is not compute.
    let stack = Stack::homogeneous("L", 3).unwrap();
    for o in [PlanOptions::baseline(), PlanOptions::prefetch_deferred()] {
        let plan = Plan::new(&stack, o).unwrap();
        let f = simulate(&plan.forward, &stack, &[T], SimOptions::serial()).unwrap();
        let b = simulate(&plan.backward, &stack, &[T], SimOptions::serial()).unwrap();
        assert_eq!(
            (f.total, f.compute, f.exposed_communication),
            (42.0, 30.0, 12.0)
        );
        assert_eq!(
            (b.total, b.compute, b.exposed_communication),
            (90.0, 60.0, 30.0)
        );
        assert!(
            f.bars
                .iter()
                .chain(&b.bars)
                .all(|x| x.lane == Lane::Compute)
        );
    }
}

/// A CPU: every op on the compute lane, and the compiler copies what a loop carries. Prefetch
/// then hides nothing and costs one copy per buffer a step hands on: forward the prefetched
/// weights (W1, W2), backward those (W1, W0) and the deferred gradients (dW2, dW1); the last
/// step's gradient is reduced in its own epilogue and carried nowhere.
#[test]
fn carried_buffers_are_copied_on_the_compute_lane_where_the_compiler_copies_them() {
    let stack = Stack::homogeneous("L", 3).unwrap();
    let times = KindTimes {
        carry_copy: 1.0,
        ..T
    };
    let serial = SimOptions::serial();
    let plan = Plan::new(&stack, PlanOptions::prefetch()).unwrap();
    let t = simulate(&plan.forward, &stack, &[times], serial).unwrap();
    assert_eq!(
        bars(&t),
        [
            b(C, "AG W0", 0.0, 4.0),
            b(C, "AG W1", 4.0, 8.0),
            b(C, "fwd L0", 8.0, 18.0),
            b(C, "copy L1", 18.0, 19.0),
            b(C, "AG W2", 19.0, 23.0),
            b(C, "fwd L1", 23.0, 33.0),
            b(C, "copy L2", 33.0, 34.0),
            b(C, "fwd L2", 34.0, 44.0),
        ]
    );
    // Copies are the compute threads' work, not communication.
    assert_eq!(
        (t.total, t.compute, t.exposed_communication),
        (44.0, 32.0, 12.0)
    );
    let off = Plan::new(&stack, PlanOptions::baseline()).unwrap();
    let t_off = simulate(&off.forward, &stack, &[times], serial).unwrap();
    assert_eq!(t_off.total, 42.0, "no prefetch, nothing carried");
    assert!(t_off.lane(C).all(|b| b.op != OpKind::CarryCopy));

    let deferred = Plan::new(&stack, PlanOptions::prefetch_deferred()).unwrap();
    let t = simulate(&deferred.backward, &stack, &[times], serial).unwrap();
    let copies: Vec<String> = t
        .bars
        .iter()
        .filter(|b| b.op == OpKind::CarryCopy)
        .map(Bar::label)
        .collect();
    assert_eq!(copies, ["copy L1", "copy L2", "copy L0", "copy L1"]);
    // Serial: three gathers, three vjps, three scatters and four copies, back to back.
    let t_off = simulate(&off.backward, &stack, &[times], serial).unwrap();
    assert_eq!((t_off.total, t.total), (90.0, 94.0));
    // Where carries are passed on in place (an accelerator), nothing changes.
    let t = simulate(&deferred.backward, &stack, &[T], serial).unwrap();
    assert_eq!(t.total, 90.0);
}
