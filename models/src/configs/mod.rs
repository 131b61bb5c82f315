//! Model configs as data, loaded one way for every command that takes a model (`train`,
//! `params`, `plan`, `timeline`): a preset kept in `models/configs/` by name, a TOML file by
//! path, or a Hugging Face `config.json` by path ([`crate::hf_config`]). [`load`] does it for
//! one config type, [`ModelName::load`](crate::registry::ModelName::load) for a model named
//! at run time.
//!
//! A TOML file names its base preset, `extends = "qwen35-35b-a3b"` (default: the model's tiny
//! preset, so files written before `extends` read as they did), and every field it leaves
//! out, top-level or inside a table (`[gdn]`, `[attention]`, `[mla]`), is the base's: a file
//! that edits one width of a published model keeps the published sizes of everything else.
//! Which fields came from the base is a debug log line (`-v`). A misspelt or unknown field is
//! an error naming it, not a silently ignored line.
//!
//! ```
//! use stackscan_models::configs;
//! use stackscan_models::qwen35::Qwen35Config;
//! use stackscan_models::registry::ModelName;
//!
//! let c: Qwen35Config = configs::from_toml("extends = \"qwen35-35b-a3b\"\nlayers = 8", "inline")?;
//! assert_eq!((c.layers, c.d_model, c.gdn.key_dim), (8, 2048, 128));
//! let e = configs::from_toml::<Qwen35Config>("dmodel = 8", "inline").unwrap_err();
//! assert!(e.to_string().contains("unknown field `dmodel`"), "{e}");
//!
//! let llama: ModelName = "llama".parse()?;
//! assert_eq!(llama.load("llama3-8b")?.model(), llama);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod extends;
#[cfg(test)]
mod tests;

use std::path::Path;

use serde::Serialize;
use serde::de::DeserializeOwned;
use stackscan::{Error, Precision, Result};

pub use extends::{Filled, from_toml, log_filled, read_toml};

/// A model's config type as data: its presets, which of its fields are tables to fill field
/// by field from a base, and how a Hugging Face `config.json` reads as one.
pub trait ConfigFile: Serialize + DeserializeOwned + Clone + 'static {
    /// The name of the model the config is of (`--model NAME`).
    const MODEL: &'static str;
    /// The presets by name, the tiny one first (the default base of a TOML file).
    const PRESETS: &'static [(&'static str, &'static str)];
    /// The fields that are tables of named fields (`gdn`, `attention`, `mla`): a file's
    /// partial table is completed from the base's. Every other value, an enum written as a
    /// table (`form = { chunked = 64 }`) included, is replaced whole.
    const TABLES: &'static [&'static str];
    /// The `model_type` values of the Hugging Face `config.json` files [`from_hf`](Self::from_hf)
    /// reads: how a file is recognised as this model's, by [`crate::hf_config::parse`] among
    /// every registered model. Empty for a model without a reader.
    const HF_MODEL_TYPES: &'static [&'static str] = &[];
    /// The `architectures` class names of those files, which identify a file that has no
    /// `model_type`.
    const HF_CLASSES: &'static [&'static str] = &[];
    /// Every key of the family's `config.json` beyond
    /// [`COMMON`](crate::hf_config::keys::COMMON), and what [`ConfigFile::from_hf`] does with
    /// it: a file that sets a key refused here is refused before it is read.
    const HF_KEYS: &'static [(&'static str, crate::hf_config::keys::HfKey)] = &[];

    /// The config a Hugging Face `config.json`'s text describes; by default none can.
    fn from_hf(text: &str) -> Result<Self> {
        let _ = text;
        Err(invalid(format!(
            "the model `{}` has no `config.json` reader; give a preset ({}) or a TOML file",
            Self::MODEL,
            Self::preset_names().join(", ")
        )))
    }

    /// The preset names, as error messages list them.
    fn preset_names() -> Vec<&'static str> {
        Self::PRESETS.iter().map(|(n, _)| *n).collect()
    }
}

pub(crate) fn invalid(message: impl Into<String>) -> Error {
    Error::InvalidOp {
        op: "config",
        message: message.into(),
    }
}

