//! `compile-report`: where a training step's compile time goes. It lowers the step `train`
//! would run (the model's config, the schedule, the precision, Adam), times the lowering and
//! XLA's compile (no compile cache), and reads back the program XLA optimized
//! ([`OptimizedModule`]): instructions by opcode outside and inside fusions, and every loop
//! body with the instructions it holds. A slow compile is a big program, and this says which
//! part of it is big.
//!
//! Figures for reading, never asserts; [`CompileReport`] is also written as JSON (`--json`).

pub mod live_peak;
mod loops;
mod phases;
mod tpu;

use loops::loops;

pub use phases::{LOG_ENV, Phases};

use std::collections::BTreeMap;
use std::fmt;
use std::time::Instant;

use clap::Args;
use serde::Serialize;
use stackscan::fsdp::{Adam, training_program};
use stackscan::plan::PlanOptions;
use stackscan_runtime::hlo::{OptimizedModule, primitive};
use stackscan_runtime::{Client, Mesh, Plugin, plugin};

use crate::cli::args::{RuntimeArgs, ScheduleArgs};
use stackscan_models::registry::ModelName;

/// The flags of `compile-report`.
#[derive(Clone, Debug, Args)]
pub struct CompileReportArgs {
    /// Model (default: the one a `config.json` given by `--config` says it is, else the first
    /// of the command line's models).
    #[arg(long, value_name = "NAME", value_parser = crate::cli::args::ModelParser)]
    pub model: Option<ModelName>,
    /// The model's config: a preset or a TOML/`config.json` file (default: the tiny preset,
    /// what `train` compiles).
    #[arg(long, value_name = "NAME|PATH")]
    pub config: Option<String>,
    /// Decoder layers (default: the config's).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub layers: Option<u16>,
    /// Sequences per step over all devices (default: the config's per-device batch times the
    /// devices).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub batch: Option<u32>,
    /// Tokens per sequence (default: the config's).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub seq: Option<u32>,
    /// Plugin and devices.
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    /// Compile for a TPU slice this machine does not have, with libtpu's own compiler
    /// (`tpu7x:2x2x1`, `v5p:4x4x4`, `v6e:2x2`): the mesh spans the slice's devices, and the
    /// report reads the TPU program (memory against the chip's HBM, the collectives, the
    /// prefetch as scheduled). Nothing runs. `--plugin` names libtpu when it is not the
    /// pinned `tpu` plugin.
    #[arg(
        long,
        value_name = "NAME",
        conflicts_with_all = ["devices", "gpu_memory_fraction", "gpu_preallocate"]
    )]
    pub topology: Option<String>,
    /// With `--topology`: write the serialized TPU executable to this file.
    #[arg(long, value_name = "PATH", requires = "topology")]
    pub save_executable: Option<std::path::PathBuf>,
    /// With `--topology`: let libtpu turn an all-gather over a whole slice of 64 devices or more
    /// into an all-reduce, as it does by itself. stackscan turns that rewrite off on TPU: it
    /// doubles a gathered layer's buffer, and for f32 weights runs the gather synchronously.
    #[arg(long, requires = "topology")]
    pub decompose_gathers: bool,
    /// With `--topology`: keep libtpu's dump of the compile in DIR (its optimized program,
    /// buffer assignment and latency-hiding schedule, as `XLA_FLAGS=--xla_dump_to=DIR` writes
    /// them) and report from it the most temporary bytes live at once, beside the temporary
    /// allocation libtpu packed them in.
    #[arg(long, value_name = "DIR", requires = "topology")]
    pub dump: Option<std::path::PathBuf>,
    /// Context parallelism (models with a context-parallel form): each sequence split over N devices, as `train
    /// --cp` (the memory per device of a long context is what it changes).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096), value_name = "N")]
    pub cp: u32,
    /// Expert parallelism (models with routed experts), as `train --ep`.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096), value_name = "N")]
    pub ep: u32,
    /// MoE dispatch, as `train --direct-token-gather`.
    #[arg(long)]
    pub direct_token_gather: bool,
    /// MoE dispatch, as `train --dlhs-transpose-rhs`.
    #[arg(long)]
    pub dlhs_transpose_rhs: bool,
    /// Schedule overrides of the model's attribute.
    #[command(flatten)]
    pub schedule: ScheduleArgs,
    /// Rows of each table (opcodes, loop bodies).
    #[arg(long, default_value_t = 12, value_parser = clap::value_parser!(u16).range(1..=10_000))]
    pub top: u16,
    /// Print the report as JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Also split XLA's compile time into HLO passes and the backend (code generation and
    /// LLVM), from the compiler's own timing lines: the report runs once more in a child
    /// process that turns them on (twice the compile time).
    #[arg(long)]
    pub phases: bool,
}

