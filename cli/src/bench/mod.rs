//! The benchmark: how close the training step runs to this machine. It measures the machine's
//! matmul peak itself ([`peak`]), trains the model for a few steps under each option set and
//! reports model-FLOPs utilisation (MFU), tokens/s, the host's overhead per step (wall time
//! outside the device's execution), the compiled memory per device, and compile time at
//! several depths. Figures, never asserts: a benchmark's numbers are for reading.
//!
//! [`BenchArgs`] is a clap argument group, so a CLI mounts it as a subcommand
//! (`#[command(flatten)]` or a subcommand variant holding it).
//!
//! ```no_run
//! use clap::Parser;
//! use stackscan_cli::bench::{self, BenchArgs};
//!
//! #[derive(Parser)]
//! struct Cli {
//!     #[command(flatten)]
//!     bench: BenchArgs,
//! }
//!
//! let cli = Cli::parse_from(["bench", "--layers", "4", "--steps", "3", "--options", "deferred"]);
//! let report = bench::run(&cli.bench)?;
//! println!("{}", serde_json::to_string_pretty(&report)?);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod flops;
mod memory;

pub use memory::check_memory;
mod output;
mod peak;

use std::fmt;
use std::time::Instant;

use clap::{Args, ValueEnum};
use serde::Serialize;
use stackscan::fsdp::{Adam, train_step_on, with_adam};
use stackscan::plan::{PlanOptions, PrefetchIssue};
use stackscan::{Axis, Precision, Program};
use stackscan_runtime::train::{HostInput, StepReport, Trainer};
use stackscan_runtime::{Client, CompiledMemoryStats, Mesh, Plugin, plugin};

pub use flops::{StepFlops, step_flops};
pub use output::{check_destination, write_json};
pub use peak::{MatmulPeak, measure as measure_matmul_peak};

use crate::cli::args::prefetch_issue;
use crate::cli::train::batches::{Layout, step_inputs};
use stackscan_models::registry::{ModelConfig, ModelName, Preset};

/// A schedule the bench runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Schedule {
    /// No prefetch: gather right before use, reduce-scatter right after.
    Off,
    /// Prefetch the next layer's weights, reduce-scatter in the same step.
    On,
    /// Prefetch and defer each reduce-scatter to the next step.
    Deferred,
}

impl Schedule {
    fn options(self) -> PlanOptions {
        match self {
            Schedule::Off => PlanOptions::baseline(),
            Schedule::On => PlanOptions::prefetch(),
            Schedule::Deferred => PlanOptions::prefetch_deferred(),
        }
    }
}

/// The bench's flags.
#[derive(Clone, Debug, Args)]
pub struct BenchArgs {
    /// Model to run (default: the one a `config.json` given by `--config` says it is, else
    /// the first the command line knows).
    #[arg(long, value_name = "NAME", value_parser = crate::cli::args::ModelParser)]
    pub model: Option<ModelName>,
    /// The model's config: a preset or a TOML/`config.json` file, resized by `--layers`,
    /// `--seq` and `--batch` where given (default: the tiny preset at 16 layers, 16 sequences
    /// of 128 tokens).
    #[arg(long, value_name = "NAME|PATH")]
    pub config: Option<String>,
    /// Decoder layers of the timed runs (default: 16, or the config's).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub layers: Option<u16>,
    /// Sequences per step over all devices, split evenly across them (default: 16, or the
    /// config's per-device batch times the devices).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub batch: Option<u32>,
    /// Tokens per sequence (default: 128, or the config's).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub seq: Option<u32>,
    /// The precision policy of every timed step and compile (`f32`, `bf16`,
    /// `bf16-reduce-bf16`; default: the config's, else the stack attribute's). MFU divides by
    /// the matmul peak measured at its compute type.
    #[arg(long, value_parser = crate::cli::args::precision, value_name = "POLICY")]
    pub precision: Option<Precision>,
    /// Devices on the FSDP axis (CPU: virtual devices; an accelerator: the first N).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub devices: u16,
    /// Context parallelism (models with a context-parallel form): each sequence split over N of the devices, an
    /// `fsdp × context` mesh of devices/N × N, as `train --cp`.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=4096), value_name = "N")]
    pub cp: u16,
    /// Timed steps per schedule, after the warm-up steps.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub steps: u32,
    /// Untimed steps first (the first executions pay for thread pools and page faults).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub warmup: u32,
    /// Schedules to time, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Schedule::Off, Schedule::On, Schedule::Deferred])]
    pub options: Vec<Schedule>,
    /// Emit the programs without scheduling tags (`PlanOptions::scheduling_tags`).
    #[arg(long)]
    pub no_scheduling_tags: bool,
    /// Where each step issues the next layer's prefetch gather, as `train --prefetch-issue`
    /// (default: chosen for the plugin).
    #[arg(long, value_parser = prefetch_issue, value_name = "POINT")]
    pub prefetch_issue: Option<PrefetchIssue>,
    /// Depths whose lowering and XLA compile are timed (prefetch + deferred), comma-separated;
    /// the flag without a value for none.
    #[arg(long, value_delimiter = ',', num_args = 0.., default_values_t = [4u16, 16, 48])]
    pub compile_depths: Vec<u16>,
    /// Wait for each step before uploading the next (`Trainer::step`), instead of keeping one
    /// step in flight while the next batch is uploaded and launched.
    #[arg(long)]
    pub sync: bool,
    /// Steps kept in flight (launched and not yet waited for) when not `--sync`.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=8))]
    pub in_flight: u8,
    /// PJRT plugin: `cpu`, `cpu-0.115`, `cuda`, `tpu`, or a path to a plugin library.
    #[arg(long, default_value = "cpu")]
    pub plugin: String,
    /// Go on even if a schedule's estimated memory is more than the machine (or each device)
    /// has (as `train --no-memory-check`).
    #[arg(long)]
    pub no_memory_check: bool,
    /// On the CUDA plugin: the share of each GPU's memory it may use, in (0, 1].
    #[arg(long, value_name = "F", value_parser = crate::cli::args::memory_fraction)]
    pub gpu_memory_fraction: Option<f32>,
    /// On the CUDA plugin: whether that share is allocated when the client starts.
    #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set)]
    pub gpu_preallocate: Option<bool>,
}

