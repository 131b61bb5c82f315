//! `timeline --compiled`: a report's schedule, simulated from the plan and replayed as libtpu
//! scheduled it ([`super::compiled`]), drawn side by side and summed up.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use stackscan::Result;
use stackscan::cost::Accounting;
use stackscan::fsdp::StackModel;
use stackscan::plan::PlanOptions;
use stackscan::sim::draw::render;

use super::compiled::{CompiledPass, CompiledReport};
use crate::hardware::Hardware;
use crate::predict::{Prediction, predict};

/// One `--compiled` report: its schedule simulated, and replayed as libtpu scheduled it.
#[derive(Clone, Debug)]
pub struct CompiledSummary {
    /// `off` or `on` (prefetch, with or without deferral as the report's options say).
    pub schedule: String,
    /// The topology it was compiled for.
    pub topology: String,
    /// The simulated prediction of its schedule.
    pub simulated: Prediction,
    /// The forward pass replayed as compiled.
    pub forward: CompiledPass,
    /// The backward pass replayed as compiled.
    pub backward: CompiledPass,
}

impl CompiledSummary {
    /// The step as compiled: both passes replayed, and the simulation's outer parts.
    pub fn step_seconds(&self) -> f64 {
        self.forward.timeline.total + self.backward.timeline.total + self.simulated.outer
    }
}

/// The schedule of the report at `path` (of `args`' model on `devices` devices, each one
/// `hw`), simulated and replayed as compiled, under the report's options over `base`; writes
/// each pass's two timelines under `args.out` and returns them with the files.
pub(super) fn compare(
    path: &Path,
    args: &super::TimelineArgs,
    model: &StackModel,
    hw: &Hardware,
    devices: usize,
    accounting: &[Accounting],
    base: PlanOptions,
) -> Result<(CompiledSummary, Vec<PathBuf>)> {
    let report = CompiledReport::read(path)?;
    let mut files = Vec::new();
    if report.model != args.model() || report.devices != devices {
        return Err(super::invalid(format!(
            "`{}` is a report of `{}` on {} devices; this timeline is `{}` on {devices}",
            path.display(),
            report.model,
            report.devices,
            args.model()
        )));
    }
    let o = report.plan_options(base)?;
    let simulated = predict(model, o, hw, devices, accounting)?;
    let times = crate::predict::kind_times(model, o, hw, devices, accounting)?;
    let plan = stackscan::plan::Plan::new(&model.stack, o)?;
    let sim = hw.sim_options();
    let forward = super::compiled::replay(
        &plan.forward,
        model,
        &times,
        sim,
        &report,
        &simulated.forward,
    )?;
    let backward = super::compiled::replay(
        &plan.backward,
        model,
        &times,
        sim,
        &report,
        &simulated.backward,
    )?;
    let schedule = if o.prefetch_fsdp_weights { "on" } else { "off" };
    for (pass, a, b) in [
        ("forward", &simulated.forward, &forward.timeline),
        ("backward", &simulated.backward, &backward.timeline),
    ] {
        let title = format!(
            "{} on {} × {}: {pass}, prefetch {schedule}",
            args.model(),
            args.chips,
            args.hardware
        );
        let doc = render(
            &title,
            &[
                ("simulated from the plan", a),
                (
                    &format!("as libtpu scheduled it for {}", report.tpu.topology),
                    b,
                ),
            ],
        );
        let path = args.out.join(format!("{pass}-compiled-{schedule}.svg"));
        std::fs::write(&path, doc).map_err(|e| super::io(&path, e))?;
        files.push(path);
    }
    let summary = CompiledSummary {
        schedule: schedule.to_owned(),
        topology: report.tpu.topology.clone(),
        simulated,
        forward,
        backward,
    };
    Ok((summary, files))
}

/// Its step both ways, and each loop whose replayed time differs from the simulation's.
pub(super) fn write_summary(
    c: &CompiledSummary,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    writeln!(
        out,
        "  prefetch {} as libtpu scheduled it for {}: step {:.2} ms (simulated {:.2}); forward {:.2} ms (exposed {:.2}), backward {:.2} ms (exposed {:.2})",
        c.schedule,
        c.topology,
        c.step_seconds() * 1e3,
        c.simulated.step_seconds() * 1e3,
        c.forward.timeline.total * 1e3,
        c.forward.timeline.exposed_communication * 1e3,
        c.backward.timeline.total * 1e3,
        c.backward.timeline.exposed_communication * 1e3,
    )?;
    for l in c.forward.loops.iter().chain(&c.backward.loops) {
        // Where the compiled schedule and the plan's differ by more than a hundredth.
        if (l.compiled - l.simulated).abs() > 0.01 * l.simulated.max(f64::MIN_POSITIVE) {
            writeln!(
                out,
                "    {} ({} trip{}): {:.3} ms compiled, {:.3} simulated; {} of its {} collectives unhidden",
                l.label,
                l.trips,
                if l.trips == 1 { "" } else { "s" },
                l.compiled * 1e3,
                l.simulated * 1e3,
                l.unhidden.0,
                l.unhidden.1
            )?;
        }
    }
    Ok(())
}

pub(super) fn compiled_json(c: &CompiledSummary) -> Value {
    let loops = |p: &CompiledPass| -> Vec<Value> {
        p.loops
            .iter()
            .map(|l| {
                json!({
                    "label": l.label,
                    "trips": l.trips,
                    "simulated_seconds": l.simulated,
                    "compiled_seconds": l.compiled,
                    "unhidden_collectives": l.unhidden.0,
                    "collectives": l.unhidden.1,
                })
            })
            .collect()
    };
    json!({
        "schedule": c.schedule,
        "topology": c.topology,
        "step_seconds": c.step_seconds(),
        "simulated": super::prediction_json(&c.simulated),
        "forward": super::timeline_json(&c.forward.timeline),
        "backward": super::timeline_json(&c.backward.timeline),
        "forward_loops": loops(&c.forward),
        "backward_loops": loops(&c.backward),
    })
}
