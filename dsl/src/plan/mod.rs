//! The schedule planner: which layers share a loop, what each step gathers, runs and
//! reduce-scatters, for the forward and the backward pass.
//!
//! Every step has a *carry signature*: the kind it runs, the kind whose weights it prefetches
//! for the next step, and (backward, deferred) the kind of the gradient it still has to
//! reduce-scatter. Maximal runs of equal signatures share one loop: a run of two or more is a
//! double-buffered ping-pong loop (`unroll = 2`, two layers per trip, an odd step peeled), a run
//! of one is a single-trip loop (marked so XLA keeps it; the lowering writes it as a `case`)
//! because its carry holds another kind's buffers. A repeated block becomes an outer loop over one block's worth of steps,
//! with only the steps that differ from every trip (a pass's first and last) around it, so
//! the program is the same from two blocks to any depth. A step's [`Signature`] holds every
//! fact the lowering needs to build it; the expanded [`Step`]s, derived from the same signatures, say for every layer what is
//! gathered, run, reduce-scattered and live, and the property tests check the lowered
//! program's loops and collectives against them.
//!
//! ```
//! use stackscan::plan::{Plan, PlanOptions, Stack};
//! let stack = Stack::blocks(&["GDN", "GDN", "GDN", "attention"], 1)?;
//! let plan = Plan::new(&stack, PlanOptions::prefetch_deferred())?;
//! assert_eq!(plan.forward.notation(&stack), "[GDN 0, GDN 1] → [GDN 2] → [attention]");
//! assert_eq!(plan.backward.notation(&stack), "[attention] → [GDN 2] → [GDN 1] → [GDN 0]");
//! # Ok::<(), stackscan::Error>(())
//! ```

mod print;
mod schedule;
mod stack;
mod steps;

pub use schedule::{
    Direction, Group, LoopForm, OwnGradient, Pass, Plan, PlanOptions, PrefetchIssue, Segment,
    Signature, WeightSource, signature,
};
pub use stack::Stack;
pub use steps::{Buffer, Step};

#[cfg(test)]
mod tests {
    use super::*;

    fn notation(stack: &Stack, o: PlanOptions) -> (String, String) {
        let p = Plan::new(stack, o).unwrap();
        (p.forward.notation(stack), p.backward.notation(stack))
    }

    #[test]
    fn qwen_block_matches_maxtext() {
        let s = Stack::blocks(&["GDN", "GDN", "GDN", "attention"], 1).unwrap();
        let (f, b) = notation(&s, PlanOptions::prefetch_deferred());
        assert_eq!(f, "[GDN 0, GDN 1] → [GDN 2] → [attention]");
        assert_eq!(b, "[attention] → [GDN 2] → [GDN 1] → [GDN 0]");
    }

    #[test]
    fn deepseek_prefix_then_run() {
        let s = Stack::with_prefix(&["D", "D", "D"], &["M"], 58).unwrap();
        let p = Plan::new(&s, PlanOptions::prefetch_deferred()).unwrap();
        assert_eq!(
            p.forward.notation(&s),
            "[D0, D1] → [D2] → [M3 … M59] → [M60]"
        );
        assert_eq!(
            p.forward.detailed(&s),
            "[D0, D1] (1×2) → [D2] (peeled) → [M3 … M59] (1 + 28×2) → [M60] (peeled)"
        );
        assert_eq!(
            p.backward.notation(&s),
            "[M60] → [M59 … M4] → [M3] → [D2] → [D1] → [D0]"
        );
    }

    #[test]
    fn homogeneous_odd_count_and_single_layer() {
        let s = Stack::homogeneous("L", 5).unwrap();
        let p = Plan::new(&s, PlanOptions::prefetch()).unwrap();
        assert_eq!(p.forward.detailed(&s), "[L0 … L3] (2×2) → [L4] (peeled)");
        assert_eq!(p.backward.detailed(&s), "[L4 … L1] (2×2) → [L0] (peeled)");
        let one = Stack::homogeneous("layer", 1).unwrap();
        let p = Plan::new(&one, PlanOptions::prefetch_deferred()).unwrap();
        assert_eq!(p.forward.notation(&one), "[layer]");
        assert_eq!(p.backward.notation(&one), "[layer]");
    }