/// What went wrong.
#[derive(Debug)]
pub enum BenchError {
    /// The flags describe no runnable configuration.
    Config(String),
    /// Lowering, compiling or running failed.
    Run(stackscan_runtime::Error),
    /// The report could not be written.
    Io(std::io::Error),
}

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BenchError::Config(m) => f.write_str(m),
            BenchError::Run(e) => write!(f, "{e}"),
            BenchError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for BenchError {}

impl From<stackscan_runtime::Error> for BenchError {
    fn from(e: stackscan_runtime::Error) -> Self {
        BenchError::Run(e)
    }
}

impl From<stackscan::Error> for BenchError {
    fn from(e: stackscan::Error) -> Self {
        BenchError::Run(e.into())
    }
}

/// The configuration measured.
#[derive(Clone, Debug, Serialize)]
pub struct Setup {
    /// The model's name.
    pub model: String,
    /// Its configuration (the model's config fields: layers, widths, sequence, sequences per
    /// device).
    pub config: serde_json::Value,
    /// Sequences per step over all devices.
    pub global_batch: i64,
    /// Devices of the mesh.
    pub devices: usize,
    /// Devices each sequence is split over (`--cp`; 1: none).
    pub context: usize,
    /// Timed steps per schedule.
    pub steps: usize,
    /// Untimed steps before them.
    pub warmup: usize,
    /// Whether the programs carry scheduling tags.
    pub scheduling_tags: bool,
    /// Whether each step was waited for before the next was uploaded (`--sync`); otherwise
    /// `in_flight` steps stay launched while the next is uploaded and launched.
    pub sync: bool,
    /// Steps kept in flight when not `sync`.
    pub in_flight: usize,
    /// The plugin's name or path.
    pub plugin: String,
    /// The plugin's platform (`cpu`, `cuda`, `tpu`).
    pub platform: String,
    /// The platform's version as the plugin reports it.
    pub platform_version: String,
    /// The plugin's PJRT C API version, `major.minor`.
    pub pjrt_api_version: String,
    /// This stackscan's version.
    pub stackscan_version: &'static str,
    /// The precision policy of every step.
    pub precision: String,
    /// Where each step issued the next layer's prefetch gather, as chosen for the plugin
    /// (`with-input` or `after-compute`).
    pub prefetch_issue: String,
}

/// Compiled memory per device (PJRT's statistics of the step program).
#[derive(Clone, Debug, Serialize)]
pub struct Memory {
    /// Argument bytes.
    pub arguments: i64,
    /// Output bytes.
    pub outputs: i64,
    /// Bytes shared by an argument and an output (donation).
    pub alias: i64,
    /// Temporary bytes.
    pub temp: i64,
    /// Peak bytes as XLA reports it.
    pub peak: i64,
}

