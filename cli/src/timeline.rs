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

use stackscan::cost::{Accounting, ActiveExperts, ExpertParallel};
use stackscan::fsdp::StackModel;

use crate::hardware::Hardware;
use crate::predict::{Prediction, predict};
use stackscan_models::registry::{ModelConfig, ModelName, Preset, models};

/// What every prediction assumes beyond the model, chips and hardware named.
pub const ASSUMPTIONS: &str = "a mesh of the profile's devices_per_chip devices a chip (two \
on TPU7x, each with half the chip's rates), one FSDP axis over all of them (with --ep K: K-way \
expert axis, experts' weights gathered over devices/K); the program priced is the one built \
under --precision (default: the model's if mixed, else the profile's: bf16 on accelerators, \
f32 on a CPU), in its own element types: weights gathered and layers run in the compute type, \
norms, softmaxes, router, recurrences and loss in f32, gradients reduced in the reduce type, \
Adam in f32; batch per device and depth from --batch/--layers or \
the model's config; full remat (the backward recomputes each layer's forward); without \
prefetch each layer's gather is exposed before it; traffic after fusion; embedding, head, loss \
and Adam priced outside the plan, serially";

/// A count the parser accepts: an integer from 1 to 65536.
fn positive_count(s: &str) -> std::result::Result<usize, String> {
    s.parse::<usize>()
        .ok()
        .filter(|n| (1..=65_536).contains(n))
        .ok_or_else(|| "expected an integer from 1 to 65536".to_owned())
}

/// Arguments of `timeline`.
#[derive(Clone, Debug, clap::Parser)]
#[command(about = "Predict a training step and draw its timelines")]
pub struct TimelineArgs {
    /// Model: a name the command line knows (`stackscan train --help` lists them; the
    /// published size, or `--config`'s), or a Hugging Face `config.json` of one of them.
    /// Default: the first model at its published size.
    #[arg(long)]
    pub model: Option<String>,
    /// The config of `--model NAME`: a preset, a TOML path or a Hugging
    /// Face `config.json` path (as `train`, `params` and `plan` take it).
    #[arg(long, value_name = "NAME|PATH")]
    pub config: Option<String>,
    /// Hardware: `tpu7x`, `tpu-v5p`, `h200`, or a profile TOML file.
    #[arg(long, default_value = "tpu7x")]
    pub hardware: String,
    /// Chips, 1 to 65536; the mesh has the profile's `devices_per_chip` devices for each
    /// (two on TPU7x), all on the FSDP axis (or FSDP × `--ep`).
    #[arg(long, default_value_t = 64, value_parser = positive_count)]
    pub chips: usize,
    /// Expert-parallel degree: routed experts split over this many chips, tokens exchanged
    /// by all_to_all on the second collective lane (needs an MoE model).
    #[arg(long, value_parser = positive_count)]
    pub ep: Option<usize>,
    /// Context parallelism (models with a context-parallel form): each sequence split over N devices, as `train
    /// --cp`. Each device computes `seq / N` positions, and attention's gather of the other
    /// pieces' keys and values (and its reduce-scatter in the backward) is priced inside the
    /// layer, on the compute lane, as every collective a layer runs itself.
    #[arg(long, value_parser = positive_count)]
    pub cp: Option<usize>,
    /// Sequences per device (default: the model config's).
    #[arg(long, value_parser = positive_count)]
    pub batch: Option<usize>,
    /// Decoder layers (default: the model config's), as a benchmark that runs a shallower
    /// stack of the same layers sets them; DeepSeek-V3 keeps its dense prefix, Qwen3.5 needs
    /// a multiple of its 4-layer block.
    #[arg(long, value_parser = positive_count)]
    pub layers: Option<usize>,
    /// Layers a loop trip runs, off and on (default: the plan's 2). MaxText's scan runs one:
    /// each trip ends with its layer's reduce-scatter before the next trip's gather starts.
    #[arg(long, value_parser = positive_count)]
    pub unroll: Option<usize>,
    /// Predict the reference's four configurations instead of `--model` (writing each one's
    /// timelines under `--out`) and print them beside the published figures.
    #[arg(long)]
    pub reference: bool,
    /// The precision policy priced (default: the model's if mixed, else the profile's: bf16
    /// on accelerators, f32 on a CPU).
    #[arg(long, value_parser = crate::cli::args::precision, value_name = "POLICY")]
    pub precision: Option<stackscan::Precision>,
    /// Directory for the SVGs and `schedule.json`.
    #[arg(long, default_value = "timelines")]
    pub out: PathBuf,
    /// A `compile-report --topology NAME --json` report of this model on this many devices
    /// (give it twice, prefetch off and on): each pass is also replayed in the order libtpu
    /// scheduled that program, with the same per-op costs, drawn beside the simulated
    /// timeline of the same schedule (`forward-compiled-on.svg`, …), and each loop's time
    /// printed both ways.
    #[arg(long, value_name = "REPORT.json")]
    pub compiled: Vec<PathBuf>,
}