/// One loop of the optimized program.
#[derive(Clone, Debug, Serialize)]
pub struct LoopBody {
    /// What the loop runs: stackscan's label of it ([`stackscan::fsdp::LOOP_LABEL`]) where
    /// XLA kept one, else the `while` instruction's name, after the loops around it
    /// (`backward blocks, 3 trips > backward gdn, layers 2–0, ping-pong`).
    pub path: String,
    /// Trips per run, where XLA knew them.
    pub trips: Option<u64>,
    /// Loops around it.
    pub depth: usize,
    /// Instructions of its body outside fusions, its own and those of the calls it makes
    /// (nested loops not counted: they have rows of their own).
    pub instructions: usize,
    /// Instructions inside the fusions of its body.
    pub fused: usize,
    /// Bytes its body's `copy` instructions write per trip (outside fusions; nested loops
    /// not counted). Loop-carried buffers XLA could not update in place show up here: a
    /// carried value it copies into the body and back out costs twice its size every trip.
    pub copied_bytes: u64,
}

/// The step's memory per device: stackscan's estimate, made before anything compiles (what
/// `train` checks against the memory it has), beside what XLA planned.
#[derive(Clone, Debug, Serialize)]
pub struct MemoryComparison {
    /// The estimate in bytes ([`stackscan::cost::memory_estimate`]).
    pub estimate: u64,
    /// Its parts, in bytes.
    pub parts: Vec<(String, u64)>,
    /// XLA's figure in bytes: arguments + outputs − aliased + temporaries
    /// ([`CompiledMemoryStats::footprint`](stackscan_runtime::CompiledMemoryStats::footprint)).
    pub xla: i64,
}

impl MemoryComparison {
    /// The estimate of `model` on `devices` under `options` against `xla`'s figure, values
    /// materialised as `rule` says (the CPU compiler's or an accelerator's).
    pub(crate) fn of(
        model: &stackscan::fsdp::StackModel,
        devices: usize,
        options: PlanOptions,
        rule: stackscan::cost::fusion::Rule,
        xla: &stackscan_runtime::CompiledMemoryStats,
    ) -> Result<MemoryComparison, CompileReportError> {
        let e = stackscan::cost::memory_estimate(model, devices, options, 1, rule)?;
        Ok(MemoryComparison {
            estimate: e.total(),
            parts: e
                .parts()
                .into_iter()
                .map(|(what, b)| (what.to_owned(), b))
                .collect(),
            xla: xla.footprint(),
        })
    }

    /// The estimate over XLA's figure.
    pub fn ratio(&self) -> f64 {
        self.estimate as f64 / self.xla.max(1) as f64
    }
}