    #[test]
    fn attention_need_not_be_last() {
        let s = Stack::blocks(&["attention", "GDN", "GDN", "GDN"], 1).unwrap();
        let (f, b) = notation(&s, PlanOptions::prefetch_deferred());
        assert_eq!(f, "[attention] → [GDN 1, GDN 2] → [GDN 3]");
        assert_eq!(b, "[GDN 3] → [GDN 2] → [GDN 1] → [attention]");
    }

    #[test]
    fn repeated_blocks_form_an_outer_loop_with_the_last_block_peeled() {
        let s = Stack::blocks(&["GDN", "GDN", "GDN", "attention"], 10).unwrap();
        let (f, b) = notation(&s, PlanOptions::prefetch_deferred());
        assert_eq!(
            f,
            "{[GDN 0, GDN 1] → [GDN 2] → [attention]} × 9 → [GDN 0, GDN 1] → [GDN 2] → [attention]"
        );
        // The first backward step takes no deferred gradient, unlike the attention step of
        // every later block: the loop starts one step later, its trips rotated by one layer.
        assert_eq!(
            b,
            "[attention] → {[GDN 2] → [GDN 1] → [GDN 0] → [attention]} × 9 → [GDN 2] → [GDN 1] → [GDN 0]"
        );
        let (_, b) = notation(&s, PlanOptions::prefetch());
        assert_eq!(
            b,
            "{[attention] → [GDN 2, GDN 1] → [GDN 0]} × 9 → [attention] → [GDN 2, GDN 1] → [GDN 0]"
        );
    }