impl From<CompiledMemoryStats> for Memory {
    fn from(m: CompiledMemoryStats) -> Self {
        Memory {
            arguments: m.arguments,
            outputs: m.outputs,
            alias: m.alias,
            temp: m.temp,
            peak: m.peak,
        }
    }
}

/// One schedule's timed steps.
#[derive(Clone, Debug, Serialize)]
pub struct ScheduleRun {
    /// The schedule.
    pub schedule: Schedule,
    /// Median step wall time, seconds.
    pub step_seconds_median: f64,
    /// Fastest step, seconds.
    pub step_seconds_min: f64,
    /// Median of the devices' share of a step, seconds: from the later of the step's start
    /// and its launch being queued until the devices signalled completion (timed by the
    /// plugin's callback; see `stackscan_runtime::train::StepReport`).
    pub device_seconds_median: f64,
    /// Median host overhead per step, µs: the step's wall time minus the devices' share, the
    /// time the devices had nothing to run because the host was not done.
    pub host_overhead_us_median: f64,
    /// Largest host overhead of a timed step, µs.
    pub host_overhead_us_max: f64,
    /// Median host work per step, µs, overlapped with the devices or not: checks and uploads
    /// of the inputs.
    pub host_upload_us_median: f64,
    /// Median host work per step, µs: argument lists, the plugin's dispatch, donation marks.
    pub host_launch_us_median: f64,
    /// Median host work per step, µs: reading the loss and `applied` back once done.
    pub host_read_us_median: f64,
    /// Tokens per second at the median step.
    pub tokens_per_second: f64,
    /// Model FLOPs utilisation at the median step: model FLOPs / (time · matmul peak).
    pub mfu: f64,
    /// Hardware FLOPs utilisation: the program's matrix FLOPs (recompute included) / (time ·
    /// peak).
    pub hfu: f64,
    /// Seconds to lower and compile the step.
    pub compile_seconds: f64,
    /// Compiled memory per device.
    pub memory: Memory,
    /// Loss of the first and the last timed step (the run trains; both should be finite).
    pub loss_first: f32,
    /// See `loss_first`.
    pub loss_last: f32,
}

/// Lowering and compile time at one depth.
#[derive(Clone, Debug, Serialize)]
pub struct CompileTime {
    /// Decoder layers.
    pub layers: usize,
    /// Seconds to lower the step, add Adam and emit the text.
    pub lower_and_emit_seconds: f64,
    /// Seconds XLA took to compile it.
    pub xla_compile_seconds: f64,
    /// Size of the program text, bytes.
    pub program_bytes: usize,
}

