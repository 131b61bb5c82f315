//! The replay itself: steps in order, each op placed at the earliest time its lane, its
//! inputs, its buffers and its trip's barrier allow.

use super::{Bar, KindTimes, Lane, OpKind, SimOptions, StepSpan, Timeline};
use crate::error::{Error, Result};
use crate::plan::{Direction, Group, LoopForm, Pass, Segment, Stack};

/// Replays `pass` of a plan of `stack`, with `times[k]` the times of kind `k`.
///
/// Errors when `times` has fewer entries than `stack` has kinds, when a time is negative or
/// not finite, or when the pass names a layer `stack` does not have.
///
/// ```
/// use stackscan::plan::{Plan, PlanOptions, Stack};
/// use stackscan::sim::{KindTimes, SimOptions, simulate};
/// let stack = Stack::homogeneous("L", 3)?;
/// let plan = Plan::new(&stack, PlanOptions::baseline())?;
/// let t = KindTimes { forward: 10.0, backward: 20.0, gather: 4.0, reduce_scatter: 6.0, ..KindTimes::default() };
/// let fwd = simulate(&plan.forward, &stack, &[t], SimOptions::default())?;
/// // Without prefetch every gather is exposed: 3 × (4 + 10).
/// assert_eq!(fwd.total, 42.0);
/// assert_eq!(fwd.exposed_communication, 12.0);
/// # Ok::<(), stackscan::Error>(())
/// ```
pub fn simulate(
    pass: &Pass,
    stack: &Stack,
    times: &[KindTimes],
    options: SimOptions,
) -> Result<Timeline> {
    check_times(stack, times)?;
    let steps = pass.steps();
    if let Some(s) = steps.iter().find(|s| s.layer >= stack.len()) {
        return Err(Error::invalid(
            "simulate",
            format!(
                "the pass runs layer {} of a {}-layer stack",
                s.layer,
                stack.len()
            ),
        ));
    }
    let trip_starts = trip_starts(pass, steps.len());
    let time = |layer: usize| times[stack.kind_of(layer)];
    let compute_op = match pass.direction {
        Direction::Forward => OpKind::Forward,
        Direction::Backward => OpKind::Vjp,
    };
    let mut r = Replay::default();
    // End of each layer's gather, and of the vjp that produced each layer's gradient.
    let mut gathered = vec![None::<f64>; stack.len()];
    let mut computed = vec![None::<f64>; stack.len()];
    let mut barrier = 0.0f64;
    let mut trip_end = 0.0f64;
    let mut last_compute_end = 0.0f64;
    let mut pending_rs_end = 0.0f64;
    for (pos, step) in steps.iter().enumerate() {
        if trip_starts[pos] {
            barrier = barrier.max(trip_end);
        }
        let start = barrier.max(last_compute_end).max(pending_rs_end);
        let first_bar = r.bars.len();
        let l = step.layer;
        // The gradient carried in from the previous step is reduced first.
        let own_scattered = step.reduce_scatters.contains(&l);
        for &g in step.reduce_scatters.iter().filter(|&&g| g != l) {
            let ready = computed[g].unwrap_or(start).max(start);
            let d = time(g).reduce_scatter;
            let end = r.place(
                options.reduce_scatter_lane,
                OpKind::ReduceScatter,
                g,
                pos,
                ready,
                d,
            );
            pending_rs_end = end;
        }
        for &g in &step.gathers {
            gathered[g] = Some(r.place(
                options.gather_lane,
                OpKind::Gather,
                g,
                pos,
                start,
                time(g).gather,
            ));
        }
        let ready = gathered[l].unwrap_or(start).max(start);
        let (d, exchange) = match compute_op {
            OpKind::Forward => (time(l).forward, time(l).exchange_forward),
            _ => (time(l).backward, time(l).exchange_backward),
        };
        let end = if exchange > 0.0 {
            // The layer's first half, its token exchange on the second lane, its second half.
            let half = r.place(Lane::Compute, compute_op, l, pos, ready, d / 2.0);
            let tokens = r.place(Lane::Second, OpKind::AllToAll, l, pos, half, exchange);
            r.place(Lane::Compute, compute_op, l, pos, tokens, d / 2.0)
        } else {
            r.place(Lane::Compute, compute_op, l, pos, ready, d)
        };
        // What the step hands to the next: the weights it prefetched and, deferring, its own
        // gradient, each copied where the profile says the compiler copies loop carries.
        let mut end = end;
        let carried = step.gathers.iter().copied().filter(|&g| g != l);
        let pending = (compute_op == OpKind::Vjp && !own_scattered).then_some(l);
        for c in carried.chain(pending) {
            let d = time(c).carry_copy;
            if d > 0.0 {
                end = r.place(Lane::Compute, OpKind::CarryCopy, c, pos, end, d);
            }
        }
        computed[l] = Some(end);
        last_compute_end = end;
        if own_scattered {
            let d = time(l).reduce_scatter;
            r.place(
                options.reduce_scatter_lane,
                OpKind::ReduceScatter,
                l,
                pos,
                end,
                d,
            );
        }
        let step_end = r.bars[first_bar..]
            .iter()
            .map(|b| b.end)
            .fold(start, f64::max);
        trip_end = trip_end.max(step_end);
        r.steps.push(StepSpan {
            layer: l,
            start,
            end: step_end,
        });
    }
    Ok(r.finish())
}

