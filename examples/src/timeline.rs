//! The `timeline` command: predicts a model's training step on a hardware profile and writes
//! the forward and backward timelines (prefetch off vs on with deferred reduce-scatter) as
//! SVG, and the replayed schedule as JSON; [`TimelineArgs`] is the CLI's `timeline`
//! subcommand.

use std::path::PathBuf;

use serde_json::{Value, json};
use stackscan::plan::PlanOptions;
use stackscan::sim::draw::{lane_name, render};
use stackscan::sim::{OpKind, Timeline};
use stackscan::{Error, Result};

use crate::hardware::Hardware;
use crate::llama::{self, LlamaConfig};
use crate::predict::{Prediction, predict};

/// Arguments of `timeline`.
#[derive(Clone, Debug, clap::Parser)]
#[command(about = "Predict a training step and draw its timelines")]
pub struct TimelineArgs {
    /// Model: `llama3-8b` (full size), `llama-tiny` (the design's tiny Llama).
    #[arg(long)]
    pub model: String,
    /// Hardware: `tpu7x`, `tpu-v5p`, `h200`, or a profile TOML file.
    #[arg(long, default_value = "tpu7x")]
    pub hardware: String,
    /// Chips on the FSDP axis.
    #[arg(long, default_value_t = 64)]
    pub chips: usize,
    /// Expert-parallel degree (needs an MoE model; none exists yet).
    #[arg(long)]
    pub ep: Option<usize>,
    /// Directory for the SVGs and `schedule.json`.
    #[arg(long, default_value = "timelines")]
    pub out: PathBuf,
}

/// What `timeline` predicted.
#[derive(Clone, Debug)]
pub struct Summary {
    /// Prefetch off.
    pub off: Prediction,
    /// Prefetch on, deferred reduce-scatter.
    pub on: Prediction,
    /// Files written.
    pub files: Vec<PathBuf>,
}

fn invalid(message: impl Into<String>) -> Error {
    Error::InvalidOp {
        op: "timeline",
        message: message.into(),
    }
}

/// The model named on the command line.
pub fn model_by_name(name: &str) -> Result<stackscan::fsdp::StackModel> {
    match name {
        "llama3-8b" => llama::model(&LlamaConfig::llama3_8b()),
        "llama-tiny" => llama::model(&LlamaConfig::tiny()),
        other => Err(invalid(format!(
            "unknown model `{other}` (known: llama3-8b, llama-tiny)"
        ))),
    }
}

/// Runs `timeline`.
pub fn run(args: &TimelineArgs) -> Result<Summary> {
    if args.chips == 0 {
        return Err(invalid("`--chips` must be at least 1"));
    }
    if let Some(ep) = args.ep {
        return Err(invalid(format!(
            "`--ep {ep}`: expert parallelism needs an MoE model, and `{}` has no experts",
            args.model
        )));
    }
    let model = model_by_name(&args.model)?;
    let hw = Hardware::load(&args.hardware)?;
    let off = predict(&model, PlanOptions::baseline(), &hw, args.chips, &[], true)?;
    let on = predict(
        &model,
        PlanOptions::prefetch_deferred(),
        &hw,
        args.chips,
        &[],
        true,
    )?;
    std::fs::create_dir_all(&args.out).map_err(|e| io(&args.out, e))?;
    let mut files = Vec::new();
    for (pass, a, b) in [
        ("forward", &off.forward, &on.forward),
        ("backward", &off.backward, &on.backward),
    ] {
        let title = format!("{} on {} × {}: {pass}", args.model, args.chips, hw.name);
        let doc = render(
            &title,
            &[
                ("prefetch off", a),
                ("prefetch on, deferred reduce-scatter", b),
            ],
        );
        let path = args.out.join(format!("{pass}.svg"));
        std::fs::write(&path, doc).map_err(|e| io(&path, e))?;
        files.push(path);
    }
    let schedule = json!({
        "model": args.model,
        "hardware": hw.name,
        "chips": args.chips,
        "assumptions": "f32 priced as bf16; outer layers and optimizer left out",
        "off": prediction_json(&off),
        "on": prediction_json(&on),
    });
    let path = args.out.join("schedule.json");
    let text = serde_json::to_string_pretty(&schedule)
        .map_err(|e| invalid(format!("cannot write the schedule: {e}")))?;
    std::fs::write(&path, text).map_err(|e| io(&path, e))?;
    files.push(path);
    Ok(Summary { off, on, files })
}