    /// Two blocks already have the block loop (of one trip) and the steps around it that
    /// every deeper stack has: the plan, and so the program, is the same but for trip counts.
    #[test]
    fn two_blocks_plan_like_twelve_but_for_the_trips() {
        let depth_free = |p: &Pass, s: &Stack| {
            let text = p.detailed(s);
            let mut out = String::new();
            let mut it = text.split(" × ").peekable();
            while let Some(part) = it.next() {
                out.push_str(part.trim_start_matches(|c: char| c.is_ascii_digit()));
                if it.peek().is_some() {
                    out.push_str(" × n");
                }
            }
            out
        };
        for block in [
            &["GDN", "GDN", "GDN", "attention"][..],
            &["attention", "GDN", "GDN", "GDN"],
            &["A", "B"],
            &["A", "A", "B", "A"],
        ] {
            let (two, twelve) = (
                Stack::blocks(block, 2).unwrap(),
                Stack::blocks(block, 12).unwrap(),
            );
            for base in [
                PlanOptions::baseline(),
                PlanOptions::prefetch(),
                PlanOptions::prefetch_deferred(),
            ] {
                for unroll in [1, 2] {
                    let o = base.with_unroll(unroll);
                    let (p2, p12) = (Plan::new(&two, o).unwrap(), Plan::new(&twelve, o).unwrap());
                    for (a, b) in [(&p2.forward, &p12.forward), (&p2.backward, &p12.backward)] {
                        assert_eq!(
                            depth_free(a, &two),
                            depth_free(b, &twelve),
                            "{block:?} {o:?}"
                        );
                        let loops = |p: &Pass| {
                            p.segments
                                .iter()
                                .filter(|s| matches!(s, Segment::Blocks { .. }))
                                .count()
                        };
                        assert_eq!((loops(a), loops(b)), (1, 1), "{block:?} {o:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn without_prefetch_runs_are_kinds() {
        let s = Stack::blocks(&["GDN", "GDN", "GDN", "attention"], 1).unwrap();
        let (f, b) = notation(&s, PlanOptions::baseline());
        assert_eq!(f, "[GDN 0, GDN 1, GDN 2] → [attention]");
        assert_eq!(b, "[attention] → [GDN 2, GDN 1, GDN 0]");
    }

    #[test]
    fn digit_kind_names_stay_readable() {
        let s = Stack::with_prefix(&["L1"], &["L"], 3).unwrap();
        let p = Plan::new(&s, PlanOptions::prefetch()).unwrap();
        assert_eq!(p.forward.notation(&s), "[L1] → [L 1, L 2] → [L 3]");
        let s = Stack::homogeneous("1", 2).unwrap();
        let p = Plan::new(&s, PlanOptions::baseline()).unwrap();
        assert_eq!(p.forward.notation(&s), "[1 0, 1 1]");
    }

    #[test]
    fn absurd_depths_are_errors() {
        assert!(Stack::blocks(&["A", "B"], usize::MAX).is_err());
        assert!(Stack::blocks(&["A"], Stack::MAX_LAYERS + 1).is_err());
        assert_eq!(
            Stack::blocks(&["A"], Stack::MAX_LAYERS).unwrap().len(),
            Stack::MAX_LAYERS
        );
    }

    #[test]
    fn signatures_name_what_a_step_carries() {
        let s = Stack::blocks(&["GDN", "GDN", "GDN", "attention"], 1).unwrap();
        let (gdn, attention) = (0, 1);
        let p = Plan::new(&s, PlanOptions::prefetch_deferred()).unwrap();
        // Backward `[attention] → [GDN 2] → …`: GDN 2 takes attention's gradient and
        // prefetches GDN 1.
        let Segment::Group(g) = &p.backward.segments[1] else {
            panic!("a group")
        };
        assert_eq!(g.layers, [2]);
        assert_eq!(
            g.signature,
            Signature {
                run: gdn,
                weights: WeightSource::Carried,
                prefetch: Some(gdn),
                pending_grad: Some(attention),
                own_grad: OwnGradient::Deferred,
            }
        );
        assert_eq!(p.forward.prologue_gather(), Some(0));
        assert_eq!(p.backward.prologue_gather(), Some(3));
        assert_eq!(p.forward.epilogue_scatter(), None);
        assert_eq!(p.backward.epilogue_scatter(), Some(0));
        let p = Plan::new(&s, PlanOptions::prefetch()).unwrap();
        assert_eq!(p.backward.epilogue_scatter(), None);
        let p = Plan::new(&s, PlanOptions::baseline()).unwrap();
        assert_eq!(p.forward.prologue_gather(), None);
        assert_eq!(p.backward.prologue_gather(), None);
        // Blocks: the last step is in the block loop's last trip.
        let s = Stack::blocks(&["GDN", "attention"], 3).unwrap();
        let p = Plan::new(&s, PlanOptions::prefetch_deferred()).unwrap();
        assert_eq!(p.forward.prologue_gather(), Some(0));
        assert_eq!(p.backward.prologue_gather(), Some(5));
        assert_eq!(p.backward.epilogue_scatter(), Some(0));
    }

    #[test]
    fn invalid_options_are_rejected() {
        let s = Stack::homogeneous("L", 2).unwrap();
        let bad = PlanOptions {
            defer_grad_reduce_scatter: true,
            ..PlanOptions::baseline()
        };
        assert!(Plan::new(&s, bad).is_err());
        assert!(Plan::new(&s, PlanOptions::prefetch().with_unroll(3)).is_err());
    }

    #[test]
    fn prefetch_issue_is_resolved_only_when_left_to_the_backend() {
        use PrefetchIssue::*;
        assert_eq!(PlanOptions::prefetch_deferred().prefetch_issue, Auto);
        assert_eq!(Auto.resolve(true), AfterCompute);
        assert_eq!(Auto.resolve(false), WithInput);
        for chosen in [WithInput, AfterCompute] {
            assert_eq!(chosen.resolve(true), chosen);
            assert_eq!(chosen.resolve(false), chosen);
        }
        let names: Vec<String> = PrefetchIssue::ALL.map(|i| i.to_string()).into();
        assert_eq!(names, ["auto", "with-input", "after-compute"]);
        for issue in PrefetchIssue::ALL {
            assert_eq!(issue.to_string().parse::<PrefetchIssue>().unwrap(), issue);
        }
        assert!("late".parse::<PrefetchIssue>().is_err());
    }
}
