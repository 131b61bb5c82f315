//! `export`: a training checkpoint's weights as a Hugging Face model directory
//! (`model.safetensors` and `config.json`) that `transformers` loads as it is.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use stackscan_runtime::checkpoint::CheckpointReader;
use stackscan_runtime::hf::{ExportDType, export_to};

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
    /// Split the weights into files of at most this size (bytes, or a whole number with a
    /// unit: KB, MB, GB, KiB, MiB, GiB), with `model.safetensors.index.json` naming each
    /// tensor's file, as `transformers` shards a large model; one `model.safetensors` when
    /// they fit.
    #[arg(long, value_name = "SIZE", value_parser = shard_size)]
    pub max_shard_size: Option<u64>,
}

/// A size in bytes: a whole number, optionally with `KB`, `MB`, `GB` (powers of 1000, as
/// `transformers` reads them) or `KiB`, `MiB`, `GiB`.
fn shard_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let scale: u64 = match unit.trim() {
        "" | "B" => 1,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        other => {
            return Err(format!(
                "unknown unit `{other}`; give KB, MB, GB, KiB, MiB or GiB"
            ));
        }
    };
    let n: u64 = number
        .parse()
        .map_err(|_| format!("`{s}` is not a size: a whole number, then a unit or none"))?;
    match n.checked_mul(scale) {
        Some(0) | None => Err(format!("`{s}` must be a positive size")),
        Some(b) => Ok(b),
    }
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
    // The header first: every weight the map reads there with its shape, before anything
    // is converted or written. Then one weight at a time, each checked against its checksum
    // as it is read (the moments are never read).
    let mut ckpt = CheckpointReader::open(&path).map_err(|e| CliError::Usage(e.to_string()))?;
    let not_ours = |why: String| {
        CliError::Usage(format!(
            "`{}` is not a checkpoint of {}: {why}",
            path.display(),
            config.describe()
        ))
    };
    let shapes: std::collections::BTreeMap<&str, &[i64]> = ckpt.shapes().collect();
    for w in &map.weights {
        match shapes.get(w.name.as_str()) {
            None => return Err(not_ours(format!("it has no weight `{}`", w.name))),
            Some(&shape) if shape != w.shape.as_slice() => {
                return Err(not_ours(format!(
                    "its `{}` is {shape:?}, the model's {:?}",
                    w.name, w.shape
                )));
            }
            Some(_) => {}
        }
    }
    let dtype = if a.bf16 {
        ExportDType::BF16
    } else {
        ExportDType::F32
    };
    let written = export_to(&a.to, &map, dtype, a.max_shard_size, |j| {
        ckpt.tensor(&map.weights[j].name, &map.weights[j].shape)
    })?;
    if let Some(json) = config.hf_config_json() {
        let text = serde_json::to_string_pretty(&json)?;
        stackscan_runtime::checkpoint::write_atomic(&a.to.join("config.json"), text.as_bytes())?;
    }
    writeln!(
        out,
        "wrote {} tensors of {} to {}",
        written,
        path.display(),
        a.to.display()
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::shard_size;

    #[test]
    fn shard_sizes_read_as_transformers_writes_them() {
        assert_eq!(shard_size("5GB"), Ok(5_000_000_000));
        assert_eq!(shard_size("500MB"), Ok(500_000_000));
        assert_eq!(shard_size("2GiB"), Ok(2 << 30));
        assert_eq!(shard_size("4096"), Ok(4096));
        assert!(shard_size("0GB").is_err());
        assert!(shard_size("5TB").unwrap_err().contains("unknown unit `TB`"));
        assert!(shard_size("GB").is_err());
    }
}
