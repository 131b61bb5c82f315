//! Model configs as data, loaded one way for every command that takes a model (`train`,
//! `params`, `plan`, `timeline`): a preset kept in `examples/configs/` by name, a TOML file by
//! path, or a Hugging Face `config.json` by path ([`crate::hf_config`]). [`load`] does it for
//! one config type, [`ModelConfig::load`] for a model named at run time.
//!
//! A TOML file names its base preset, `extends = "qwen35-35b-a3b"` (default: the model's tiny
//! preset, so files written before `extends` read as they did), and every field it leaves
//! out, top-level or inside a table (`[gdn]`, `[attention]`, `[mla]`), is the base's: a file
//! that edits one width of a published model keeps the published sizes of everything else.
//! Which fields came from the base is a debug log line (`-v`). A misspelt or unknown field is
//! an error naming it, not a silently ignored line.
//!
//! ```
//! use stackscan_examples::configs::{self, ModelConfig};
//! use stackscan_examples::jobs::ModelName;
//! use stackscan_examples::qwen35::Qwen35Config;
//!
//! let c: Qwen35Config = configs::from_toml("extends = \"qwen35-35b-a3b\"\nlayers = 8", "inline")?;
//! assert_eq!((c.layers, c.d_model, c.gdn.key_dim), (8, 2048, 128));
//! let e = configs::from_toml::<Qwen35Config>("dmodel = 8", "inline").unwrap_err();
//! assert!(e.to_string().contains("unknown field `dmodel`"), "{e}");
//!
//! let llama = ModelConfig::load(ModelName::Llama, "llama3-8b")?;
//! assert_eq!(llama.model(), ModelName::Llama);
//! # Ok::<(), stackscan::Error>(())
//! ```

mod extends;
#[cfg(test)]
mod tests;

use std::path::Path;

use serde::Serialize;
use serde::de::DeserializeOwned;
use stackscan::{Error, Result};

pub use extends::{Filled, from_toml, read_toml};

use crate::deepseek3::DeepSeek3Config;
use crate::jobs::ModelName;
use crate::llama::LlamaConfig;
use crate::qwen35::Qwen35Config;

/// The Llama configs kept in the repository, by the name `--config` takes.
pub const LLAMA: [(&str, &str); 2] = [
    ("tiny", include_str!("../../configs/llama-tiny.toml")),
    ("llama3-8b", include_str!("../../configs/llama3-8b.toml")),
];

/// The Qwen3.5 configs kept in the repository, by the name `--config` takes.
pub const QWEN35: [(&str, &str); 2] = [
    ("tiny", include_str!("../../configs/qwen35-tiny.toml")),
    (
        "qwen35-35b-a3b",
        include_str!("../../configs/qwen35-35b-a3b.toml"),
    ),
];

/// The DeepSeek-V3 configs kept in the repository, by the name `--config` takes.
pub const DEEPSEEK3: [(&str, &str); 2] = [
    ("tiny", include_str!("../../configs/deepseek3-tiny.toml")),
    ("deepseek3", include_str!("../../configs/deepseek3.toml")),
];

/// A model's config type as data: its presets, which of its fields are tables to fill field
/// by field from a base, and its place in [`ModelConfig`].
pub trait ConfigFile: Serialize + DeserializeOwned + Clone {
    /// The model the config is of.
    const MODEL: ModelName;
    /// The presets by name, the tiny one first (the default base of a TOML file).
    const PRESETS: &'static [(&'static str, &'static str)];
    /// The fields that are tables of named fields (`gdn`, `attention`, `mla`): a file's
    /// partial table is completed from the base's. Every other value, an enum written as a
    /// table (`form = { chunked = 64 }`) included, is replaced whole.
    const TABLES: &'static [&'static str];

    /// This config as a [`ModelConfig`].
    fn into_model(self) -> ModelConfig;

    /// The config of `m` if it is of this model.
    fn from_model(m: ModelConfig) -> Option<Self>;

    /// The preset names, as error messages list them.
    fn preset_names() -> Vec<&'static str> {
        Self::PRESETS.iter().map(|(n, _)| *n).collect()
    }
}

impl ConfigFile for LlamaConfig {
    const MODEL: ModelName = ModelName::Llama;
    const PRESETS: &'static [(&'static str, &'static str)] = &LLAMA;
    const TABLES: &'static [&'static str] = &[];

    fn into_model(self) -> ModelConfig {
        ModelConfig::Llama(self)
    }

    fn from_model(m: ModelConfig) -> Option<Self> {
        match m {
            ModelConfig::Llama(c) => Some(c),
            _ => None,
        }
    }
}

impl ConfigFile for DeepSeek3Config {
    const MODEL: ModelName = ModelName::DeepSeek3;
    const PRESETS: &'static [(&'static str, &'static str)] = &DEEPSEEK3;
    const TABLES: &'static [&'static str] = &["mla"];

    fn into_model(self) -> ModelConfig {
        ModelConfig::DeepSeek3(self)
    }

    fn from_model(m: ModelConfig) -> Option<Self> {
        match m {
            ModelConfig::DeepSeek3(c) => Some(c),
            _ => None,
        }
    }
}

