//! A typed reader per built-in model: what each config type's `ConfigFile::from_hf` calls.

use stackscan::Result;

use super::parse_as;
use crate::deepseek3::DeepSeek3Config;
use crate::llama::LlamaConfig;
use crate::qwen35::Qwen35Config;

/// A Llama `config.json`'s text as its config.
pub fn parse_llama(text: &str) -> Result<LlamaConfig> {
    parse_as(text, super::llama::read)
}

/// A DeepSeek-V3 `config.json`'s text as its config.
pub fn parse_deepseek3(text: &str) -> Result<DeepSeek3Config> {
    parse_as(text, super::deepseek3)
}

/// A Qwen3.5 `config.json`'s text as its config.
pub fn parse_qwen35(text: &str) -> Result<Qwen35Config> {
    parse_as(text, super::qwen35)
}
