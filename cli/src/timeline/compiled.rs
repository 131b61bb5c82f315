//! `timeline --compiled`: a pass replayed in the order the TPU compiler scheduled it. The
//! simulator ([`stackscan::sim`]) places each step's gathers and reduce-scatters by the
//! plan's rules; here every loop body runs as `compile-report --topology --json` read it from
//! libtpu's program (its products, and each gather's and reduce-scatter's start and done in
//! the body's schedule), with the same per-op costs. Where the compiler starts a collective
//! late, runs it synchronously or leaves it out of a loop, the replay says so in time.
//!
//! Within one trip of a loop body the replay walks the schedule's positions: a product
//! advances the compute lane by its share of the trip's layers' compute; a collective's start
//! places it on its lane (gathers on the FSDP lane, reduce-scatters where the profile puts
//! them) with its share of the trip's collective time, by the bytes it writes; its done makes the compute lane wait
//! for it. A trip ends when everything it started has ended, as a loop iteration does. An
//! expert-parallel layer's token exchanges, which the schedule's windows do not cover, run
//! before the trip's products, which wait for them.

use std::path::Path;

use serde::Deserialize;
use stackscan::fsdp::{ODD_FIRST_STEP, StackModel, group_label};
use stackscan::plan::{Direction, Group, LoopForm, Pass, PlanOptions, Segment, Stack};
use stackscan::sim::{Bar, KindTimes, Lane, OpKind, SimOptions, StepSpan, Timeline};
use stackscan::{Error, Precision, Result};

/// What `compile-report --topology … --json` wrote, as far as the replay reads it.
#[derive(Clone, Debug, Deserialize)]
pub struct CompiledReport {
    /// The model's name.
    pub model: String,
    /// Devices the step was compiled for.
    pub devices: usize,
    /// The plan options it was lowered under (`prefetch_fsdp_weights=true, …`).
    pub options: String,
    /// The TPU side.
    pub tpu: CompiledTpu,
}

/// The TPU side of a report.
#[derive(Clone, Debug, Deserialize)]
pub struct CompiledTpu {
    /// The topology (`tpu7x:4x4x4`).
    pub topology: String,
    /// Each loop of the compiled program.
    pub loops: Vec<CompiledLoop>,
    /// libtpu's refusal where the step did not fit: no program, no loops.
    pub out_of_memory: Option<String>,
}

/// One loop of the compiled program.
#[derive(Clone, Debug, Deserialize)]
pub struct CompiledLoop {
    /// stackscan's label ([`group_label`]).
    pub label: String,
    /// Positions of the body's own products in its schedule.
    pub product_positions: Vec<usize>,
    /// Instructions in the body's schedule.
    pub scheduled: usize,
    /// Its gathers (and the all-reduces that stand for them).
    pub gathers: Windows,
    /// Its reduce-scatters (and the all-reduces that stand for them).
    pub scatters: Windows,
}

/// Collectives of one kind in a loop body.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Windows {
    /// Each one's start and done, as positions in the body's schedule (equal for one that
    /// runs synchronously).
    pub windows: Vec<(usize, usize)>,
    /// The bytes each writes, in the same order (absent in older reports).
    #[serde(default)]
    pub bytes: Vec<u64>,
}

impl Windows {
    /// Each collective's share of the work they do together: by the bytes each writes where
    /// the report has them, else equal.
    fn shares(&self) -> Vec<f64> {
        let n = self.windows.len();
        let total: u64 = self.bytes.iter().sum();
        if self.bytes.len() == n && total > 0 {
            self.bytes
                .iter()
                .map(|&b| b as f64 / total as f64)
                .collect()
        } else {
            vec![1.0 / n.max(1) as f64; n]
        }
    }
}

fn invalid(message: impl Into<String>) -> Error {
    Error::InvalidOp {
        op: "timeline --compiled",
        message: message.into(),
    }
}