/// What `timeline` predicted.
#[derive(Clone, Debug)]
pub struct Summary {
    /// Prefetch off.
    pub off: Prediction,
    /// Prefetch on, deferred reduce-scatter.
    pub on: Prediction,
    /// Each `--compiled` report's schedule, simulated and replayed as compiled.
    pub compiled: Vec<compared::CompiledSummary>,
    /// Files written.
    pub files: Vec<PathBuf>,
}

fn invalid(message: impl Into<String>) -> Error {
    Error::InvalidOp {
        op: "timeline",
        message: message.into(),
    }
}

impl TimelineArgs {
    /// The model named, or the first the command line knows (at its published size).
    pub fn model(&self) -> String {
        self.model.clone().unwrap_or_else(|| {
            stackscan_models::registry::default_model()
                .as_str()
                .to_owned()
        })
    }
}

/// A model to price and what its graph cannot say about it.
#[derive(Debug)]
pub struct PricedModel {
    /// The model.
    pub model: StackModel,
    /// Routed experts per MoE layer and experts per token, when it has them.
    pub experts: Option<ActiveExperts>,
    /// The precision its `#[layer_stack]` attribute declares.
    pub declared: stackscan::Precision,
}

impl PricedModel {
    /// How to count each kind with expert parallelism `ep` (`None` or 1: none). A kind is a
    /// routed-expert kind when one of its parameters leads with the expert count.
    pub fn accounting(&self, ep: Option<usize>) -> Result<Vec<Accounting>> {
        let ep = ep.filter(|&e| e > 1);
        let Some(ep) = ep else {
            return Ok(vec![Accounting::default(); self.model.kinds.len()]);
        };
        let Some(e) = self.experts else {
            return Err(invalid(format!(
                "`--ep {ep}`: expert parallelism needs an MoE model, and this one has no experts"
            )));
        };
        Ok(self
            .model
            .kinds
            .iter()
            .map(|k| {
                let routed = k
                    .params
                    .iter()
                    .any(|p| p.shape.first().is_some_and(|&d| d as u64 == e.experts));
                Accounting {
                    expert_parallel: routed.then_some(ExpertParallel {
                        experts: e.experts,
                        degree: ep as u64,
                    }),
                    ..Accounting::default()
                }
            })
            .collect())
    }
}

/// The model `--model name` names at its published size: a model the command line knows,
/// or a Hugging Face `config.json` path.
pub fn model_by_name(name: &str) -> Result<PricedModel> {
    model_configured(name, None, None, None)
}

/// [`model_by_name`] with `batch` sequences per device and `layers` decoder layers instead
/// of the config's (the model's own validation names a depth its stack cannot take).
pub fn model_with(name: &str, batch: Option<i64>, layers: Option<usize>) -> Result<PricedModel> {
    model_configured(name, None, batch, layers)
}

/// The config `--model name [--config spec]` names: a model name with its config loaded as
/// every command loads one ([`ModelName::load`], the published size by default), or a
/// `config.json` path.
pub fn config_by_name(name: &str, config: Option<&str>) -> Result<ModelConfig> {
    if let Ok(model) = name.parse::<ModelName>() {
        return model.load_or(config, Preset::Published);
    }
    if let Some(spec) = config {
        let names: Vec<&str> = models().iter().map(|m| m.as_str()).collect();
        return Err(invalid(format!(
            "`--config {spec}` needs `--model {}`, not `{name}`",
            names.join("|")
        )));
    }
    if name.ends_with(".json") {
        return stackscan_models::hf_config::load(std::path::Path::new(name));
    }
    let names: Vec<&str> = models().iter().map(|m| m.as_str()).collect();
    Err(invalid(format!(
        "unknown model `{name}` (known: {}, or a config.json path)",
        names.join(", ")
    )))
}