/// The whole report, written as JSON.
#[derive(Clone, Debug, Serialize)]
pub struct BenchReport {
    /// What was measured.
    pub setup: Setup,
    /// The machine's measured matmul peak.
    pub matmul_peak: MatmulPeak,
    /// The step's FLOP counts (of the deferred schedule's program, the same model work in
    /// every schedule).
    pub flops: StepFlops,
    /// Per schedule.
    pub runs: Vec<ScheduleRun>,
    /// Per depth.
    pub compile_time: Vec<CompileTime>,
    /// XLA compile time at the deepest over the shallowest depth.
    pub compile_ratio_deepest_to_shallowest: Option<f64>,
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The model configuration the flags describe: `--config` (default: the tiny preset at 16
/// layers, 16 sequences of 128 tokens) resized by `--layers`, `--seq` and `--batch` over
/// `--devices`.
pub fn config(args: &BenchArgs) -> Result<ModelConfig, BenchError> {
    // The batch splits over the groups of devices that share sequences (all of them without
    // context parallelism).
    let devices = i64::from(args.devices / args.cp.max(1)).max(1);
    let name = crate::cli::args::model_for(args.model, args.config.as_deref(), None);
    let base = match &args.config {
        Some(spec) => name.load(spec),
        None => name.preset(Preset::Tiny),
    }
    .map_err(|e| BenchError::Config(e.to_string()))?;
    let given = args.config.is_some();
    let layers = args
        .layers
        .map_or(if given { base.layers() } else { 16 }, usize::from);
    let seq = args
        .seq
        .map_or(if given { base.tokens().seq } else { 128 }, i64::from);
    let batch = args.batch.map_or(
        if given {
            base.batch_per_device() * devices
        } else {
            16
        },
        i64::from,
    );
    if batch % devices != 0 {
        return Err(BenchError::Config(format!(
            "`--batch {batch}` does not split over `--devices {devices}`: give a multiple of {devices}"
        )));
    }
    let c = base
        .with_layers(layers)
        .with_seq(seq)
        .with_batch_per_device(batch / devices);
    let (c, layout) = layout(c, args)?;
    c.build()
        .and_then(|(m, _)| m.validate_on(&layout))
        .map_err(|e| {
            BenchError::Config(format!(
                "`{name}` does not fit {} devices: {e}",
                args.devices
            ))
        })?;
    Ok(c)
}

/// `c` on the mesh of the flags: one `fsdp` axis, or `fsdp × context` with `--cp`.
fn layout(c: ModelConfig, args: &BenchArgs) -> Result<(ModelConfig, stackscan::Mesh), BenchError> {
    let devices = usize::from(args.devices);
    let cp = usize::from(args.cp);
    if cp == 1 {
        let mesh = stackscan::Mesh::line(&Axis::new("fsdp", devices))?;
        return Ok((c, mesh));
    }
    Ok(c.context_parallel(devices, cp, 1)?)
}

/// The options of `schedule` under the flags: scheduling tags, the precision asked for over
/// the config's, and the prefetch issue point.
fn schedule_options(args: &BenchArgs, declared: Precision, schedule: Schedule) -> PlanOptions {
    schedule
        .options()
        .with_scheduling_tags(!args.no_scheduling_tags)
        .with_precision(args.precision.unwrap_or(declared))
        .with_prefetch_issue(args.prefetch_issue.unwrap_or(PrefetchIssue::Auto))
}

/// Runs the bench the flags describe.
pub fn run(args: &BenchArgs) -> Result<BenchReport, BenchError> {
    let (c, layout) = layout(config(args)?, args)?;
    let devices = usize::from(args.devices);
    let cp = usize::from(args.cp);
    let tags = !args.no_scheduling_tags;
    let memory = check_memory(args, &c)?;
    let plugin = Plugin::load(plugin::resolve(&args.plugin)?)?;
    let accelerator = stackscan_runtime::AcceleratorOptions {
        memory_fraction: args.gpu_memory_fraction,
        preallocate: args.gpu_preallocate,
    };
    let client = Client::for_devices_with(&plugin, devices, accelerator)?;
    let mesh = Mesh::for_layout(&client, &layout)?;
    let global_batch = c.batch_per_device() * (devices / cp) as i64;
    let (model, declared) = c.build()?;
    let declared = declared.precision;
    if let (Some(estimate), Some(limit)) = (&memory, client.device_memory_limit()) {
        stackscan_models::memory::check_device_memory(estimate, limit).map_err(|e| {
            BenchError::Config(format!(
                "cannot bench this model here: {}",
                stackscan_models::memory::reason(e)
            ))
        })?;
    }
    let deferred = stackscan_runtime::backend::plan_options(
        &client,
        schedule_options(args, declared, Schedule::Deferred),
    );
    let peak = peak::measure(&client, &mesh, deferred.precision.compute)?;
    let flops = step_flops(
        &model,
        global_batch * c.tokens().seq,
        &train_step_on(&model, deferred, &layout)?,
        devices,
    )?;
    let mut runs = Vec::new();
    for &schedule in &args.options {
        let options = schedule_options(args, declared, schedule);
        runs.push(time_schedule(
            args, &c, &client, &mesh, schedule, options, &peak, &flops,
        )?);
    }
    let mut compile_time = Vec::new();
    for &layers in &args.compile_depths {
        let layers = usize::from(layers);
        let m = c
            .with_layers(layers)
            .build()
            .map_err(|e| BenchError::Config(format!("`--compile-depths` {layers}: {e}")))?
            .0;
        let started = Instant::now();
        let step = train_step_on(&m, deferred, &layout)?;
        let program: Program = with_adam(&step, Adam::default())?;
        let text = program.emit()?;
        let lowered = started.elapsed().as_secs_f64();
        let started = Instant::now();
        client.compile_program(&program, &mesh)?;
        compile_time.push(CompileTime {
            layers,
            lower_and_emit_seconds: lowered,
            xla_compile_seconds: started.elapsed().as_secs_f64(),
            program_bytes: text.len(),
        });
    }
    let ratio = match (
        compile_time.iter().min_by_key(|t| t.layers),
        compile_time.iter().max_by_key(|t| t.layers),
    ) {
        (Some(lo), Some(hi)) if hi.layers > lo.layers => {
            Some(hi.xla_compile_seconds / lo.xla_compile_seconds)
        }
        _ => None,
    };
    Ok(BenchReport {
        setup: Setup {
            model: c.model().to_string(),
            config: c.to_json(),
            global_batch,
            devices,
            context: cp,
            steps: args.steps as usize,
            warmup: args.warmup as usize,
            scheduling_tags: tags,
            sync: args.sync,
            in_flight: usize::from(args.in_flight),
            plugin: args.plugin.clone(),
            platform: client.platform().to_owned(),
            platform_version: client.platform_version(),
            pjrt_api_version: {
                let (major, minor) = plugin.api_version();
                format!("{major}.{minor}")
            },
            stackscan_version: env!("CARGO_PKG_VERSION"),
            precision: deferred.precision.to_string(),
            prefetch_issue: deferred.prefetch_issue.to_string(),
        },
        matmul_peak: peak,
        flops,
        runs,
        compile_time,
        compile_ratio_deepest_to_shallowest: ratio,
    })
}

/// Trains under one schedule and times its steps.
#[expect(
    clippy::too_many_arguments,
    reason = "the run's flags, model, devices and the two figures every schedule divides by"
)]
fn time_schedule(
    args: &BenchArgs,
    c: &ModelConfig,
    client: &Client,
    mesh: &Mesh,
    schedule: Schedule,
    options: PlanOptions,
    peak: &MatmulPeak,
    flops: &StepFlops,
) -> Result<ScheduleRun, BenchError> {
    let split = Layout {
        devices: mesh.size() as u64,
        context: u64::from(args.cp),
        seq: c.tokens().seq as usize,
    };
    let mut trainer = Trainer::new(client, mesh, &c.build()?.0, options, Adam::default(), 1)?;
    // The batches are made before the clock starts: the host overhead measured is the
    // trainer's, not the synthetic data's.
    let total = (args.warmup + args.steps) as u64;
    let data = |i| c.architecture().synthetic_batch(i);
    let batches: Vec<Vec<Vec<HostInput>>> = (0..total)
        .map(|step| step_inputs(data, step * split.groups(), split, 1))
        .collect();
    let warmup = args.warmup as usize;
    let reports = if args.sync {
        batches
            .iter()
            .map(|inputs| trainer.step(inputs))
            .collect::<Result<Vec<_>, _>>()?
    } else {
        pipelined(&mut trainer, &batches, usize::from(args.in_flight))?
    };
    let timed = &reports[warmup.min(reports.len())..];
    let wall: Vec<f64> = timed.iter().map(|r| r.seconds).collect();
    let device: Vec<f64> = timed.iter().map(|r| r.device_seconds).collect();
    let overhead: Vec<f64> = timed.iter().map(|r| r.host_overhead() * 1e6).collect();
    let us = |f: fn(&StepReport) -> f64| -> f64 {
        median(&timed.iter().map(|r| f(r) * 1e6).collect::<Vec<_>>())
    };
    let losses: Vec<f32> = timed.iter().map(|r| r.loss).collect();
    let t = median(&wall);
    Ok(ScheduleRun {
        schedule,
        step_seconds_median: t,
        step_seconds_min: wall.iter().copied().fold(f64::INFINITY, f64::min),
        device_seconds_median: median(&device),
        host_overhead_us_median: median(&overhead),
        host_overhead_us_max: overhead.iter().copied().fold(0.0, f64::max),
        host_upload_us_median: us(|r| r.host.upload),
        host_launch_us_median: us(|r| r.host.launch),
        host_read_us_median: us(|r| r.host.read),
        tokens_per_second: flops.tokens as f64 / t,
        mfu: flops.model_flops / (t * peak.flops_per_second),
        hfu: flops.program_matrix_flops / (t * peak.flops_per_second),
        compile_seconds: trainer.compile_seconds(),
        memory: trainer.memory_stats()?.into(),
        loss_first: losses.first().copied().unwrap_or(f32::NAN),
        loss_last: losses.last().copied().unwrap_or(f32::NAN),
    })
}

/// Runs `batches` with `depth` steps in flight: step k + depth is uploaded and launched
/// before step k is waited for, as a JAX training loop dispatches ahead of its metrics.
fn pipelined(
    trainer: &mut Trainer,
    batches: &[Vec<Vec<HostInput>>],
    depth: usize,
) -> Result<Vec<StepReport>, BenchError> {
    let mut reports = Vec::with_capacity(batches.len());
    let mut in_flight = std::collections::VecDeque::with_capacity(depth + 1);
    for inputs in batches {
        let batch = trainer.upload(inputs)?;
        in_flight.push_back(trainer.launch(batch)?);
        if in_flight.len() > depth
            && let Some(oldest) = in_flight.pop_front()
        {
            reports.push(trainer.wait(oldest)?);
        }
    }
    while let Some(oldest) = in_flight.pop_front() {
        reports.push(trainer.wait(oldest)?);
    }
    Ok(reports)
}