impl ConfigFile for Qwen35Config {
    const MODEL: ModelName = ModelName::Qwen35;
    const PRESETS: &'static [(&'static str, &'static str)] = &QWEN35;
    const TABLES: &'static [&'static str] = &["gdn", "attention"];

    fn into_model(self) -> ModelConfig {
        ModelConfig::Qwen35(self)
    }

    fn from_model(m: ModelConfig) -> Option<Self> {
        match m {
            ModelConfig::Qwen35(c) => Some(c),
            _ => None,
        }
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

/// A config of `C` by `spec`: a preset name ([`ConfigFile::PRESETS`]), a Hugging Face
/// `config.json` (a path ending in `.json`, or a model directory holding one; it must
/// describe this model's architecture), or a TOML file ([`from_toml`]: `extends` and
/// deny-unknown-fields).
pub fn load<C: ConfigFile>(spec: &str) -> Result<C> {
    if let Some(c) = preset::<C>(spec) {
        return c;
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
        let m = crate::hf_config::parse_as(C::MODEL, &text)
            .map_err(|e| crate::hf_config::in_file(path, e))?;
        return C::from_model(m)
            .ok_or_else(|| invalid(format!("`{spec}` did not read as a `{}` config", C::MODEL)));
    }
    from_toml(&text, spec)
}

/// A config of any of the models, as commands that take `--model` hold it.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelConfig {
    /// [`LlamaConfig`].
    Llama(LlamaConfig),
    /// [`DeepSeek3Config`].
    DeepSeek3(DeepSeek3Config),
    /// [`Qwen35Config`].
    Qwen35(Qwen35Config),
}

impl ModelConfig {
    /// The config of `model` by `spec` (a preset name, a TOML path or a `config.json` path;
    /// see [`load`]): the one loading path of `train`, `params`, `plan` and `timeline`.
    pub fn load(model: ModelName, spec: &str) -> Result<ModelConfig> {
        match model {
            ModelName::Llama => load::<LlamaConfig>(spec).map(ModelConfig::Llama),
            ModelName::DeepSeek3 => load::<DeepSeek3Config>(spec).map(ModelConfig::DeepSeek3),
            ModelName::Qwen35 => load::<Qwen35Config>(spec).map(ModelConfig::Qwen35),
        }
    }

    /// [`ModelConfig::load`] of `spec`, or the preset `default` when none is given.
    pub fn load_or(model: ModelName, spec: Option<&str>, default: Preset) -> Result<ModelConfig> {
        match spec {
            Some(spec) => ModelConfig::load(model, spec),
            None => Ok(ModelConfig::preset(model, default)),
        }
    }

    /// The tiny or the published config of `model`.
    pub fn preset(model: ModelName, which: Preset) -> ModelConfig {
        match (model, which) {
            (ModelName::Llama, Preset::Tiny) => ModelConfig::Llama(LlamaConfig::tiny()),
            (ModelName::Llama, Preset::Published) => ModelConfig::Llama(LlamaConfig::llama3_8b()),
            (ModelName::DeepSeek3, Preset::Tiny) => ModelConfig::DeepSeek3(DeepSeek3Config::tiny()),
            (ModelName::DeepSeek3, Preset::Published) => {
                ModelConfig::DeepSeek3(DeepSeek3Config::deepseek3())
            }
            (ModelName::Qwen35, Preset::Tiny) => ModelConfig::Qwen35(Qwen35Config::tiny()),
            (ModelName::Qwen35, Preset::Published) => {
                ModelConfig::Qwen35(Qwen35Config::qwen35_35b_a3b())
            }
        }
    }

    /// A Hugging Face `config.json` of any of the models, the model read from its
    /// `model_type` (or `architectures`).
    pub fn from_hf_file(path: &Path) -> Result<ModelConfig> {
        crate::hf_config::load(path)
    }

    /// The model this is a config of.
    pub fn model(&self) -> ModelName {
        match self {
            ModelConfig::Llama(_) => ModelName::Llama,
            ModelConfig::DeepSeek3(_) => ModelName::DeepSeek3,
            ModelConfig::Qwen35(_) => ModelName::Qwen35,
        }
    }

    /// Sequences per device.
    pub fn batch_per_device(&self) -> i64 {
        match self {
            ModelConfig::Llama(c) => c.batch_per_device,
            ModelConfig::DeepSeek3(c) => c.batch_per_device,
            ModelConfig::Qwen35(c) => c.batch_per_device,
        }
    }

    /// This config with `batch` sequences per device.
    pub fn with_batch_per_device(mut self, batch: i64) -> ModelConfig {
        match &mut self {
            ModelConfig::Llama(c) => c.batch_per_device = batch,
            ModelConfig::DeepSeek3(c) => c.batch_per_device = batch,
            ModelConfig::Qwen35(c) => c.batch_per_device = batch,
        }
        self
    }
}

impl ModelConfig {
    /// Decoder layers (the stack's depth).
    pub fn layers(&self) -> usize {
        match self {
            ModelConfig::Llama(c) => c.layers,
            ModelConfig::DeepSeek3(c) => c.layers,
            ModelConfig::Qwen35(c) => c.layers,
        }
    }

    /// This config with `layers` decoder layers (checked against the stack's pattern when the
    /// model is built).
    pub fn with_layers(mut self, layers: usize) -> ModelConfig {
        match &mut self {
            ModelConfig::Llama(c) => c.layers = layers,
            ModelConfig::DeepSeek3(c) => c.layers = layers,
            ModelConfig::Qwen35(c) => c.layers = layers,
        }
        self
    }
}

/// Which of a model's two kept configs a command uses when given no `--config`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preset {
    /// The tiny config the main job trains (`tiny`).
    Tiny,
    /// The published full size (`llama3-8b`, `deepseek3`, `qwen35-35b-a3b`).
    Published,
}