/// The report.
#[derive(Clone, Debug, Serialize)]
pub struct CompileReport {
    /// The model.
    pub model: String,
    /// The config the step was built from, as JSON (the MoE flags given set in it).
    pub config: serde_json::Value,
    /// Devices of the mesh.
    pub devices: usize,
    /// The schedule and precision, as `plan` prints them, and where the prefetch is issued
    /// on this plugin.
    pub options: String,
    /// The plugin's platform and version.
    pub platform: String,
    /// Seconds to lower the step with Adam and emit its text.
    pub lower_seconds: f64,
    /// Bytes of the emitted StableHLO text.
    pub stablehlo_bytes: usize,
    /// Operations in it (lines naming a `stablehlo.` op).
    pub stablehlo_ops: usize,
    /// Seconds XLA took to compile it (no cache).
    pub xla_compile_seconds: f64,
    /// Compiled temp memory per device, bytes.
    pub temp_bytes: i64,
    /// Memory per device, estimated before the compile and as XLA planned it.
    pub memory: MemoryComparison,
    /// Computations of the optimized module.
    pub computations: usize,
    /// Instructions outside fused computations.
    pub instructions: usize,
    /// Instructions inside them.
    pub fused_instructions: usize,
    /// Instructions by opcode outside fused computations, most first.
    pub by_opcode: Vec<(String, usize)>,
    /// Instructions by opcode inside fused computations, most first.
    pub fused_by_opcode: Vec<(String, usize)>,
    /// Bytes the compiled collectives write per device, by opcode and element type: what
    /// XLA gathers, scatters and exchanges after its own passes (the CPU plugin widens bf16
    /// collectives to f32, an accelerator keeps them).
    pub collective_bytes: Vec<(String, String, u64)>,
    /// Every loop, biggest body first.
    pub loops: Vec<LoopBody>,
    /// XLA's compile time by phase (`--phases`), from a second compile in a child process.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phases: Option<Phases>,
    /// For a TPU topology (`--topology`): the slice, memory against its HBM, the collectives
    /// and the prefetch as the TPU compiler scheduled it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tpu: Option<tpu::TpuReport>,
    /// Rows of the printed loop table.
    #[serde(skip)]
    pub top: usize,
}

/// What went wrong.
#[derive(Debug)]
pub enum CompileReportError {
    /// The flags describe nothing that can be built.
    Config(String),
    /// Lowering failed.
    Lower(stackscan::Error),
    /// Loading the plugin, compiling or reading the optimized program failed.
    Runtime(stackscan_runtime::Error),
}

impl fmt::Display for CompileReportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CompileReportError::Config(why) => f.write_str(why),
            CompileReportError::Lower(e) => e.fmt(f),
            CompileReportError::Runtime(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for CompileReportError {}

impl From<stackscan::Error> for CompileReportError {
    fn from(e: stackscan::Error) -> Self {
        CompileReportError::Lower(e)
    }
}

impl From<stackscan_runtime::Error> for CompileReportError {
    fn from(e: stackscan_runtime::Error) -> Self {
        CompileReportError::Runtime(e)
    }
}

/// Builds, compiles and measures the step the flags describe.
pub fn run(args: &CompileReportArgs) -> Result<CompileReport, CompileReportError> {
    if let Some(name) = &args.topology {
        let slice = tpu::open(&args.runtime.plugin, name)?;
        return tpu::report(args, &slice);
    }
    let devices = args.runtime.devices;
    let (name, config, model, layout, options) = declared_step(args, devices)?;
    let plugin = Plugin::load(plugin::resolve(&args.runtime.plugin)?)?;
    let client = Client::for_devices_with(&plugin, devices, args.runtime.accelerator())?;
    let mesh = Mesh::for_layout(&client, &layout)?;
    // What a trainer on this plugin would run.
    let options = stackscan_runtime::backend::plan_options(&client, options);
    let started = Instant::now();
    let program = training_program(&model, options, mesh.layout(), Adam::default(), 1)?.update;
    let text = program.emit()?;
    let lower_seconds = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let exe = client.compile_program(&program, &mesh)?;
    let xla_compile_seconds = started.elapsed().as_secs_f64();
    let stats = exe.memory_stats()?;
    let memory = MemoryComparison::of(
        &model,
        devices,
        options,
        stackscan::cost::fusion::Rule::SingleConsumer,
        &stats,
    )?;
    let (format, bytes) = exe.optimized_program()?;
    let module = OptimizedModule::parse(&format, &bytes)?;
    Ok(CompileReport::assemble(
        Step {
            model: name.to_string(),
            config,
            devices,
            options,
            platform: format!("{} {}", client.platform(), client.platform_version()),
            lower_seconds,
            text: &text,
        },
        xla_compile_seconds,
        memory,
        stats.temp,
        &module,
        usize::from(args.top),
    ))
}

/// What was compiled, for [`CompileReport::assemble`].
pub(crate) struct Step<'a> {
    model: String,
    config: serde_json::Value,
    devices: usize,
    options: PlanOptions,
    platform: String,
    lower_seconds: f64,
    text: &'a str,
}