/// The preset `name` of `C`, if there is one. A preset is complete: it is read with no base.
pub fn preset<C: ConfigFile>(name: &str) -> Option<Result<C>> {
    let (name, text) = C::PRESETS.iter().find(|(n, _)| *n == name)?;
    Some(toml::from_str(text).map_err(|e| {
        invalid(format!(
            "preset `{name}` of `{}`: {}",
            C::MODEL,
            e.message()
        ))
    }))
}

/// A preset of `C` compiled into the binary, parsed: what `LlamaConfig::tiny()` and the other
/// Rust constructors return, so a preset's sizes are written once, in its TOML file.
///
/// # Panics
///
/// If the preset is missing or does not parse: a mistake in this crate's own files, which
/// `configs::tests::every_preset_parses_and_names_its_model` catches, never a user's input.
pub fn built_in<C: ConfigFile>(name: &str) -> C {
    match preset::<C>(name) {
        Some(Ok(c)) => c,
        Some(Err(e)) => panic!("the built-in preset `{name}` does not parse: {e}"),
        None => panic!("`{}` has no built-in preset `{name}`", C::MODEL),
    }
}

/// A config of `C` by `spec`: a preset name ([`ConfigFile::PRESETS`]), a Hugging Face
/// `config.json` (a path ending in `.json`, or a model directory holding one; it must
/// describe this model's architecture), or a TOML file ([`from_toml`]: `extends` and
/// deny-unknown-fields).
pub fn load<C: ConfigFile>(spec: &str) -> Result<C> {
    load_with_keys(spec).map(|(c, _)| c)
}

/// What a config file says beside its model's config: the keys of every model's file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FileKeys {
    /// `precision = "bf16"`: the policy it trains under (`None`: the stack attribute's).
    pub precision: Option<Precision>,
    /// `no_decay = [...]`: weight-name patterns AdamW's decay spares ([`crate::decay`]).
    pub no_decay: Vec<String>,
}

/// The Hugging Face `config.json` `spec` names, if it names one: a `.json` file, or a model
/// directory holding one (as [`load_with_keys`] reads them).
pub fn hf_file(spec: &str) -> Option<std::path::PathBuf> {
    let given = Path::new(spec);
    let in_dir = given.join("config.json");
    if given.is_dir() && in_dir.is_file() {
        Some(in_dir)
    } else if given.is_file() && given.extension().is_some_and(|x| x == "json") {
        Some(given.to_owned())
    } else {
        None
    }
}

/// [`load`], and the keys of every model's file a TOML file declares ([`FileKeys`]; none for
/// a preset or a `config.json`).
pub fn load_with_keys<C: ConfigFile>(spec: &str) -> Result<(C, FileKeys)> {
    if let Some(c) = preset::<C>(spec) {
        return c.map(|c| (c, FileKeys::default()));
    }
    let given = Path::new(spec);
    // A model's directory as the Hub lays it out holds its `config.json`.
    let in_dir = given.join("config.json");
    let path = if given.is_dir() && in_dir.is_file() {
        in_dir.as_path()
    } else if given.is_dir() {
        return Err(invalid(format!(
            "`{spec}` is a directory without a `config.json`; give a model directory as the \
             Hub lays it out, a `config.json` or TOML file, or a built-in config ({})",
            C::preset_names().join(", ")
        )));
    } else {
        given
    };
    let text = std::fs::read_to_string(path).map_err(|e| {
        invalid(format!(
            "`{spec}` is neither a built-in config ({}) nor a readable file: {e}",
            C::preset_names().join(", ")
        ))
    })?;
    if path.extension().is_some_and(|x| x == "json") {
        return C::from_hf(&text)
            .map(|c| (c, FileKeys::default()))
            .map_err(|e| crate::hf_config::in_file(path, e));
    }
    let filled = read_toml::<C>(&text, spec)?;
    log_filled(&filled, spec);
    Ok((
        filled.config,
        FileKeys {
            precision: filled.precision,
            no_decay: filled.no_decay,
        },
    ))
}