impl CompiledReport {
    /// Reads a report file.
    pub fn read(path: &Path) -> Result<CompiledReport> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| invalid(format!("cannot read `{}`: {e}", path.display())))?;
        let report: CompiledReport = serde_json::from_str(&text).map_err(|e| {
            invalid(format!(
                "`{}` is not a `compile-report --topology NAME --json` report: {e}",
                path.display()
            ))
        })?;
        if let Some(why) = &report.tpu.out_of_memory {
            return Err(invalid(format!(
                "`{}` holds no program: the step did not fit {} ({why})",
                path.display(),
                report.tpu.topology
            )));
        }
        Ok(report)
    }

    /// The options the step was lowered under, over `base` (the model's): prefetch,
    /// deferral, unroll and precision as the report names them.
    pub fn plan_options(&self, base: PlanOptions) -> Result<PlanOptions> {
        let mut o = base;
        for (key, value) in self
            .options
            .split(',')
            .filter_map(|kv| kv.trim().split_once('='))
        {
            let flag = || match value {
                "true" => Ok(true),
                "false" => Ok(false),
                other => Err(invalid(format!(
                    "option `{key}={other}` is not true or false"
                ))),
            };
            match key {
                "prefetch_fsdp_weights" => o.prefetch_fsdp_weights = flag()?,
                "defer_grad_reduce_scatter" => o.defer_grad_reduce_scatter = flag()?,
                "unroll" => {
                    o =
                        o.with_unroll(value.parse().map_err(|_| {
                            invalid(format!("option `unroll={value}` is not a count"))
                        })?)
                }
                "precision" => {
                    o = o.with_precision(
                        value
                            .parse::<Precision>()
                            .map_err(|e| invalid(format!("option `precision={value}`: {e}")))?,
                    )
                }
                _ => {}
            }
        }
        Ok(o)
    }
}

/// The loop of `loops` labelled `label`.
fn loop_named<'l>(loops: &'l [CompiledLoop], label: &str) -> Result<&'l CompiledLoop> {
    loops.iter().find(|l| l.label == label).ok_or_else(|| {
        invalid(format!(
            "the compiled program has no loop `{label}`: was the report compiled from this \
             model, config and schedule?"
        ))
    })
}

/// Where a step of a pass runs: its loop's label, and whether it starts a trip of it.
struct Place {
    label: String,
    trip_start: bool,
}

/// One [`Place`] per step of `pass`, in [`Pass::steps`]' order, its loops labelled as the
/// lowering labels them (`kind` names a kind).
fn places(pass: &Pass, name: &str, kind: &dyn Fn(usize) -> String) -> Result<Vec<Place>> {
    let mut out = Vec::new();
    let mut group = |g: &Group| -> Result<()> {
        let label = group_label(name, g, &kind(g.signature.run));
        let place = |label: &str, trip_start| Place {
            label: label.to_owned(),
            trip_start,
        };
        match g.form {
            LoopForm::Peeled => out.push(place(&label, true)),
            LoopForm::Simple { trips } => {
                out.extend((0..trips).map(|_| place(&label, true)));
            }
            LoopForm::PingPong { trips, peel_first } => {
                if peel_first {
                    out.push(place(&format!("{label}{ODD_FIRST_STEP}"), true));
                }
                for _ in 0..trips {
                    out.push(place(&label, true));
                    out.push(place(&label, false));
                }
            }
            other => {
                return Err(invalid(format!(
                    "a loop form the replay does not know: {other:?}"
                )));
            }
        }
        Ok(())
    };
    for s in &pass.segments {
        match s {
            Segment::Group(g) => group(g)?,
            Segment::Blocks { trips, groups, .. } => {
                for _ in 0..*trips {
                    for g in groups {
                        group(g)?;
                    }
                }
            }
            other => {
                return Err(invalid(format!(
                    "a segment the replay does not know: {other:?}"
                )));
            }
        }
    }
    Ok(out)
}