impl CompileReport {
    /// The report of `step`, compiled in `xla_compile_seconds` into `module` with `temp_bytes`
    /// of temporaries per device and `memory` in all; tables of `top` rows.
    fn assemble(
        step: Step<'_>,
        xla_compile_seconds: f64,
        memory: MemoryComparison,
        temp_bytes: i64,
        module: &OptimizedModule,
        top: usize,
    ) -> CompileReport {
        let (outer, inner) = module.opcode_counts();
        let options = step.options;
        CompileReport {
            model: step.model,
            config: step.config,
            devices: step.devices,
            options: format!(
                "prefetch_fsdp_weights={}, defer_grad_reduce_scatter={}, unroll={}, \
                 precision={}, prefetch_issue={}, scheduling_tags={}, scheduling_groups={}",
                options.prefetch_fsdp_weights,
                options.defer_grad_reduce_scatter,
                options.unroll,
                options.precision,
                options.prefetch_issue,
                options.scheduling_tags,
                options.scheduling_tags && options.scheduling_groups
            ),
            platform: step.platform,
            lower_seconds: step.lower_seconds,
            stablehlo_bytes: step.text.len(),
            stablehlo_ops: step
                .text
                .lines()
                .filter(|l| l.contains("stablehlo."))
                .count(),
            xla_compile_seconds,
            temp_bytes,
            memory,
            computations: module.computations.len(),
            instructions: outer.values().sum(),
            fused_instructions: inner.values().sum(),
            by_opcode: most_first(outer, top),
            fused_by_opcode: most_first(inner, top),
            collective_bytes: module
                .collective_bytes()
                .into_iter()
                .map(|((kind, dtype), n)| (kind, primitive::name(dtype), n))
                .collect(),
            loops: loops(module),
            phases: None,
            tpu: None,
            top,
        }
    }
}

/// The step the flags describe on `devices`: the model's name, its config as JSON, the
/// model, its mesh layout and the plan options (the attribute's, the flags over them).
pub(crate) fn declared_step(
    args: &CompileReportArgs,
    devices: usize,
) -> Result<
    (
        stackscan_models::registry::ModelName,
        serde_json::Value,
        stackscan::fsdp::StackModel,
        stackscan::Mesh,
        PlanOptions,
    ),
    CompileReportError,
> {
    let name = crate::cli::args::model_for(args.model, args.config.as_deref(), None);
    let (cp, ep) = (args.cp as usize, args.ep as usize);
    let mut c = crate::cli::args::shaped_config(
        name,
        args.config.as_deref(),
        None,
        args.batch,
        args.seq,
        (devices / cp).max(1),
    )?;
    if let Some(layers) = args.layers {
        c = c.with_layers(usize::from(layers));
    }
    // The attribute's options with the config's precision; the flags over both.
    let moe = stackscan_models::jobs::MoeFlags {
        direct_token_gather: args.direct_token_gather,
        dlhs_transpose_rhs: args.dlhs_transpose_rhs,
    };
    // The config the step is built from, MoE flags set, so a saved report says what it read
    // (a model without experts refuses the flags when the job is made, below).
    let config = c.with_moe_flags(moe).unwrap_or_else(|| c.clone()).to_json();
    let (job, layout) = stackscan_models::jobs::Job::on_layout(c, devices, ep, cp, moe)?;
    let (model, declared) = (job.model, job.options);
    let options: PlanOptions = args.schedule.apply(declared);
    model
        .validate_on(&layout)
        .map_err(|e| CompileReportError::Config(format!("`{name}` on {devices} devices: {e}")))?;
    Ok((name, config, model, layout, options))
}

