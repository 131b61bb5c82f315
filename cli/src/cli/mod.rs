//! The `stackscan` command line: one clap parser with a subcommand per job (`train`, `plan`,
//! `params`, `bench`, `compile-report`, `calibrate`, `timeline`, `collectives`). Flags that several commands share are
//! defined once in [`args`] and flattened into each command's struct; global flags (`-v`,
//! `--quiet`) are on [`Cli`]. The binaries only call [`main`] with the process's arguments and
//! standard streams, so everything here is testable and prints nothing on its own.
//!
//! ```
//! use clap::Parser;
//! use stackscan_cli::cli::{Cli, Command};
//!
//! let cli = Cli::try_parse_from(["stackscan", "train", "--devices", "2", "--no-defer"])?;
//! let Command::Train(train) = &cli.command else { unreachable!() };
//! assert_eq!(train.runtime.devices, 2);
//! assert!(train.schedule.no_defer);
//! // The parser refuses what cannot work: no NaN learning rate, no 0 devices.
//! assert!(Cli::try_parse_from(["stackscan", "train", "--lr", "nan"]).is_err());
//! assert!(Cli::try_parse_from(["stackscan", "train", "--devices", "0"]).is_err());
//! # Ok::<(), clap::Error>(())
//! ```

pub mod args;
pub mod bench;
pub mod calibrate;
pub mod eval;
pub mod export;
pub mod generate;
pub mod logging;
pub mod plan;
pub mod recorded;
pub mod report;
pub mod train;

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::timeline::TimelineArgs;
use args::RuntimeArgs;
use bench::BenchCommand;
use calibrate::CalibrateArgs;
use eval::EvalArgs;
use export::ExportArgs;
use generate::GenerateArgs;
use plan::{ParamsArgs, PlanArgs};
use train::TrainArgs;

/// Declare, plan and train FSDP-prefetching transformer stacks on PJRT devices.
#[derive(Debug, Parser)]
#[command(name = "stackscan", version, propagate_version = true)]
pub struct Cli {
    /// More log output: `-v` shows debug events and the XLA plugin's own INFO lines, `-vv`
    /// trace events. RUST_LOG (`warn,stackscan_runtime=debug`) sets the levels of stackscan's
    /// events directly; TF_CPP_MIN_LOG_LEVEL, when set, the plugin's.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Only errors: no progress display, no log lines but errors.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Train a tiny model on CPU devices with FSDP prefetch (the main job).
    #[command(
        after_help = "Example: stackscan train --model deepseek3 --devices 8 --ep 4 --steps 100 --metrics m.jsonl"
    )]
    Train(Box<TrainArgs>),
    /// Print the forward and backward schedule of a declared stack (full size, or `--config`'s).
    Plan(PlanArgs),
    /// List a model's parameters (full size, or `--config`'s): hierarchical names, copies,
    /// shapes, shards.
    #[command(after_help = "Example: stackscan params --model qwen35 --config tiny")]
    Params(ParamsArgs),
    /// Measure the training step against this machine's matmul peak: MFU, tokens/s, host
    /// overhead, compiled memory and compile times, as JSON.
    #[command(
        after_help = "Example: stackscan bench --model llama --layers 8 --options off,deferred --out bench.json"
    )]
    Bench(BenchCommand),
    /// Compile the training step once (no cache) and report where the compile goes: lowering
    /// and XLA times, the StableHLO's size, and the optimized program's instructions by
    /// opcode and by loop body.
    #[command(
        after_help = "Example: stackscan compile-report --model qwen35 --config tiny --top 8"
    )]
    CompileReport(crate::compile_report::CompileReportArgs),
    /// Measure this CPU as a hardware profile and check its predicted step times (JSON).
    #[command(after_help = "Example: stackscan calibrate --profile cpu.toml --out check.json")]
    Calibrate(CalibrateArgs),
    /// Predict a training step on a hardware profile and draw its timelines.
    #[command(
        after_help = "Example: stackscan timeline --model deepseek3 --hardware tpu7x --chips 64 --ep 4 --out timelines"
    )]
    Timeline(TimelineArgs),
    /// The mean loss and perplexity of a checkpoint's (or a Hugging Face directory's)
    /// weights on held-out tokens; nothing is updated.
    #[command(
        after_help = "Example: stackscan eval --checkpoint checkpoints --data held-out.bin --batches 8"
    )]
    Eval(EvalArgs),
    /// Continue prompts with a checkpoint's (or a Hugging Face directory's) weights: a KV
    /// cache (and GDN's recurrent state), prefill and decode as compiled programs, greedy or
    /// sampled; prints the text (or ids) and tokens per second.
    #[command(
        after_help = "Example: stackscan generate --init-from Llama-3.2-1B --prompt Once --max-new-tokens 16"
    )]
    Generate(GenerateArgs),
    /// Write a checkpoint's weights as a Hugging Face model directory (`model.safetensors`,
    /// `config.json`) that `transformers` loads.
    #[command(
        after_help = "Example: stackscan export --config tiny --checkpoint checkpoints --to hf-out"
    )]
    Export(ExportArgs),
    /// Run one all-gather + reduce-scatter on N devices and check it on the host.
    #[command(after_help = "Example: stackscan collectives --devices 8")]
    Collectives(RuntimeArgs),
    /// Print a named set of compiler flags as shell `export` lines, each flag with its reason
    /// (`tpu-fsdp`: the reference's latency-hiding scheduler and SparseCore offload of the
    /// FSDP collectives, through `LIBTPU_INIT_ARGS`); `eval "$(stackscan xla-preset
    /// tpu-fsdp)"` sets them for the commands that follow.
    #[command(after_help = "Example: stackscan xla-preset tpu-fsdp")]
    XlaPreset(XlaPresetArgs),
}

