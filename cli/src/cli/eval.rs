//! `eval`: the mean loss and perplexity of a model's weights (a training checkpoint or a
//! Hugging Face directory) on held-out tokens, nothing updated.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use stackscan_runtime::checkpoint::Checkpoint;
use stackscan_runtime::tokens::{TokenBatches, TokenFile, TokenFormat};
use stackscan_runtime::train::{HostInput, Trainer};
use stackscan_runtime::train::{check_checkpoint, check_hf_import, stored_weights};

use super::CliError;
use super::args::{RuntimeArgs, WeightsArgs};
use stackscan_models::jobs::{Job, MoeFlags};

/// Arguments of `eval`.
#[derive(Clone, Debug, Args)]
pub struct EvalArgs {
    /// The weights and the model they are of.
    #[command(flatten)]
    pub weights: WeightsArgs,
    /// The held-out tokens (formats as `train --data`).
    #[arg(long, value_name = "PATH")]
    pub data: PathBuf,
    /// How `--data` stores tokens (default: by its name, as `train`).
    #[arg(long, value_name = "u16|u32|bytes")]
    pub data_format: Option<TokenFormat>,
    /// A Hugging Face `tokenizer.json` that tokenises `--data`, UTF-8 text (as `train
    /// --tokenizer`).
    #[arg(long, value_name = "PATH", conflicts_with = "data_format")]
    pub tokenizer: Option<PathBuf>,
    /// Global batches to read (each device's first windows of the file, as `train` reads
    /// them).
    #[arg(long, default_value_t = 4, value_name = "M", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub batches: u64,
    /// Sequences per batch over all devices, instead of the config's per-device batch ×
    /// devices.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub batch: Option<u32>,
    /// Tokens per sequence, instead of the config's.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub seq: Option<u32>,
    /// Compile even if the persistent compile cache holds the programs, and store nothing
    /// (as `train --no-compile-cache`).
    #[arg(long)]
    pub no_compile_cache: bool,
    /// Go on even if the step's estimated memory is more than the machine (or each device)
    /// has (as `train --no-memory-check`).
    #[arg(long)]
    pub no_memory_check: bool,
    /// Plugin and devices.
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

/// The mean of the forward program's loss over `batches` global batches of `data`.
fn mean_loss(
    trainer: &mut Trainer,
    data: &TokenBatches,
    batches: u64,
    devices: usize,
) -> Result<f64, CliError> {
    let mut total = 0.0f64;
    for b in 0..batches {
        let inputs: Vec<Vec<HostInput>> = (0..devices as u64)
            .map(|d| {
                let (t, l) = data.batch(b * devices as u64 + d);
                vec![HostInput::I32(t), HostInput::I32(l)]
            })
            .collect();
        total += f64::from(trainer.evaluate(&inputs)?);
    }
    Ok(total / batches as f64)
}

/// `--data` (tokenized by `--tokenizer` first, when given) read as `job`'s batches.
fn held_out(a: &EvalArgs, job: &Job) -> Result<TokenBatches, CliError> {
    let (path, format) = match &a.tokenizer {
        Some(t) => {
            let done = crate::tokenize::tokenize_text(t, &a.data)
                .map_err(|e| CliError::Usage(e.to_string()))?;
            (done.path, done.format)
        }
        None => (
            a.data.clone(),
            a.data_format
                .unwrap_or_else(|| TokenFormat::for_path(&a.data)),
        ),
    };
    let file = TokenFile::open(&path, format).map_err(|e| CliError::Usage(e.to_string()))?;
    let to_usize = |v: i64| usize::try_from(v).map_err(|e| CliError::failed(e.to_string()));
    TokenBatches::new(
        file,
        to_usize(job.vocab)?,
        to_usize(job.batch_per_device)?,
        to_usize(job.seq)?,
    )
    .map_err(|e| CliError::Usage(e.to_string()))
}

/// Runs `eval`.
pub fn run(a: &EvalArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let c = a.weights.config(a.batch, a.seq, a.runtime.devices)?;
    let c_model = c.model();
    let devices = a.runtime.devices;
    let usage = |e: stackscan::Error| CliError::Usage(e.to_string());
    let map = match &a.weights.init_from {
        Some(_) => Some(c.hf_weights().map_err(usage)?),
        None => None,
    };
    let (job, layout) = Job::on_config(c, devices, 1, MoeFlags::default()).map_err(usage)?;
    // The step's estimate bounds the forward program's: what it checks suffices.
    let memory = if a.no_memory_check {
        None
    } else {
        let estimate = job
            .check_memory(a.runtime.devices_kind(), job.options, 1)
            .map_err(super::train::too_big("evaluate"))?;
        Some(estimate)
    };
    let data = held_out(a, &job)?;
    let checkpoint = match a.weights.checkpoint_file() {
        Some(path) => {
            super::recorded::check_model(&path, c_model)?;
            let ckpt = Checkpoint::read(&path).map_err(|e| CliError::Usage(e.to_string()))?;
            check_checkpoint(&ckpt, &path, &job.model)
                .map_err(|e| CliError::Usage(format!("cannot evaluate: {e}")))?;
            Some((path, ckpt))
        }
        None => None,
    };
    // Every tensor of `--init-from` checked against the model before anything compiles.
    if let (Some(dir), Some(map)) = (&a.weights.init_from, &map) {
        check_hf_import(map, dir, &stored_weights(&job.model))
            .map_err(|e| CliError::Usage(format!("cannot import `{}`: {e}", dir.display())))?;
    }
    let (client, mesh) = a.runtime.client_and_mesh(&layout, a.no_compile_cache)?;
    super::train::check_device_memory(&client, memory.as_ref(), "evaluate")?;
    // Only the forward program compiles (on the first batch): not the training step.
    let mut trainer = Trainer::for_evaluation(&client, &mesh, &job.model, job.options)?;
    match (&checkpoint, &a.weights.init_from, &map) {
        (Some((path, ckpt)), _, _) => {
            trainer.restore(ckpt, path)?;
        }
        (None, Some(dir), Some(map)) => trainer.import_hf(map, dir)?,
        _ => {
            return Err(CliError::Usage(
                "give `--checkpoint` or `--init-from`".into(),
            ));
        }
    }
    writeln!(
        out,
        "{} on {devices} {} devices",
        job.describe,
        client.platform()
    )?;
    let loss = mean_loss(&mut trainer, &data, a.batches, devices)?;
    writeln!(
        out,
        "compiled in {:.2} s ({}; the forward program alone)",
        trainer.compile_seconds(),
        trainer.cache_outcome()
    )?;
    writeln!(
        out,
        "eval on {}: loss {loss:.6}, perplexity {:.4} ({} batches of {} × {} tokens)",
        a.data.display(),
        loss.exp(),
        a.batches,
        job.batch_per_device * devices as i64,
        job.seq
    )?;
    Ok(())
}
