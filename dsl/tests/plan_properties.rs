//! Property tests of the planner over random stacks (1–12 layers, 1–4 kinds, random repeats,
//! every option set): the invariants of the design's schedule section.

use std::rc::Rc;

use proptest::prelude::*;
use stackscan::fsdp::{InputSpec, LayerFn, LayerKind, ParamSpec, StackModel, train_step};
use stackscan::ir::{Function, Op};
use stackscan::plan::{
    Buffer, Direction, Group, LoopForm, Pass, Plan, PlanOptions, Segment, Signature, Stack, Step,
    signature,
};
use stackscan::{Axis, DType, TensorType};

const KINDS: [&str; 4] = ["A", "B", "C", "D"];

fn stacks() -> impl Strategy<Value = Stack> {
    (0usize..4, 1usize..5, 1usize..5, 1usize..5)
        .prop_flat_map(|(prefix, block, repeat, kinds)| {
            let repeat = repeat.min((12 - prefix) / block).max(1);
            (
                prop::collection::vec(0..kinds, prefix),
                prop::collection::vec(0..kinds, block),
                Just(repeat),
            )
        })
        .prop_map(|(prefix, block, repeat)| {
            let p: Vec<&str> = prefix.iter().map(|&k| KINDS[k]).collect();
            let b: Vec<&str> = block.iter().map(|&k| KINDS[k]).collect();
            Stack::with_prefix(&p, &b, repeat).expect("valid stack")
        })
}

fn options() -> impl Strategy<Value = PlanOptions> {
    (0usize..3, 1usize..3).prop_map(|(o, unroll)| {
        [
            PlanOptions::baseline(),
            PlanOptions::prefetch(),
            PlanOptions::prefetch_deferred(),
        ][o]
            .with_unroll(unroll)
    })
}