/// One loop's time in a pass, replayed both ways.
#[derive(Clone, Debug, PartialEq)]
pub struct LoopComparison {
    /// Its label.
    pub label: String,
    /// Trips of its body the pass runs.
    pub trips: usize,
    /// Seconds its steps take in the simulated timeline.
    pub simulated: f64,
    /// Seconds its trips take replayed as compiled.
    pub compiled: f64,
    /// Of its body's collectives, those the compiled schedule runs synchronously or across
    /// no product (so nothing hides them), and how many it has.
    pub unhidden: (usize, usize),
}

/// A pass replayed as compiled, and each loop's time beside the simulation's.
#[derive(Clone, Debug)]
pub struct CompiledPass {
    /// The replay.
    pub timeline: Timeline,
    /// Every loop the pass runs, in order of first run.
    pub loops: Vec<LoopComparison>,
}

/// The replay's state: the bars placed, each lane's next free time.
#[derive(Default)]
struct Lanes {
    bars: Vec<Bar>,
    free: [f64; Lane::ALL.len()],
}

impl Lanes {
    /// Places `duration` of `op` on `lane` from `ready` (or when the lane frees); its end.
    fn place(&mut self, lane: Lane, op: OpKind, step: (usize, usize), ready: f64, d: f64) -> f64 {
        let slot = &mut self.free[lane as usize];
        let start = slot.max(ready);
        let end = start + d;
        *slot = end;
        // A stretch of one step's products is one bar, as the simulator draws a layer.
        let last = self.bars.iter_mut().rev().find(|b| b.lane == lane);
        if let Some(b) = last
            && b.op == op
            && b.step == step.0
            && b.end == start
            && op != OpKind::Gather
            && op != OpKind::ReduceScatter
        {
            b.end = end;
        } else if d > 0.0 {
            self.bars.push(Bar {
                lane,
                op,
                layer: step.1,
                step: step.0,
                start,
                end,
            });
        }
        end
    }
}

/// An event of a trip's schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// A collective starts: (gather or scatter, its index).
    Start(bool, usize),
    /// A product runs.
    Product(usize),
    /// A collective is waited for.
    Done(bool, usize),
}

/// Replays `pass` of `model`'s plan (`simulated` is its simulated timeline) as the loops of
/// `report` schedule it, with `times[k]` the costs of kind `k`.
pub fn replay(
    pass: &Pass,
    model: &StackModel,
    times: &[KindTimes],
    sim: SimOptions,
    report: &CompiledReport,
    simulated: &Timeline,
) -> Result<CompiledPass> {
    let names: Vec<String> = model.kinds.iter().map(|k| k.name.clone()).collect();
    replay_stack(
        pass,
        &model.stack,
        &names,
        times,
        sim,
        &report.tpu.loops,
        simulated,
    )
}

