//! Which built-in model a `config.json` is of, what reading one gives, and a typed reader per
//! model (what each config type's `ConfigFile::from_hf` calls).

use stackscan::Result;

use super::{invalid, parse_as};
use crate::deepseek3::DeepSeek3Config;
use crate::qwen35::Qwen35Config;

/// The built-in models whose `config.json` files are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HfArch {
    /// [`LlamaConfig`](crate::llama::LlamaConfig).
    Llama,
    /// [`DeepSeek3Config`].
    DeepSeek3,
    /// [`Qwen35Config`].
    Qwen35,
}

impl std::fmt::Display for HfArch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use crate::configs::ConfigFile;
        f.write_str(match self {
            HfArch::Llama => crate::llama::LlamaConfig::MODEL,
            HfArch::DeepSeek3 => DeepSeek3Config::MODEL,
            HfArch::Qwen35 => Qwen35Config::MODEL,
        })
    }
}

/// A model read from a `config.json`.
#[derive(Clone, Debug, PartialEq)]
pub enum HfModel {
    /// A Llama.
    Llama(crate::llama::LlamaConfig),
    /// A DeepSeek-V3.
    DeepSeek3(DeepSeek3Config),
    /// A Qwen3.5.
    Qwen35(Qwen35Config),
}

impl HfModel {
    /// The config as commands hold it.
    pub fn into_config(self) -> crate::registry::ModelConfig {
        use crate::registry::ModelConfig;
        match self {
            HfModel::Llama(c) => ModelConfig::new::<crate::llama_macro::LlamaModel>(c),
            HfModel::DeepSeek3(c) => ModelConfig::new::<crate::deepseek3::DeepSeek3Model>(c),
            HfModel::Qwen35(c) => ModelConfig::new::<crate::qwen35::Qwen35Model>(c),
        }
    }
}

/// A Llama `config.json`'s text as its config.
pub fn parse_llama(text: &str) -> Result<crate::llama::LlamaConfig> {
    match parse_as(HfArch::Llama, text)? {
        HfModel::Llama(c) => Ok(c),
        _ => Err(invalid("not a Llama config")),
    }
}

/// A DeepSeek-V3 `config.json`'s text as its config.
pub fn parse_deepseek3(text: &str) -> Result<DeepSeek3Config> {
    match parse_as(HfArch::DeepSeek3, text)? {
        HfModel::DeepSeek3(c) => Ok(c),
        _ => Err(invalid("not a DeepSeek-V3 config")),
    }
}

/// A Qwen3.5 `config.json`'s text as its config.
pub fn parse_qwen35(text: &str) -> Result<Qwen35Config> {
    match parse_as(HfArch::Qwen35, text)? {
        HfModel::Qwen35(c) => Ok(c),
        _ => Err(invalid("not a Qwen3.5 config")),
    }
}
