//! Model configs as data: TOML files in `examples/configs/`, read by name (`tiny`,
//! `llama3-8b`; `tiny`, `deepseek3` for DeepSeek-V3) or by path, into the config structs (which derive serde's traits, every field
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

/// The DeepSeek-V3 configs kept in the repository, by the name `--config` takes.
pub const DEEPSEEK3: [(&str, &str); 2] = [
    ("tiny", include_str!("../configs/deepseek3-tiny.toml")),
    ("deepseek3", include_str!("../configs/deepseek3.toml")),
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
    fn the_qwen35_files_hold_the_configs_of_the_code() {
        use crate::qwen35::Qwen35Config;
        assert_eq!(Qwen35Config::load("tiny"), Ok(Qwen35Config::tiny()));
        assert_eq!(
            Qwen35Config::load("qwen35-35b-a3b"),
            Ok(Qwen35Config::qwen35_35b_a3b())
        );
    }

    #[test]
    fn qwen35_tables_default_per_field_and_refuse_unknown_ones() {
        use crate::gdn_layer::GdnForm;
        use crate::qwen35::Qwen35Config;
        let c: Qwen35Config = from_toml(
            "layers = 40\n[gdn]\nform = \"recurrent\"\n[attention]\nheads = 16",
            "inline",
        )
        .unwrap();
        let tiny = Qwen35Config::tiny();
        assert_eq!(c.layers, 40);
        assert_eq!(c.gdn.form, GdnForm::Recurrent);
        assert_eq!(c.gdn.key_heads, tiny.gdn.key_heads);
        assert_eq!((c.attention.heads, c.attention.kv_heads), (16, 1));
        let chunk: Qwen35Config = from_toml("[gdn]\nform = { chunked = 8 }", "inline").unwrap();
        assert_eq!(chunk.gdn.form, GdnForm::Chunked(8));
        let e = from_toml::<Qwen35Config>("[gdn]\nd_model = 64", "q.toml").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("`q.toml`") && msg.contains("unknown field `d_model`"),
            "{msg}"
        );
        let e = from_toml::<Qwen35Config>("[gdn]\nform = \"chunky\"", "q.toml").unwrap_err();
        assert!(e.to_string().contains("unknown variant `chunky`"), "{e}");
        let e = Qwen35Config::load("no-such").unwrap_err().to_string();
        assert!(
            e.contains("neither a built-in config (tiny, qwen35-35b-a3b)"),
            "{e}"
        );
    }

    #[test]
    fn a_qwen35_config_that_does_not_fit_names_its_field() {
        use crate::qwen35::{Qwen35Config, for_config};
        let bad = |text: &str| for_config(&from_toml::<Qwen35Config>(text, "q").unwrap());
        // Any whole number of blocks is a depth; 10 layers are not.
        assert!(bad("layers = 12").is_ok());
        let e = bad("layers = 10").unwrap_err().to_string();
        assert!(e.contains("`Qwen35Config.layers` is 10"), "{e}");
        let e = bad("[attention]\nkv_heads = 3").unwrap_err().to_string();
        assert!(e.contains("`attention.kv_heads` (3)"), "{e}");
        let e = bad("[gdn]\nkey_heads = 3").unwrap_err().to_string();
        assert!(e.contains("`gdn.key_heads` (3)"), "{e}");
        let e = bad("[attention]\nrotary_dim = 7").unwrap_err().to_string();
        assert!(e.contains("`attention.rotary_dim` (7)"), "{e}");
    }

    #[test]
    fn the_deepseek3_files_hold_the_configs_of_the_code() {
        use crate::deepseek3::DeepSeek3Config;
        assert_eq!(DeepSeek3Config::load("tiny"), Ok(DeepSeek3Config::tiny()));
        assert_eq!(
            DeepSeek3Config::load("deepseek3"),
            Ok(DeepSeek3Config::deepseek3())
        );
        // A nested table defaults field by field; an unknown field in it is named.
        let c: DeepSeek3Config = from_toml("layers = 8\n[mla]\nheads = 8", "inline").unwrap();
        assert_eq!((c.mla.heads, c.mla.q_lora), (8, 48));
        let e = from_toml::<DeepSeek3Config>("[mla]\nq_rank = 4", "ds.toml").unwrap_err();
        assert!(e.to_string().contains("unknown field `q_rank`"), "{e}");
        // The expert-parallel mesh is a run setting (`--ep`), not data.
        let e = from_toml::<DeepSeek3Config>("expert_mesh = 4", "ds.toml").unwrap_err();
        assert!(e.to_string().contains("unknown field `expert_mesh`"), "{e}");
        // What serde writes (the TOML writer is not built in; JSON is) reads back the same.
        for c in [DeepSeek3Config::tiny(), DeepSeek3Config::deepseek3()] {
            let text = serde_json::to_string(&c).unwrap();
            let back: DeepSeek3Config = serde_json::from_str(&text).unwrap();
            assert_eq!(back, c, "{text}");
        }
        let e = DeepSeek3Config::load("llama3-8b").unwrap_err().to_string();
        assert!(
            e.contains("neither a built-in config (tiny, deepseek3)"),
            "{e}"
        );
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