/// [`config_by_name`] with `batch` sequences per device and `layers` decoder layers instead
/// of the config's, priced.
pub fn model_configured(
    name: &str,
    config: Option<&str>,
    batch: Option<i64>,
    layers: Option<usize>,
) -> Result<PricedModel> {
    if batch.is_some_and(|b| b < 1) {
        return Err(invalid("`--batch` must be at least 1"));
    }
    if layers == Some(0) {
        return Err(invalid("`--layers` must be at least 1"));
    }
    let mut c = config_by_name(name, config)?;
    if let Some(b) = batch {
        c = c.with_batch_per_device(b);
    }
    if let Some(l) = layers {
        c = c.with_layers(l);
    }
    priced(&c)
}

/// The model `args` name with each sequence split over `cp` of `devices` ([`TimelineArgs::cp`]).
fn context_parallel(
    name: &str,
    config: Option<&str>,
    args: &TimelineArgs,
    devices: usize,
    cp: usize,
) -> Result<PricedModel> {
    let mut c = config_by_name(name, config)?;
    if let Some(b) = args.batch {
        c = c.with_batch_per_device(b as i64);
    }
    if let Some(l) = args.layers {
        c = c.with_layers(l);
    }
    let split = c.context_parallel(devices, cp, 1)?;
    priced(&split.0)
}

/// The model of `config` as the cost model prices it.
pub fn priced(config: &ModelConfig) -> Result<PricedModel> {
    let (model, options) = config.build()?;
    Ok(PricedModel {
        model,
        experts: config.architecture().experts(),
        declared: options.precision,
    })
}

/// What `timeline`'s arguments name, loaded: every error here is the arguments' (a model,
/// config or hardware profile that cannot be read or does not fit), found before anything is
/// simulated.
struct Loaded {
    priced: PricedModel,
    accounting: Vec<Accounting>,
    chip: Hardware,
}

impl Loaded {
    /// Loads the model, its config and the hardware profile `args` name.
    fn new(args: &TimelineArgs) -> Result<Loaded> {
        if args.chips == 0 {
            return Err(invalid("`--chips` must be at least 1"));
        }
        let chip = Hardware::load(&args.hardware)?;
        let mut priced = model_configured(
            &args.model(),
            args.config.as_deref(),
            args.batch.map(|b| b as i64),
            args.layers,
        )?;
        if let Some(cp) = args.cp.filter(|&cp| cp > 1) {
            let devices = args.chips.saturating_mul(chip.devices_per_chip);
            priced = context_parallel(&args.model(), args.config.as_deref(), args, devices, cp)?;
        }
        let accounting = priced.accounting(args.ep)?;
        // The model must split over the mesh as `train` requires, or the prediction prices
        // a step that cannot be built.
        let devices = args
            .chips
            .checked_mul(chip.devices_per_chip)
            .ok_or_else(|| {
                invalid(format!(
                    "`--chips` {} × {} devices per chip overflows",
                    args.chips, chip.devices_per_chip
                ))
            })?;
        priced.model.validate(devices).map_err(|e| {
            invalid(format!(
                "`{}` does not fit {devices} devices ({} chips of {}): {e}",
                args.model(),
                args.chips,
                chip.name
            ))
        })?;
        Ok(Loaded {
            priced,
            accounting,
            chip,
        })
    }
}

/// Runs `timeline`.
pub fn run(args: &TimelineArgs) -> Result<Summary> {
    run_loaded(args, Loaded::new(args)?)
}