/// Every group's steps share one signature, every loop form matches its length, and every
/// trip of a block loop has the signatures of the first.
fn check_groups(stack: &Stack, o: PlanOptions, pass: &Pass) -> Result<(), TestCaseError> {
    let dir = pass.direction;
    let check = |layers: &[usize], form: LoopForm, sig_of: &dyn Fn(usize) -> Signature| {
        let first = sig_of(layers[0]);
        prop_assert!(
            layers.iter().all(|&l| sig_of(l) == first),
            "mixed signatures in {layers:?}"
        );
        let n = layers.len();
        match form {
            LoopForm::Peeled => prop_assert_eq!(n, 1),
            LoopForm::PingPong { trips, peel_first } => {
                prop_assert_eq!(o.unroll, 2);
                prop_assert_eq!(2 * trips + usize::from(peel_first), n);
                prop_assert!(n >= 2);
            }
            LoopForm::Simple { trips } => {
                prop_assert_eq!(o.unroll, 1);
                prop_assert_eq!(trips, n);
                prop_assert!(n >= 2);
            }
            other => prop_assert!(false, "a loop form this test does not know: {:?}", other),
        }
        Ok(())
    };
    let sig = |l: usize| signature(stack, o, dir, l);
    for s in &pass.segments {
        match s {
            Segment::Group(g) => check(&g.layers, g.form, &sig)?,
            Segment::Blocks {
                trips,
                stride,
                groups,
            } => {
                prop_assert!(*trips >= 1);
                for t in 0..*trips as isize {
                    for g in groups {
                        let shifted: Vec<usize> = g
                            .layers
                            .iter()
                            .map(|&l| (l as isize + t * stride) as usize)
                            .collect();
                        check(&shifted, g.form, &sig)?;
                        prop_assert_eq!(sig(shifted[0]), sig(g.layers[0]), "trip {} differs", t);
                    }
                }
            }
            other => prop_assert!(false, "a segment this test does not know: {:?}", other),
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn schedule_invariants(stack in stacks(), o in options()) {
        let n = stack.len();
        let plan = Plan::new(&stack, o).expect("plan");

        // Each layer once per pass, in order.
        prop_assert_eq!(plan.forward.layer_order(), (0..n).collect::<Vec<_>>());
        prop_assert_eq!(plan.backward.layer_order(), (0..n).rev().collect::<Vec<_>>());
        prop_assert_eq!(plan.forward.direction, Direction::Forward);
        check_groups(&stack, o, &plan.forward)?;
        check_groups(&stack, o, &plan.backward)?;

        for (steps, max_live, is_backward) in [(plan.forward_steps(), 2, false), (plan.backward_steps(), 3, true)] {
            // Each layer's weights gathered exactly once per pass, one step before use
            // (the first layer's in the prologue of its own step).
            for (pos, step) in steps.iter().enumerate() {
                let gathered_at: Vec<usize> = steps.iter().enumerate()
                    .filter(|(_, s)| s.gathers.contains(&step.layer))
                    .map(|(p, _)| p)
                    .collect();
                let expected = if o.prefetch_fsdp_weights && pos > 0 { pos - 1 } else { pos };
                prop_assert_eq!(gathered_at, vec![expected], "layer {} gathered wrongly", step.layer);
                prop_assert!(step.live.len() <= max_live, "{:?} holds {:?}", step.layer, step.live);
                prop_assert!(step.live.contains(&Buffer::Gathered(step.layer)));
            }
            let gathers: usize = steps.iter().map(|s| s.gathers.len()).sum();
            prop_assert_eq!(gathers, n);
            // Each gradient reduce-scattered exactly once (backward only).
            for layer in 0..n {
                let count = steps.iter().filter(|s| s.reduce_scatters.contains(&layer)).count();
                prop_assert_eq!(count, usize::from(is_backward), "layer {} scattered {} times", layer, count);
                if is_backward && o.defer_grad_reduce_scatter && layer > 0 {
                    // Deferred: scattered at the start of the next (lower) step.
                    let at = steps.iter().position(|s| s.reduce_scatters.contains(&layer));
                    let own = steps.iter().position(|s| s.layer == layer);
                    prop_assert_eq!(at, own.map(|p| p + 1));
                }
            }
        }
    }
}

// ------------------------------------------------------------ the plan against the program

/// Sharded weights per layer of a kind, different for each kind name so that a step which
/// gathers or scatters another kind's weights shows in the counts; `C` also has a replicated
/// weight, which is neither gathered nor reduce-scattered.
fn sharded_weights(name: &str) -> usize {
    match name {
        "A" | "C" => 1,
        "B" => 2,
        _ => 3,
    }
}

/// A residual tanh layer per kind over rows of 8, with [`sharded_weights`] sharded matrices.
fn toy_model(stack: &Stack) -> StackModel {
    let row = TensorType::new(DType::F32, [2, 8]);
    let kinds = (0..stack.num_kinds())
        .map(|k| {
            let name = stack.kind_name(k);
            let mut params: Vec<ParamSpec> = (0..sharded_weights(name))
                .map(|i| ParamSpec::sharded(&format!("w{i}"), &[8, 8], DType::F32, i % 2))
                .collect();
            let replicated = name == "C";
            if replicated {
                params.push(ParamSpec::replicated("g", &[8], DType::F32));
            }
            let forward: LayerFn = Rc::new(move |h, w| {
                let sharded = if replicated { &w[..w.len() - 1] } else { w };
                let mut out = h.clone();
                for m in sharded {
                    out = out.add(&out.matmul(m)?.tanh()?)?;
                }
                match (replicated, w.last()) {
                    (true, Some(g)) => out.mul(&g.expand_dims(0)?.broadcast_to(&[2, 8])?),
                    _ => Ok(out),
                }
            });
            LayerKind {
                name: name.into(),
                params,
                forward,
            }
        })
        .collect();
    StackModel {
        stack: stack.clone(),
        kinds,
        activation: row.clone(),
        inputs: vec![InputSpec::new("x", row.clone()), InputSpec::new("y", row)],
        outer_params: vec![],
        pre: Rc::new(|inputs, _| Ok(inputs[0].clone())),
        post: Rc::new(|h, inputs, _| h.sub(&inputs[1])?.square()?.mean(&[0, 1])),
    }
}

/// A loop of the program (or of the plan): its trips, the all-gathers and reduce-scatters
/// directly in its body, and the loops nested in it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Loop {
    trips: usize,
    gathers: usize,
    scatters: usize,
    inner: Vec<Loop>,
}

/// `(gathers, scatters, loops)` directly in `f`, as lowered.
fn program_loops(f: &Function) -> (usize, usize, Vec<Loop>) {
    let (mut gathers, mut scatters, mut loops) = (0, 0, Vec::new());
    for node in &f.nodes {
        match &node.op {
            Op::AllGather { .. } => gathers += 1,
            Op::ReduceScatter { .. } => scatters += 1,
            Op::Scan { body, length, .. } => {
                let (gathers, scatters, inner) = program_loops(body);
                loops.push(Loop {
                    trips: *length,
                    gathers,
                    scatters,
                    inner,
                });
            }
            _ => {}
        }
    }
    (gathers, scatters, loops)
}

/// Collectives a loop issues over all its trips, nested loops included.
fn executed(l: &Loop) -> (usize, usize) {
    let (g, s) = l
        .inner
        .iter()
        .map(executed)
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    (l.trips * (l.gathers + g), l.trips * (l.scatters + s))
}

/// What the plan says a pass's program holds: per group, its loops (a single-trip loop for a
/// peeled step, the loop of its trips), each body issuing the collectives of the steps of
/// one trip as the step description lists them; per block loop, one loop around its groups'.
/// Returns the loops and the reduce-scatters issued outside them, between loops of the pass:
/// its epilogue scatter (unless its last step is alone in a group, whose loop then issues
/// it). A peeled step scatters the gradient deferred to it inside its loop: that gradient
/// enters the single-trip loop as a captured value, and the step ties it to the loop's
/// carried fence so its scatter is built in the body (where it overlaps the step's layer)
/// rather than in front of the loop. The pass's prologue gather, which its first step lists,
/// is outside every loop.
fn planned_loops(stack: &Stack, pass: &Pass) -> (Vec<Loop>, usize) {
    let steps = pass.steps();
    let step_of = |layer: usize| -> &Step {
        steps
            .iter()
            .find(|s| s.layer == layer)
            .expect("every layer has a step")
    };
    let weights = |layers: &[usize]| -> usize {
        layers
            .iter()
            .map(|&l| sharded_weights(stack.kind_name(stack.kind_of(l))))
            .sum()
    };
    let (prologue, epilogue) = (pass.prologue_gather(), pass.epilogue_scatter());
    // A last step alone in a group of the pass (not inside a block loop) stores its deferred
    // gradient at the end of its own loop's body; otherwise the pass stores it after its loops.
    let epilogue_inside = epilogue.is_some_and(|layer| {
        pass.segments
            .iter()
            .any(|s| matches!(s, Segment::Group(g) if g.layers == [layer]))
    });
    // `(gathers, scatters)` in the body of a loop running `layers` in one trip.
    let body = |layers: &[usize]| -> (usize, usize) {
        layers.iter().fold((0, 0), |(g, s), &l| {
            let step = step_of(l);
            let gathers: Vec<usize> = step
                .gathers
                .iter()
                .copied()
                .filter(|&x| !(x == l && prologue == Some(l)))
                .collect();
            let (own, pending): (Vec<usize>, Vec<usize>) = step
                .reduce_scatters
                .iter()
                .copied()
                .filter(|&x| !(x == l && epilogue == Some(l) && !epilogue_inside))
                .partition(|&x| x == l);
            (g + weights(&gathers), s + weights(&own) + weights(&pending))
        })
    };
    let leaf = |trips: usize, layers: &[usize]| {
        let (gathers, scatters) = body(layers);
        Loop {
            trips,
            gathers,
            scatters,
            inner: Vec::new(),
        }
    };
    let group = |g: &Group| -> Vec<Loop> {
        match g.form {
            LoopForm::Peeled => vec![leaf(1, &g.layers[..1])],
            LoopForm::Simple { trips } => vec![leaf(trips, &g.layers[..1])],
            LoopForm::PingPong {
                trips,
                peel_first: false,
            } => vec![leaf(trips, &g.layers[..2])],
            LoopForm::PingPong {
                trips,
                peel_first: true,
            } => vec![leaf(1, &g.layers[..1]), leaf(trips, &g.layers[1..3])],
            other => panic!("a loop form this test does not know: {other:?}"),
        }
    };
    let mut loops = Vec::new();
    let outside = if epilogue_inside {
        0
    } else {
        weights(&epilogue.into_iter().collect::<Vec<_>>())
    };
    for s in &pass.segments {
        match s {
            Segment::Group(g) => loops.extend(group(g)),
            Segment::Blocks { trips, groups, .. } => {
                loops.push(Loop {
                    trips: *trips,
                    gathers: 0,
                    scatters: 0,
                    inner: groups.iter().flat_map(group).collect(),
                });
            }
            other => panic!("a segment this test does not know: {other:?}"),
        }
    }
    (loops, outside)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// The lowered program has the plan's loops, each body issuing the collectives the step
    /// description lists; and over all trips every layer's sharded weights are gathered once
    /// per pass and its gradients reduce-scattered once.
    #[test]
    fn the_program_is_the_plan(stack in stacks(), o in options()) {
        let model = toy_model(&stack);
        let axis = Axis { name: "fsdp".into(), size: 2 };
        let step = train_step(&model, o, &axis).expect("lowering");
        let plan = &step.plan;
        let (gathers, scatters, loops) = program_loops(step.program.main());

        let (mut planned, forward_outside) = planned_loops(&stack, &plan.forward);
        let (backward_loops, backward_outside) = planned_loops(&stack, &plan.backward);
        planned.extend(backward_loops);
        prop_assert_eq!(&loops, &planned);

        let weights = |l: Option<usize>| l.map_or(0, |l| sharded_weights(stack.kind_name(stack.kind_of(l))));
        let prologues = weights(plan.forward.prologue_gather()) + weights(plan.backward.prologue_gather());
        prop_assert_eq!(gathers, prologues, "gathers outside the loops");
        prop_assert_eq!(scatters, forward_outside + backward_outside, "scatters outside the loops");

        let every_layer: usize = (0..stack.len()).map(|l| weights(Some(l))).sum();
        let (g, s) = loops.iter().map(executed).fold((gathers, scatters), |a, b| (a.0 + b.0, a.1 + b.1));
        prop_assert_eq!(g, 2 * every_layer, "gathers executed");
        prop_assert_eq!(s, every_layer, "reduce-scatters executed");
    }
}
