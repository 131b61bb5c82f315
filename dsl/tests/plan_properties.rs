//! Property tests of the planner over random stacks (1–12 layers, 1–4 kinds, random repeats,
//! every option set): the invariants of the design's schedule section.

use proptest::prelude::*;
use stackscan::plan::{
    Buffer, Direction, LoopForm, Pass, Plan, PlanOptions, Segment, Signature, Stack, signature,
};

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
                prop_assert!(*trips >= 2);
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