/// [`replay`] over `stack`, whose kind `k` is named `names[k]`, with the compiled `loops`.
fn replay_stack(
    pass: &Pass,
    stack: &Stack,
    names: &[String],
    times: &[KindTimes],
    sim: SimOptions,
    loops_compiled: &[CompiledLoop],
    simulated: &Timeline,
) -> Result<CompiledPass> {
    if times.len() < stack.num_kinds() || names.len() < stack.num_kinds() {
        return Err(invalid("internal: a kind without its times or name"));
    }
    let (name, compute_op) = match pass.direction {
        Direction::Forward => ("forward", OpKind::Forward),
        Direction::Backward => ("backward", OpKind::Vjp),
        other => {
            return Err(invalid(format!(
                "a pass the replay does not know: {other:?}"
            )));
        }
    };
    let kind_name = |k: usize| names[k].clone();
    let steps = pass.steps();
    let places = places(pass, name, &kind_name)?;
    if places.len() != steps.len() {
        return Err(invalid("internal: the pass's loops do not cover its steps"));
    }
    let time = |layer: usize| times[stack.kind_of(layer)];
    let mut lanes = Lanes::default();
    let mut spans = Vec::with_capacity(steps.len());
    let mut loops: Vec<LoopComparison> = Vec::new();
    let mut barrier = 0.0f64;
    // The prologue gather (the first step's own, when it runs on carried weights) is issued
    // before the first loop and waited for; without prefetch the first step gathers its own
    // layer in its loop body, like every other step.
    let prologue = pass.prologue_gather();
    if let Some(layer) = prologue {
        barrier = lanes.place(
            sim.gather_lane,
            OpKind::Gather,
            (0, layer),
            0.0,
            time(layer).gather,
        );
    }
    // The epilogue reduce-scatter (the last step's own deferred gradient) is issued after the
    // last loop, outside every body.
    let epilogue = pass.epilogue_scatter();
    let last = steps.len().saturating_sub(1);
    let mut pos = 0;
    while pos < steps.len() {
        let mut end = pos + 1;
        while end < steps.len() && !places[end].trip_start {
            end += 1;
        }
        let body = loop_named(loops_compiled, &places[pos].label)?;
        let trip: Vec<usize> = (pos..end).collect();
        let (compute, exchange) = trip
            .iter()
            .map(|&i| {
                let t = time(steps[i].layer);
                match compute_op {
                    OpKind::Forward => (t.forward, t.exchange_forward),
                    _ => (t.backward, t.exchange_backward),
                }
            })
            .fold((0.0, 0.0), |(c, x), (dc, dx)| (c + dc, x + dx));
        // The layers' token exchanges (expert parallelism), which the layers wait for.
        let start = match exchange > 0.0 {
            true => lanes.place(
                Lane::Second,
                OpKind::AllToAll,
                (pos, steps[pos].layer),
                barrier,
                exchange,
            ),
            false => barrier,
        };
        let gather: f64 = trip
            .iter()
            .flat_map(|&i| steps[i].gathers.iter().map(move |&g| (i, g)))
            .filter(|&(i, g)| !(i == 0 && Some(g) == prologue))
            .map(|(_, g)| time(g).gather)
            .sum();
        let scatter: f64 = trip
            .iter()
            .flat_map(|&i| steps[i].reduce_scatters.iter().map(move |&g| (i, g)))
            .filter(|&(i, g)| !(i == last && Some(g) == epilogue))
            .map(|(_, g)| time(g).reduce_scatter)
            .sum();
        // The first loop's time counts the gather issued before it.
        let counted = if pos == 0 { 0.0 } else { barrier };
        barrier = run_trip(
            &mut lanes,
            body,
            &trip,
            |i| steps[i].layer,
            (compute, gather, scatter),
            (compute_op, sim),
            start,
        );
        for &i in &trip {
            spans.push(StepSpan {
                layer: steps[i].layer,
                start,
                end: barrier,
            });
        }
        let simulated_time: f64 = trip
            .iter()
            .filter_map(|&i| simulated.steps.get(i))
            .map(|s| s.end - s.start)
            .sum();
        match loops.iter_mut().find(|l| l.label == body.label) {
            Some(l) => {
                l.trips += 1;
                l.simulated += simulated_time;
                l.compiled += barrier - counted;
            }
            None => loops.push(LoopComparison {
                label: body.label.clone(),
                trips: 1,
                simulated: simulated_time,
                compiled: barrier - counted,
                unhidden: unhidden(body),
            }),
        }
        pos = end;
    }
    if let Some(layer) = epilogue {
        lanes.place(
            sim.reduce_scatter_lane,
            OpKind::ReduceScatter,
            (last, layer),
            barrier,
            time(layer).reduce_scatter,
        );
    }
    let total = lanes.bars.iter().map(|b| b.end).fold(barrier, f64::max);
    let compute: f64 = lanes
        .bars
        .iter()
        .filter(|b| b.op == compute_op)
        .map(|b| b.end - b.start)
        .sum();
    Ok(CompiledPass {
        timeline: Timeline {
            bars: lanes.bars,
            steps: spans,
            total,
            compute,
            exposed_communication: total - compute,
        },
        loops,
    })
}