/// Runs `timeline` and writes its summary to `out` (the CLI's `timeline` command).
pub fn report(
    args: &TimelineArgs,
    out: &mut dyn std::io::Write,
) -> std::result::Result<(), crate::cli::CliError> {
    let s = run(args)?;
    let (off, on) = (s.off.step_seconds(), s.on.step_seconds());
    writeln!(
        out,
        "{} on {} chips of {}: predicted stack step {:.2} ms off, {:.2} ms on ({:+.1} %)",
        args.model,
        args.chips,
        args.hardware,
        off * 1e3,
        on * 1e3,
        (on / off - 1.0) * 100.0
    )?;
    for (name, p) in [("off", &s.off), ("on", &s.on)] {
        writeln!(
            out,
            "  {name}: forward {:.2} ms (exposed {:.2}), backward {:.2} ms (exposed {:.2})",
            p.forward.total * 1e3,
            p.forward.exposed_communication * 1e3,
            p.backward.total * 1e3,
            p.backward.exposed_communication * 1e3
        )?;
    }
    for f in &s.files {
        writeln!(out, "  wrote {}", f.display())?;
    }
    Ok(())
}

fn io(path: &std::path::Path, e: std::io::Error) -> Error {
    invalid(format!("cannot write `{}`: {e}", path.display()))
}

fn prediction_json(p: &Prediction) -> Value {
    json!({
        "step_seconds": p.step_seconds(),
        "forward": timeline_json(&p.forward),
        "backward": timeline_json(&p.backward),
    })
}

fn timeline_json(t: &Timeline) -> Value {
    let bars: Vec<Value> = t
        .bars
        .iter()
        .map(|b| {
            json!({
                "lane": lane_name(b.lane),
                "op": match b.op {
                    OpKind::Gather => "all_gather",
                    OpKind::Forward => "forward",
                    OpKind::Vjp => "vjp",
                    OpKind::ReduceScatter => "reduce_scatter",
                },
                "label": b.label(),
                "layer": b.layer,
                "step": b.step,
                "start": b.start,
                "end": b.end,
            })
        })
        .collect();
    let steps: Vec<Value> = t
        .steps
        .iter()
        .map(|s| json!({"layer": s.layer, "start": s.start, "end": s.end}))
        .collect();
    json!({
        "total_seconds": t.total,
        "compute_seconds": t.compute,
        "exposed_communication_seconds": t.exposed_communication,
        "steps": steps,
        "bars": bars,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(model: &str, out: PathBuf) -> TimelineArgs {
        TimelineArgs {
            model: model.into(),
            hardware: "tpu7x".into(),
            chips: 16,
            ep: None,
            out,
        }
    }

    #[test]
    fn writes_svgs_and_a_schedule_that_agree_with_the_prediction() {
        let out = std::env::temp_dir().join(format!("stackscan-timeline-{}", std::process::id()));
        let s = run(&args("llama-tiny", out.clone())).unwrap();
        assert_eq!(s.files.len(), 3);
        let json: Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("schedule.json")).unwrap())
                .unwrap();
        assert_eq!(
            json["on"]["step_seconds"].as_f64(),
            Some(s.on.step_seconds())
        );
        assert_eq!(
            json["off"]["forward"]["bars"].as_array().map(Vec::len),
            Some(s.off.forward.bars.len())
        );
        let svg = std::fs::read_to_string(out.join("backward.svg")).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("RS dW3"));
        assert!(s.on.step_seconds() <= s.off.step_seconds());
        std::fs::remove_dir_all(&out).unwrap();
    }

    #[test]
    fn bad_arguments_are_errors() {
        let out = std::env::temp_dir().join("stackscan-timeline-unused");
        let e = run(&args("gpt-5", out.clone())).unwrap_err().to_string();
        assert!(e.contains("unknown model `gpt-5`"), "{e}");
        let mut a = args("llama-tiny", out);
        a.ep = Some(4);
        assert!(run(&a).unwrap_err().to_string().contains("`--ep 4`"));
        a.ep = None;
        a.chips = 0;
        assert!(run(&a).unwrap_err().to_string().contains("--chips"));
    }
}