/// Runs `timeline` on what its arguments name.
fn run_loaded(args: &TimelineArgs, loaded: Loaded) -> Result<Summary> {
    let Loaded {
        priced,
        accounting,
        chip,
    } = loaded;
    let devices = args.chips * chip.devices_per_chip;
    let hw = chip.per_device();
    let model = &priced.model;
    let target = crate::predict::Target {
        hardware: args.hardware.clone(),
        chips: args.chips,
        ep: args.ep,
        precision: args.precision,
    };
    let precision = target.precision(priced.declared, &hw);
    let options = |o: PlanOptions| {
        args.unroll
            .map_or(o, |u| o.with_unroll(u))
            .with_precision(precision)
    };
    let off = predict(
        model,
        options(PlanOptions::baseline()),
        &hw,
        devices,
        &accounting,
    )?;
    let on = predict(
        model,
        options(PlanOptions::prefetch_deferred()),
        &hw,
        devices,
        &accounting,
    )?;
    std::fs::create_dir_all(&args.out).map_err(|e| io(&args.out, e))?;
    let mut files = Vec::new();
    let mut compiled = Vec::new();
    for path in &args.compiled {
        let base = options(PlanOptions::prefetch_deferred());
        let (c, written) = compared::compare(path, args, model, &hw, devices, &accounting, base)?;
        compiled.push(c);
        files.extend(written);
    }
    for (pass, a, b) in [
        ("forward", &off.forward, &on.forward),
        ("backward", &off.backward, &on.backward),
    ] {
        let title = format!("{} on {} × {}: {pass}", args.model(), args.chips, chip.name);
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
        "model": args.model(),
        "hardware": chip.name,
        "chips": args.chips,
        "devices": devices,
        "layers": priced.model.stack.len(),
        "ep": args.ep,
        "cp": args.cp,
        "assumptions": ASSUMPTIONS,
        "off": prediction_json(&off),
        "on": prediction_json(&on),
        "compiled": compiled.iter().map(compared::compiled_json).collect::<Vec<_>>(),
    });
    let path = args.out.join("schedule.json");
    let text = serde_json::to_string_pretty(&schedule)
        .map_err(|e| invalid(format!("cannot write the schedule: {e}")))?;
    std::fs::write(&path, text).map_err(|e| io(&path, e))?;
    files.push(path);
    Ok(Summary {
        off,
        on,
        compiled,
        files,
    })
}

/// Runs `timeline` and writes its summary to `out` (the CLI's `timeline` command).
pub fn report(
    args: &TimelineArgs,
    out: &mut dyn std::io::Write,
) -> std::result::Result<(), crate::cli::CliError> {
    if args.reference {
        let rows = crate::reference::predict_all(&args.hardware, args.batch, &args.out)?;
        write!(out, "{}", crate::reference::table(&rows))?;
        writeln!(out, "on {}; assumptions: {ASSUMPTIONS}", args.hardware)?;
        writeln!(out, "timelines under {}", args.out.display())?;
        return Ok(());
    }
    let loaded = Loaded::new(args).map_err(|e| crate::cli::CliError::Usage(e.to_string()))?;
    let s = run_loaded(args, loaded)?;
    let (off, on) = (s.off.step_seconds(), s.on.step_seconds());
    writeln!(
        out,
        "{} on {} chips of {}{}: predicted step {:.2} ms off, {:.2} ms on ({:+.1} %)",
        args.model(),
        args.chips,
        args.hardware,
        args.cp
            .filter(|&cp| cp > 1)
            .map_or(String::new(), |cp| format!(
                ", each sequence over {cp} devices"
            )),
        off * 1e3,
        on * 1e3,
        (on / off - 1.0) * 100.0
    )?;
    for (name, p) in [("off", &s.off), ("on", &s.on)] {
        writeln!(
            out,
            "  {name}: forward {:.2} ms (exposed {:.2}), backward {:.2} ms (exposed {:.2}), outer parts and optimizer {:.2} ms",
            p.forward.total * 1e3,
            p.forward.exposed_communication * 1e3,
            p.backward.total * 1e3,
            p.backward.exposed_communication * 1e3,
            p.outer * 1e3
        )?;
    }
    for c in &s.compiled {
        compared::write_summary(c, out)?;
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
        "stack_seconds": p.stack_seconds(),
        "outer_seconds": p.outer,
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
                    OpKind::AllToAll => "all_to_all",
                    OpKind::CarryCopy => "carry_copy",
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

mod compared;
pub mod compiled;

pub use compared::CompiledSummary;

#[cfg(test)]
mod tests;