/// The collectives of `body` that run synchronously or span no product, and all of them.
fn unhidden(body: &CompiledLoop) -> (usize, usize) {
    let all: Vec<&(usize, usize)> = body
        .gathers
        .windows
        .iter()
        .chain(&body.scatters.windows)
        .collect();
    let hidden = all
        .iter()
        .filter(|(s, d)| body.product_positions.iter().any(|p| p > s && p < d))
        .count();
    (all.len() - hidden, all.len())
}

/// One trip of `body` running the steps `trip` (`layer_of` a step's layer) from `start`:
/// `work` is the trip's compute, gather and reduce-scatter seconds. Returns when the trip's
/// last op ends.
fn run_trip(
    lanes: &mut Lanes,
    body: &CompiledLoop,
    trip: &[usize],
    layer_of: impl Fn(usize) -> usize,
    work: (f64, f64, f64),
    (compute_op, sim): (OpKind, SimOptions),
    start: f64,
) -> f64 {
    let (compute, gather, scatter) = work;
    // A body whose products all sit in loops of its own (none listed) computes mid-body.
    let products = match body.product_positions.is_empty() {
        true => vec![body.scheduled / 2],
        false => body.product_positions.clone(),
    };
    let mut events: Vec<(usize, Event)> = products
        .iter()
        .enumerate()
        .map(|(n, &p)| (p, Event::Product(n)))
        .collect();
    for (is_gather, w) in [(true, &body.gathers), (false, &body.scatters)] {
        for (n, &(s, d)) in w.windows.iter().enumerate() {
            events.push((s, Event::Start(is_gather, n)));
            events.push((d, Event::Done(is_gather, n)));
        }
    }
    events.sort();
    // Work the body has no collective for is waited for at the trip's start.
    let mut clock = start;
    let owner = |n: usize, of: usize| trip[(n * trip.len() / of.max(1)).min(trip.len() - 1)];
    let first = (trip[0], layer_of(trip[0]));
    for (missing, lane, op, d) in [
        (
            body.gathers.windows.is_empty(),
            sim.gather_lane,
            OpKind::Gather,
            gather,
        ),
        (
            body.scatters.windows.is_empty(),
            sim.reduce_scatter_lane,
            OpKind::ReduceScatter,
            scatter,
        ),
    ] {
        if missing && d > 0.0 {
            clock = lanes.place(lane, op, first, clock, d);
        }
    }
    let gather_shares = body.gathers.shares();
    let scatter_shares = body.scatters.shares();
    let per_product = compute / products.len() as f64;
    let mut ends = [
        vec![start; body.gathers.windows.len()],
        vec![start; body.scatters.windows.len()],
    ];
    for (_, event) in events {
        match event {
            Event::Product(n) => {
                let i = owner(n, products.len());
                clock = lanes.place(
                    Lane::Compute,
                    compute_op,
                    (i, layer_of(i)),
                    clock,
                    per_product,
                );
            }
            Event::Start(is_gather, n) => {
                let (lane, op, d, of) = match is_gather {
                    true => (
                        sim.gather_lane,
                        OpKind::Gather,
                        gather * gather_shares[n],
                        body.gathers.windows.len(),
                    ),
                    false => (
                        sim.reduce_scatter_lane,
                        OpKind::ReduceScatter,
                        scatter * scatter_shares[n],
                        body.scatters.windows.len(),
                    ),
                };
                let i = owner(n, of);
                ends[usize::from(!is_gather)][n] =
                    lanes.place(lane, op, (i, layer_of(i)), clock, d);
            }
            Event::Done(is_gather, n) => clock = clock.max(ends[usize::from(!is_gather)][n]),
        }
    }
    ends.iter().flatten().fold(clock, |a, &b| a.max(b))
}

#[cfg(test)]
mod tests;