fn check_times(stack: &Stack, times: &[KindTimes]) -> Result<()> {
    if times.len() < stack.num_kinds() {
        return Err(Error::invalid(
            "simulate",
            format!(
                "{} kinds need times but {} were given",
                stack.num_kinds(),
                times.len()
            ),
        ));
    }
    for (k, t) in times.iter().enumerate().take(stack.num_kinds()) {
        let fields = [
            ("forward", t.forward),
            ("backward", t.backward),
            ("gather", t.gather),
            ("reduce_scatter", t.reduce_scatter),
            ("exchange_forward", t.exchange_forward),
            ("exchange_backward", t.exchange_backward),
            ("carry_copy", t.carry_copy),
        ];
        if let Some((name, v)) = fields.iter().find(|(_, v)| !(v.is_finite() && *v >= 0.0)) {
            return Err(Error::invalid(
                "simulate",
                format!(
                    "kind `{}`: `{name}` time {v} is not a finite, non-negative number of seconds",
                    stack.kind_name(k)
                ),
            ));
        }
    }
    Ok(())
}

/// Whether each step of the pass begins a loop trip: every step of a peeled or simple loop,
/// every other step of a ping-pong loop (after its peeled odd step).
fn trip_starts(pass: &Pass, steps: usize) -> Vec<bool> {
    fn group(g: &Group, out: &mut Vec<bool>) {
        match g.form {
            LoopForm::Peeled => out.push(true),
            LoopForm::Simple { trips } => out.extend(std::iter::repeat_n(true, trips)),
            LoopForm::PingPong { trips, peel_first } => {
                if peel_first {
                    out.push(true);
                }
                for _ in 0..trips {
                    out.extend([true, false]);
                }
            }
        }
    }
    let mut out = Vec::with_capacity(steps);
    for s in &pass.segments {
        match s {
            Segment::Group(g) => group(g, &mut out),
            Segment::Blocks { trips, groups, .. } => {
                for _ in 0..*trips {
                    for g in groups {
                        group(g, &mut out);
                    }
                }
            }
        }
    }
    debug_assert_eq!(out.len(), steps, "trips cover every step");
    out.resize(steps, true);
    out
}

#[derive(Default)]
struct Replay {
    bars: Vec<Bar>,
    steps: Vec<StepSpan>,
    free: [f64; Lane::ALL.len()],
}

impl Replay {
    /// Places an op of `duration` on `lane` no earlier than `ready`; returns its end.
    fn place(
        &mut self,
        lane: Lane,
        op: OpKind,
        layer: usize,
        step: usize,
        ready: f64,
        duration: f64,
    ) -> f64 {
        let slot = &mut self.free[lane as usize];
        let start = slot.max(ready);
        let end = start + duration;
        *slot = end;
        self.bars.push(Bar {
            lane,
            op,
            layer,
            step,
            start,
            end,
        });
        end
    }

    fn finish(self) -> Timeline {
        let total = self.bars.iter().map(|b| b.end).fold(0.0, f64::max);
        let compute: f64 = self
            .bars
            .iter()
            .filter(|b| matches!(b.op, OpKind::Forward | OpKind::Vjp | OpKind::CarryCopy))
            .map(|b| b.end - b.start)
            .sum();
        Timeline {
            bars: self.bars,
            steps: self.steps,
            total,
            compute,
            exposed_communication: (total - compute).max(0.0),
        }
    }
}