/// `report` with [`Phases`]: runs `exe` (this program) with `argv` (the command line that
/// asked for `--phases`, without it) and `--json` (once), under [`LOG_ENV`], and reads the phase
/// timings from its standard error. The child compiles the same program; its own figures are
/// not used, only its log.
pub fn with_phases(
    mut report: CompileReport,
    exe: &std::path::Path,
    argv: &[std::ffi::OsString],
) -> Result<CompileReport, CompileReportError> {
    let mut child = std::process::Command::new(exe);
    child
        .args(argv.iter().filter(|a| *a != "--phases" && *a != "--json"))
        .arg("--json");
    for (k, v) in LOG_ENV {
        child.env(k, v);
    }
    let out = child
        .output()
        .map_err(|e| CompileReportError::Config(format!("cannot run {}: {e}", exe.display())))?;
    let log = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        let last = log.lines().last().unwrap_or("").to_owned();
        return Err(CompileReportError::Config(format!(
            "the timing run failed ({}): {last}",
            out.status
        )));
    }
    report.phases = phases::parse(&log, report.top.min(8));
    if report.phases.is_none() {
        return Err(CompileReportError::Config(
            "the plugin logged no compile timings (`--phases` reads XLA's own timing lines)"
                .to_owned(),
        ));
    }
    Ok(report)
}

/// The `top` largest counts, largest first (ties by name).
fn most_first(counts: BTreeMap<String, usize>, top: usize) -> Vec<(String, usize)> {
    let mut v: Vec<(String, usize)> = counts.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v.truncate(top);
    v
}

impl fmt::Display for CompileReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} on {} devices ({}), {}",
            self.model, self.devices, self.platform, self.options
        )?;
        writeln!(
            f,
            "lower + emit      {:>9.2} s   StableHLO {} bytes, {} ops",
            self.lower_seconds, self.stablehlo_bytes, self.stablehlo_ops
        )?;
        writeln!(
            f,
            "XLA compile       {:>9.2} s   temp {:.1} MiB per device",
            self.xla_compile_seconds,
            self.temp_bytes as f64 / (1024.0 * 1024.0)
        )?;
        let m = &self.memory;
        writeln!(
            f,
            "memory per device estimate {:.1} MiB before the compile, XLA {:.1} MiB \
             (arguments + outputs - aliased + temp): {:.2}x",
            m.estimate as f64 / (1024.0 * 1024.0),
            m.xla as f64 / (1024.0 * 1024.0),
            m.ratio()
        )?;
        if let Some(p) = &self.phases {
            let passes: Vec<String> = p
                .passes
                .iter()
                .map(|(name, s)| format!("{name} {s:.2} s"))
                .collect();
            writeln!(
                f,
                "  of which        {:>9.2} s HLO passes ({}), {:.2} s backend (code generation, LLVM)",
                p.hlo_pass_seconds,
                passes.join(", "),
                p.backend_seconds
            )?;
        }
        if let Some(tpu) = &self.tpu {
            write!(f, "{tpu}")?;
        }
        writeln!(
            f,
            "optimized module  {} computations, {} instructions + {} inside fusions, {} loops",
            self.computations,
            self.instructions,
            self.fused_instructions,
            self.loops.len()
        )?;
        for (kind, dtype, bytes) in &self.collective_bytes {
            writeln!(
                f,
                "{kind:<18}{dtype:>5} {:>10.2} MiB written per device",
                *bytes as f64 / (1024.0 * 1024.0)
            )?;
        }
        writeln!(f, "\n{:<28}{:>10}{:>14}", "opcode", "count", "fused opcode")?;
        let rows = self.by_opcode.len().max(self.fused_by_opcode.len());
        for r in 0..rows {
            let (a, n) = self
                .by_opcode
                .get(r)
                .map_or(("", String::new()), |(o, n)| (o.as_str(), n.to_string()));
            let (b, m) = self
                .fused_by_opcode
                .get(r)
                .map_or(("", String::new()), |(o, n)| (o.as_str(), n.to_string()));
            writeln!(f, "{a:<28}{n:>10}    {b:<24}{m:>8}")?;
        }
        writeln!(
            f,
            "\n{:<6}{:>6}{:>14}{:>10}{:>12}  loop (outermost first)",
            "depth", "trips", "instructions", "fused", "copied KiB"
        )?;
        for l in self.loops.iter().take(self.top) {
            let trips = l.trips.map_or_else(|| "?".to_owned(), |n| n.to_string());
            writeln!(
                f,
                "{:<6}{:>6}{:>14}{:>10}{:>12.1}  {}",
                l.depth,
                trips,
                l.instructions,
                l.fused,
                l.copied_bytes as f64 / 1024.0,
                l.path
            )?;
        }
        Ok(())
    }
}
