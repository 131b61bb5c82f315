//! `export`: a training checkpoint's weights as a Hugging Face model directory
//! (`model.safetensors` and `config.json`) that `transformers` loads as it is.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use stackscan_runtime::checkpoint::Checkpoint;
use stackscan_runtime::hf::{ExportDType, write_weights};

use super::CliError;
use stackscan_models::jobs::ModelName;

/// Arguments of `export`.
#[derive(Clone, Debug, Args)]
pub struct ExportArgs {
    /// The model the checkpoint is of (default: the one the checkpoint records, else the one
    /// a `config.json` given by `--config` says it is, else the first the command line
    /// knows).
    #[arg(long, value_name = "NAME", value_parser = super::args::ModelParser)]
    pub model: Option<ModelName>,
    /// The config it was trained at (as `train --config`; a Hugging Face `config.json`
    /// too); by default the one the checkpoint records, else the tiny preset.
    #[arg(long, value_name = "NAME|PATH")]
    pub config: Option<String>,
    /// The checkpoint: a `--save-every` directory (its `latest.safetensors`) or a file.
    #[arg(long, value_name = "PATH")]
    pub checkpoint: PathBuf,
    /// The Hugging Face directory to write (created; its `model.safetensors` and
    /// `config.json` replaced).
    #[arg(long, value_name = "DIR")]
    pub to: PathBuf,
    /// Store the weights as bf16 (half the size, what published checkpoints hold) instead
    /// of the f32 masters.
    #[arg(long)]
    pub bf16: bool,
}

/// Runs `export`.
pub fn run(a: &ExportArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let path = if a.checkpoint.is_dir() {
        a.checkpoint.join("latest.safetensors")
    } else {
        a.checkpoint.clone()
    };
    let recorded = match (&a.config, a.model) {
        (None, None) => super::recorded::recorded(&path)?,
        _ => None,
    };
    let config = match recorded {
        Some(c) => c,
        None => super::args::model_for(a.model, a.config.as_deref(), None)
            .load_or(
                a.config.as_deref(),
                stackscan_models::registry::Preset::Tiny,
            )
            .map_err(|e| CliError::Usage(format!("cannot build the model: {e}")))?,
    };
    super::recorded::check_model(&path, config.model())?;
    let map = config
        .hf_weights()
        .map_err(|e| CliError::Usage(e.to_string()))?;
    let ckpt = Checkpoint::read(&path).map_err(|e| CliError::Usage(e.to_string()))?;
    let theirs = stackscan_runtime::hf::export(&map, &ckpt.tensors).map_err(|e| {
        CliError::Usage(format!(
            "`{}` is not a checkpoint of {}: {e}",
            path.display(),
            config.describe()
        ))
    })?;
    let dtype = if a.bf16 {
        ExportDType::BF16
    } else {
        ExportDType::F32
    };
    write_weights(&a.to, &theirs, dtype)?;
    if let Some(json) = config.hf_config_json() {
        let text = serde_json::to_string_pretty(&json)?;
        stackscan_runtime::checkpoint::write_atomic(&a.to.join("config.json"), text.as_bytes())?;
    }
    writeln!(
        out,
        "wrote {} tensors of {} to {}",
        theirs.len(),
        path.display(),
        a.to.display()
    )?;
    Ok(())
}