/// Arguments of `xla-preset`.
#[derive(Debug, clap::Args)]
pub struct XlaPresetArgs {
    /// The preset (`tpu-fsdp`).
    pub name: String,
}

/// Why a command failed: bad arguments (exit status 2) or a failed run (1).
#[derive(Debug)]
pub enum CliError {
    /// The arguments cannot work (found before anything ran).
    Usage(String),
    /// The run failed.
    Failed(Box<dyn std::error::Error>),
}

impl CliError {
    /// A failed run.
    pub fn failed(e: impl Into<Box<dyn std::error::Error>>) -> CliError {
        CliError::Failed(e.into())
    }
}

impl<E: Into<Box<dyn std::error::Error>>> From<E> for CliError {
    fn from(e: E) -> CliError {
        CliError::Failed(e.into())
    }
}

/// Runs `cli`, its report on `out`.
pub fn run(cli: &Cli, out: &mut dyn Write) -> Result<(), CliError> {
    match &cli.command {
        Command::Train(a) => train::run(a, cli.quiet, out),
        Command::Plan(a) => plan::plan(a, out),
        Command::Params(a) => plan::params(a, out),
        Command::Bench(a) => bench::run(a, out),
        Command::Calibrate(a) => calibrate::run(a, out),
        Command::CompileReport(a) => {
            let usage = |e| match e {
                crate::compile_report::CompileReportError::Config(why) => CliError::Usage(why),
                other => CliError::failed(other),
            };
            let mut report = crate::compile_report::run(a).map_err(usage)?;
            if a.phases {
                let exe = std::env::current_exe()?;
                let argv: Vec<OsString> = std::env::args_os().skip(1).collect();
                report = crate::compile_report::with_phases(report, &exe, &argv).map_err(usage)?;
            }
            if a.json {
                writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
            } else {
                write!(out, "{report}")?;
            }
            Ok(())
        }
        Command::Timeline(a) => crate::timeline::report(a, out),
        Command::Export(a) => export::run(a, out),
        Command::Eval(a) => eval::run(a, out),
        Command::Generate(a) => generate::run(a, out),
        Command::XlaPreset(a) => {
            let preset =
                crate::xla_preset::find(&a.name).map_err(|e| CliError::Usage(e.to_string()))?;
            write!(out, "{}", preset.exports())?;
            Ok(())
        }
        Command::Collectives(a) => {
            if crate::collectives::run(a, out)? {
                Ok(())
            } else {
                Err(CliError::failed(
                    "device results differ from the host reference",
                ))
            }
        }
    }
}

