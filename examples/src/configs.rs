//! Model configs as data: TOML files in `examples/configs/`, read by name (`tiny`,
//! `llama3-8b`) or by path, into the config structs (which derive serde's traits, every field
//! defaulting to the tiny config's value). A misspelt or unknown field is an error naming it,
//! not a silently ignored line.
//!
//! ```
//! use stackscan_examples::llama::LlamaConfig;
//! let c = LlamaConfig::load("llama3-8b")?;
//! assert_eq!((c.d_model, c.layers), (4096, 32));
//! let e = stackscan_examples::configs::from_toml::<LlamaConfig>("dmodel = 8", "inline").unwrap_err();
//! assert!(e.to_string().contains("unknown field `dmodel`"), "{e}");
//! # Ok::<(), stackscan::Error>(())
//! ```

use std::path::Path;

use serde::de::DeserializeOwned;
use stackscan::{Error, Result};

/// The Llama configs kept in the repository, by the name `--config` takes.
pub const LLAMA: [(&str, &str); 2] = [
    ("tiny", include_str!("../configs/llama-tiny.toml")),
    ("llama3-8b", include_str!("../configs/llama3-8b.toml")),
];

/// The Qwen3.5 configs kept in the repository, by the name `--config` takes.
pub const QWEN35: [(&str, &str); 2] = [
    ("tiny", include_str!("../configs/qwen35-tiny.toml")),
    (
        "qwen35-35b-a3b",
        include_str!("../configs/qwen35-35b-a3b.toml"),
    ),
];

/// Parses a config; `source` names the text in the error (a file or a built-in name).
pub fn from_toml<C: DeserializeOwned>(text: &str, source: &str) -> Result<C> {
    toml::from_str(text).map_err(|e| Error::InvalidOp {
        op: "config",
        message: format!("`{source}`: {}", e.message()),
    })
}

/// A built-in config of `built_in` by name, or a TOML file by path.
pub fn load<C: DeserializeOwned>(built_in: &[(&str, &str)], name_or_path: &str) -> Result<C> {
    if let Some((name, text)) = built_in.iter().find(|(n, _)| *n == name_or_path) {
        return from_toml(text, name);
    }
    let text = std::fs::read_to_string(Path::new(name_or_path)).map_err(|e| {
        let names: Vec<&str> = built_in.iter().map(|(n, _)| *n).collect();
        Error::InvalidOp {
            op: "config",
            message: format!(
                "`{name_or_path}` is neither a built-in config ({}) nor a readable file: {e}",
                names.join(", ")
            ),
        }
    })?;
    from_toml(&text, name_or_path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llama::LlamaConfig;

    #[test]
    fn the_files_hold_the_configs_of_the_code() {
        assert_eq!(LlamaConfig::load("tiny"), Ok(LlamaConfig::tiny()));
        assert_eq!(LlamaConfig::load("llama3-8b"), Ok(LlamaConfig::llama3_8b()));
    }

    #[test]
    fn left_out_fields_default_to_tiny_and_unknown_ones_are_errors() {
        let c: LlamaConfig = from_toml("layers = 8\nd_model = 128", "inline").unwrap();
        assert_eq!(
            c,
            LlamaConfig {
                layers: 8,
                d_model: 128,
                ..LlamaConfig::tiny()
            }
        );
        let e = from_toml::<LlamaConfig>("layers = 8\nheadz = 4", "my.toml").unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("`my.toml`"), "{msg}");
        assert!(msg.contains("unknown field `headz`"), "{msg}");
        assert!(msg.contains("`heads`"), "lists the valid fields: {msg}");
        let e = from_toml::<LlamaConfig>("layers = \"four\"", "my.toml").unwrap_err();
        assert!(e.to_string().contains("invalid type"), "{e}");
        let e = LlamaConfig::load("no-such-config").unwrap_err().to_string();
        assert!(
            e.contains("neither a built-in config (tiny, llama3-8b)"),
            "{e}"
        );
    }
}
