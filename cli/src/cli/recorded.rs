//! What a checkpoint records of the run that wrote it: the model, its config, the precision
//! the config declared and the Hugging Face file's keys an export writes back, in the file's
//! metadata. `eval`, `export` and `train
//! --resume` then read a checkpoint without `--model` or `--config`, and a checkpoint of
//! another model is refused by both names before any tensor is compared.

use std::path::Path;

use stackscan_models::registry::{ModelConfig, ModelName};
use stackscan_runtime::checkpoint::Checkpoint;

use super::CliError;

/// Metadata key: the model's name, as `--model` takes it.
pub const MODEL: &str = "stackscan.model";
/// Metadata key: the config's fields as JSON ([`ModelConfig::to_json`]).
pub const CONFIG: &str = "stackscan.config";
/// Metadata key: the precision policy the config declared, where it declared one.
pub const PRECISION: &str = "stackscan.precision";
/// Metadata key: the keys of the Hugging Face file the config was read from that an export
/// writes back ([`ModelConfig::hf_extra`]), as JSON, where there are any.
pub const HF_EXTRA: &str = "stackscan.hf_extra";
/// The config's `no_decay` patterns, a JSON array (absent when none).
pub const NO_DECAY: &str = "stackscan.no_decay";

/// Records `config` (and its model) in `ckpt`'s metadata.
pub fn record(ckpt: &mut Checkpoint, config: &ModelConfig) {
    ckpt.metadata
        .insert(MODEL.to_owned(), config.model().as_str().to_owned());
    ckpt.metadata
        .insert(CONFIG.to_owned(), config.to_json().to_string());
    if let Some(p) = config.precision() {
        ckpt.metadata.insert(PRECISION.to_owned(), p.to_string());
    }
    if !config.no_decay().is_empty() {
        ckpt.metadata.insert(
            NO_DECAY.to_owned(),
            serde_json::Value::from(config.no_decay().to_vec()).to_string(),
        );
    }
    if !config.hf_extra().is_empty() {
        let extra = serde_json::Value::Object(config.hf_extra().clone());
        ckpt.metadata.insert(HF_EXTRA.to_owned(), extra.to_string());
    }
}

/// The config the checkpoint at `path` records, read from its header alone; `None` for a
/// checkpoint that records none (one written by the library, or before the record). A
/// record naming a model this command line does not know, or fields its config does not
/// take, is a usage error naming the file.
pub fn recorded(path: &Path) -> Result<Option<ModelConfig>, CliError> {
    let Ok(meta) = Checkpoint::metadata_of(path) else {
        // An unreadable file is refused, with its reason, where it is read in full.
        return Ok(None);
    };
    let Some(name) = meta.get(MODEL) else {
        return Ok(None);
    };
    let bad = |why: String| CliError::Usage(format!("checkpoint `{}`: {why}", path.display()));
    let model: ModelName = name.parse().map_err(|e| bad(format!("{e}")))?;
    let fields: serde_json::Value = meta
        .get(CONFIG)
        .map(|t| serde_json::from_str(t))
        .transpose()
        .map_err(|e| bad(format!("its `{CONFIG}` is not JSON: {e}")))?
        .ok_or_else(|| {
            bad(format!(
                "it names the model `{model}` but records no config"
            ))
        })?;
    let precision = meta
        .get(PRECISION)
        .map(|p| p.parse::<stackscan::Precision>())
        .transpose()
        .map_err(|e| bad(format!("its `{PRECISION}`: {e}")))?;
    let extra = match meta.get(HF_EXTRA).map(|t| serde_json::from_str(t)) {
        Some(Ok(serde_json::Value::Object(map))) => map,
        Some(_) => return Err(bad(format!("its `{HF_EXTRA}` is not a JSON object"))),
        None => serde_json::Map::new(),
    };
    let no_decay: Vec<String> = match meta.get(NO_DECAY).map(|t| serde_json::from_str(t)) {
        Some(Ok(patterns)) => patterns,
        Some(Err(e)) => return Err(bad(format!("its `{NO_DECAY}` is not a list of names: {e}"))),
        None => Vec::new(),
    };
    let config = model
        .config_from_json(fields)
        .map_err(|e| bad(e.to_string()))?;
    Ok(Some(
        config
            .with_precision(precision)
            .with_no_decay(no_decay)
            .with_hf_extra(extra),
    ))
}

/// Refuses a checkpoint (at `path`) that records another model than `model`, naming both.
pub fn check_model(path: &Path, model: ModelName) -> Result<(), CliError> {
    match Checkpoint::metadata_of(path)
        .ok()
        .and_then(|m| m.get(MODEL).cloned())
    {
        Some(theirs) if theirs != model.as_str() => Err(CliError::Usage(format!(
            "checkpoint `{}` is of the model `{theirs}`, not `{model}`: give `--model {theirs}` \
             (or no `--model` and no `--config`: the checkpoint's own are taken)",
            path.display()
        ))),
        _ => Ok(()),
    }
}