/// The whole program over the built-in models ([`main_with`] of
/// [`BUILT_IN`](stackscan_models::registry::BUILT_IN)).
pub fn main(
    argv: impl IntoIterator<Item = OsString>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> ExitCode {
    main_with(stackscan_models::registry::BUILT_IN, argv, out, err)
}

/// A user's command line: every command (`train`, `plan`, `params`, `timeline`, …) for the
/// models `models`, with the process's arguments and standard streams. A user crate's whole
/// `main`:
///
/// ```no_run
/// use stackscan_models::registry::ModelName;
/// # type MyConfig = stackscan_models::llama::LlamaConfig;
///
/// static MODELS: &[ModelName] = &[ModelName::of::<MyConfig>()];
///
/// fn main() -> std::process::ExitCode {
///     stackscan_cli::cli::main_for(MODELS)
/// }
/// ```
pub fn main_for(models: &'static [stackscan_models::registry::ModelName]) -> ExitCode {
    main_with(
        models,
        std::env::args_os(),
        &mut std::io::stdout(),
        &mut std::io::stderr(),
    )
}

/// The whole program for the models `models` ([`stackscan_models::registry::install`]; `--model NAME`
/// names one of them, the first by default): parses `argv`, sets up logging (the XLA
/// plugin's log level first, while the process has one thread), runs the command and reports
/// an error as one line `error: …` on `err`. Exit status 0, 1 for a failed run, 2 for bad
/// arguments.
pub fn main_with(
    models: &'static [stackscan_models::registry::ModelName],
    argv: impl IntoIterator<Item = OsString>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> ExitCode {
    if let Err(e) = stackscan_models::registry::install(models) {
        let _ = writeln!(err, "error: {e}");
        return ExitCode::FAILURE;
    }
    let cli = match Cli::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // `--help`, `--version`: clap's text on stdout.
            let _ = write!(out, "{}", e.render());
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // One line, as every failure of stackscan's binaries: clap's message up to its
            // usage block (the flag, the value at fault, the values it takes), joined.
            let rendered = e.render().to_string();
            let message: Vec<&str> = rendered
                .lines()
                .take_while(|l| !l.trim().is_empty())
                .map(str::trim)
                .collect();
            let _ = writeln!(err, "{}", message.join(" "));
            return ExitCode::from(2);
        }
    };
    // A compile for a TPU slice loads libtpu without a TPU: its environment, like the log
    // level's, is set while the process has one thread.
    if let Command::CompileReport(a) = &cli.command
        && a.topology.is_some()
        && let Err(e) = stackscan_runtime::topology::prepare_environment()
    {
        let _ = writeln!(err, "error: {e}");
        return ExitCode::FAILURE;
    }
    if let Err(e) = logging::init(cli.verbose, cli.quiet) {
        let _ = writeln!(err, "error: {e}");
        return ExitCode::FAILURE;
    }
    match run(&cli, out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::Usage(e)) => {
            let _ = writeln!(err, "error: {e}");
            ExitCode::from(2)
        }
        Err(CliError::Failed(e)) => {
            // Error messages may span lines (a fetch error gives the command to run); the
            // first line is the error, the rest its advice.
            let _ = writeln!(err, "error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::Cli;

    /// Every command's help ends with an example, and the example parses.
    #[test]
    fn every_help_example_parses() {
        let cli = Cli::command();
        for sub in cli.get_subcommands() {
            let help = sub
                .get_after_help()
                .map(|h| h.to_string())
                .unwrap_or_default();
            let example = help
                .lines()
                .find_map(|l| l.strip_prefix("Example: "))
                .unwrap_or_else(|| panic!("`{}` --help has no example", sub.get_name()));
            let parsed = Cli::try_parse_from(example.split_whitespace());
            assert!(parsed.is_ok(), "{example}: {:?}", parsed.err());
        }
    }
}
