//! Hugging Face `config.json` files of DeepSeek-V3 and Qwen3.5 read into our configs, so a
//! user points `plan` or `timeline` at the file they have. Only the fields our models use are
//! read (unknown fields are ignored, as the files carry many for other tools); a missing or
//! out-of-range field is a typed error naming it. Qwen3.5's file nests the decoder's fields
//! under `text_config` (it is a vision-language model); a flat text-only file reads as well.
//!
//! The stacks are declared at compile time (`#[layer_stack]`), so a file must describe the
//! depth and layer pattern of a declared stack: DeepSeek-V3's 61 layers with
//! `first_k_dense_replace = 3`, Qwen3.5's 40 layers in blocks of three linear-attention (GDN)
//! layers and one full-attention layer; widths, heads and expert counts are free.
//!
//! ```
//! use stackscan_examples::hf_config::{HfModel, parse};
//!
//! let text = include_str!("../configs/hf/deepseek-v3.json");
//! let HfModel::DeepSeek3(c) = parse(text)? else { unreachable!() };
//! assert_eq!((c.layers, c.dense_layers, c.experts, c.top_k), (61, 3, 256, 8));
//! # Ok::<(), stackscan::Error>(())
//! ```

use std::path::Path;

use serde::Deserialize;
use stackscan::{Error, Result};

use crate::deepseek3::DeepSeek3Config;
use crate::gated_attention::AttentionConfig;
use crate::gdn_layer::{GdnConfig, GdnForm};
use crate::mla::MlaConfig;
use crate::qwen35::Qwen35Config;

/// A model read from a `config.json`.
#[derive(Clone, Debug, PartialEq)]
pub enum HfModel {
    /// `model_type = "deepseek_v3"`.
    DeepSeek3(DeepSeek3Config),
    /// `model_type = "qwen3_5_moe"` (or its text part, `qwen3_5_moe_text`).
    Qwen35(Qwen35Config),
}

/// Sequence length and batch per chip the predictions assume; a config file says nothing of
/// the training run.
pub const SEQ: i64 = 4096;

/// The fields read, all optional so a missing one is reported by its name.
#[derive(Clone, Debug, Default, Deserialize)]
struct Fields {
    model_type: Option<String>,
    text_config: Option<Box<Fields>>,
    vocab_size: Option<i64>,
    hidden_size: Option<i64>,
    intermediate_size: Option<i64>,
    num_hidden_layers: Option<usize>,
    num_attention_heads: Option<i64>,
    num_key_value_heads: Option<i64>,
    head_dim: Option<i64>,
    rope_theta: Option<f64>,
    rms_norm_eps: Option<f64>,
    // DeepSeek-V3.
    first_k_dense_replace: Option<usize>,
    n_routed_experts: Option<usize>,
    n_shared_experts: Option<i64>,
    num_experts_per_tok: Option<usize>,
    moe_intermediate_size: Option<i64>,
    q_lora_rank: Option<i64>,
    kv_lora_rank: Option<i64>,
    qk_nope_head_dim: Option<i64>,
    qk_rope_head_dim: Option<i64>,
    v_head_dim: Option<i64>,
    n_group: Option<usize>,
    topk_group: Option<usize>,
    routed_scaling_factor: Option<f64>,
    // Qwen3.5.
    layer_types: Option<Vec<String>>,
    full_attention_interval: Option<usize>,
    num_experts: Option<usize>,
    shared_expert_intermediate_size: Option<i64>,
    linear_num_key_heads: Option<i64>,
    linear_num_value_heads: Option<i64>,
    linear_key_head_dim: Option<i64>,
    linear_value_head_dim: Option<i64>,
    linear_conv_kernel_dim: Option<i64>,
    partial_rotary_factor: Option<f64>,
}

fn invalid(message: impl Into<String>) -> Error {
    Error::InvalidOp {
        op: "config.json",
        message: message.into(),
    }
}

/// A required field.
fn need<T: Copy>(v: Option<T>, field: &str) -> Result<T> {
    v.ok_or_else(|| invalid(format!("missing field `{field}`")))
}

/// A required positive integer field.
fn positive<T: Copy + Into<i64>>(v: Option<T>, field: &str) -> Result<T> {
    let x = need(v, field)?;
    if x.into() <= 0 {
        return Err(invalid(format!(
            "field `{field}` must be positive, got {}",
            x.into()
        )));
    }
    Ok(x)
}

/// A required positive count.
fn count(v: Option<usize>, field: &str) -> Result<usize> {
    match need(v, field)? {
        0 => Err(invalid(format!("field `{field}` must be positive, got 0"))),
        n => Ok(n),
    }
}

/// Reads the file at `path`.
pub fn load(path: &Path) -> Result<HfModel> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| invalid(format!("cannot read `{}`: {e}", path.display())))?;
    parse(&text).map_err(|e| invalid(format!("`{}`: {e}", path.display())))
}

/// Parses a `config.json`'s text.
pub fn parse(text: &str) -> Result<HfModel> {
    let f: Fields =
        serde_json::from_str(text).map_err(|e| invalid(format!("not a config.json: {e}")))?;
    let f = match f.text_config {
        Some(text) => *text,
        None => f,
    };
    match f.model_type.as_deref() {
        Some("deepseek_v3") => deepseek3(&f).map(HfModel::DeepSeek3),
        Some("qwen3_5_moe" | "qwen3_5_moe_text") => qwen35(&f).map(HfModel::Qwen35),
        Some(other) => Err(invalid(format!(
            "field `model_type` is `{other}`; expected `deepseek_v3`, `qwen3_5_moe` or \
             `qwen3_5_moe_text`"
        ))),
        None => Err(invalid("missing field `model_type`")),
    }
}

fn deepseek3(f: &Fields) -> Result<DeepSeek3Config> {
    let layers = count(f.num_hidden_layers, "num_hidden_layers")?;
    let dense = need(f.first_k_dense_replace, "first_k_dense_replace")?;
    if (layers, dense) != (61, 3) {
        return Err(invalid(format!(
            "fields `num_hidden_layers` = {layers}, `first_k_dense_replace` = {dense}: the \
             declared DeepSeek-V3 stack has 61 layers, 3 of them dense"
        )));
    }
    let d = positive(f.hidden_size, "hidden_size")?;
    let experts = count(f.n_routed_experts, "n_routed_experts")?;
    let top_k = count(f.num_experts_per_tok, "num_experts_per_tok")?;
    let groups = count(f.n_group, "n_group")?;
    let top_groups = count(f.topk_group, "topk_group")?;
    if experts % groups != 0 || top_groups > groups || top_k > experts {
        return Err(invalid(format!(
            "fields `n_routed_experts` = {experts}, `n_group` = {groups}, `topk_group` = \
             {top_groups}, `num_experts_per_tok` = {top_k}: groups must divide the experts, \
             and a token cannot use more groups or experts than there are"
        )));
    }
    Ok(DeepSeek3Config {
        vocab: positive(f.vocab_size, "vocab_size")?,
        d,
        layers,
        dense_layers: dense,
        mla: MlaConfig {
            d,
            heads: positive(f.num_attention_heads, "num_attention_heads")?,
            q_lora: positive(f.q_lora_rank, "q_lora_rank")?,
            kv_lora: positive(f.kv_lora_rank, "kv_lora_rank")?,
            nope: positive(f.qk_nope_head_dim, "qk_nope_head_dim")?,
            rope: positive(f.qk_rope_head_dim, "qk_rope_head_dim")?,
            v: positive(f.v_head_dim, "v_head_dim")?,
            rope_theta: f.rope_theta.unwrap_or(10_000.0),
            eps: f.rms_norm_eps.unwrap_or(1e-6),
        },
        dense_ffn: positive(f.intermediate_size, "intermediate_size")?,
        experts,
        top_k,
        groups,
        top_groups,
        expert_width: positive(f.moe_intermediate_size, "moe_intermediate_size")?,
        shared_experts: positive(f.n_shared_experts, "n_shared_experts")?,
        scaling: f.routed_scaling_factor.unwrap_or(1.0),
        capacity_factor: 1.25,
        direct_token_gather: false,
        dlhs_transpose_rhs: false,
        expert_mesh: crate::moe::ExpertMesh::OFF,
        seq: SEQ,
        batch_per_device: 1,
    })
}

fn qwen35(f: &Fields) -> Result<Qwen35Config> {
    let layers = count(f.num_hidden_layers, "num_hidden_layers")?;
    // Which layers are full attention: `layer_types`, or every `full_attention_interval`-th.
    let full: Vec<bool> = match (&f.layer_types, f.full_attention_interval) {
        (Some(types), _) => types
            .iter()
            .map(|t| match t.as_str() {
                "full_attention" => Ok(true),
                "linear_attention" => Ok(false),
                other => Err(invalid(format!(
                    "field `layer_types` holds `{other}`; expected `linear_attention` or \
                     `full_attention`"
                ))),
            })
            .collect::<Result<_>>()?,
        (None, Some(0)) => return Err(invalid("field `full_attention_interval` must be positive")),
        (None, Some(n)) => (0..layers).map(|l| (l + 1) % n == 0).collect(),
        (None, None) => {
            return Err(invalid(
                "missing field `layer_types` (or `full_attention_interval`)",
            ));
        }
    };
    let declared: Vec<bool> = (0..40).map(|l| l % 4 == 3).collect();
    if layers != 40 || full != declared {
        return Err(invalid(format!(
            "fields `num_hidden_layers` = {layers} and `layer_types`: the declared Qwen3.5 \
             stack has 40 layers in blocks of three `linear_attention` and one \
             `full_attention`"
        )));
    }
    let d = positive(f.hidden_size, "hidden_size")?;
    let head_dim = positive(f.head_dim, "head_dim")?;
    let rotary = f.partial_rotary_factor.unwrap_or(0.25);
    if !(rotary > 0.0 && rotary <= 1.0) {
        return Err(invalid(format!(
            "field `partial_rotary_factor` must be in (0, 1], got {rotary}"
        )));
    }
    let rotary_dim = ((head_dim as f64 * rotary) as i64) & !1;
    let theta = f.rope_theta.unwrap_or(10_000_000.0);
    let gdn = GdnConfig {
        key_heads: positive(f.linear_num_key_heads, "linear_num_key_heads")?,
        value_heads: positive(f.linear_num_value_heads, "linear_num_value_heads")?,
        key_dim: positive(f.linear_key_head_dim, "linear_key_head_dim")?,
        value_dim: positive(f.linear_value_head_dim, "linear_value_head_dim")?,
        conv_kernel: positive(f.linear_conv_kernel_dim, "linear_conv_kernel_dim")?,
        form: GdnForm::Chunked(64),
    };
    let attention = AttentionConfig {
        heads: positive(f.num_attention_heads, "num_attention_heads")?,
        kv_heads: positive(f.num_key_value_heads, "num_key_value_heads")?,
        head_dim,
        rotary_dim,
        rope_theta: theta,
    };
    if attention.heads % attention.kv_heads != 0 || gdn.value_heads % gdn.key_heads != 0 {
        return Err(invalid(
            "fields `num_attention_heads` / `num_key_value_heads` and \
             `linear_num_value_heads` / `linear_num_key_heads` must divide evenly",
        ));
    }
    let experts = count(f.num_experts, "num_experts")?;
    let top_k = count(f.num_experts_per_tok, "num_experts_per_tok")?;
    if top_k > experts {
        return Err(invalid(format!(
            "field `num_experts_per_tok` = {top_k} exceeds `num_experts` = {experts}"
        )));
    }
    Ok(Qwen35Config {
        vocab: positive(f.vocab_size, "vocab_size")?,
        d_model: d,
        layers,
        seq: SEQ,
        batch_per_device: 1,
        experts,
        top_k,
        expert_width: positive(f.moe_intermediate_size, "moe_intermediate_size")?,
        shared_width: positive(
            f.shared_expert_intermediate_size,
            "shared_expert_intermediate_size",
        )?,
        capacity_factor: 1.25,
        direct_token_gather: false,
        dlhs_transpose_rhs: false,
        gdn,
        attention,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEEPSEEK: &str = include_str!("../configs/hf/deepseek-v3.json");
    const QWEN: &str = include_str!("../configs/hf/qwen3.5-35b-a3b.json");

    #[test]
    fn the_published_files_read_into_the_published_configs() {
        assert_eq!(
            parse(DEEPSEEK).unwrap(),
            HfModel::DeepSeek3(DeepSeek3Config::deepseek3())
        );
        assert_eq!(
            parse(QWEN).unwrap(),
            HfModel::Qwen35(Qwen35Config::qwen35_35b_a3b())
        );
    }

    #[test]
    fn full_attention_interval_stands_in_for_layer_types() {
        let v: serde_json::Value = serde_json::from_str(QWEN).unwrap();
        let mut text = v["text_config"].clone();
        text.as_object_mut().unwrap().remove("layer_types");
        text["full_attention_interval"] = 4.into();
        assert_eq!(
            parse(&text.to_string()).unwrap(),
            HfModel::Qwen35(Qwen35Config::qwen35_35b_a3b())
        );
    }

    fn edited(text: &str, path: &[&str], value: Option<serde_json::Value>) -> String {
        let mut v: serde_json::Value = serde_json::from_str(text).unwrap();
        let mut at = &mut v;
        for p in &path[..path.len() - 1] {
            at = &mut at[*p];
        }
        let last = path[path.len() - 1];
        match (value, last.parse::<usize>()) {
            (Some(x), Ok(i)) => at[i] = x,
            (Some(x), Err(_)) => at[last] = x,
            (None, _) => {
                at.as_object_mut().unwrap().remove(last);
            }
        }
        v.to_string()
    }

    #[test]
    fn a_missing_or_bad_field_is_named() {
        let cases = [
            (
                edited(DEEPSEEK, &["kv_lora_rank"], None),
                "missing field `kv_lora_rank`",
            ),
            (
                edited(DEEPSEEK, &["q_lora_rank"], Some(0.into())),
                "field `q_lora_rank` must be positive",
            ),
            (
                edited(DEEPSEEK, &["n_group"], Some(7.into())),
                "`n_group` = 7",
            ),
            (
                edited(DEEPSEEK, &["first_k_dense_replace"], Some(1.into())),
                "`first_k_dense_replace` = 1",
            ),
            (
                edited(QWEN, &["text_config", "num_experts"], None),
                "missing field `num_experts`",
            ),
            (
                edited(
                    QWEN,
                    &["text_config", "layer_types", "0"],
                    Some("full_attention".into()),
                ),
                "`layer_types`",
            ),
            (
                edited(
                    QWEN,
                    &["text_config", "layer_types", "1"],
                    Some("sliding".into()),
                ),
                "holds `sliding`",
            ),
            (
                edited(QWEN, &["text_config", "model_type"], Some("llama".into())),
                "`model_type` is `llama`",
            ),
            ("{".to_owned(), "not a config.json"),
            (
                edited(DEEPSEEK, &["hidden_size"], Some("wide".into())),
                "not a config.json",
            ),
        ];
        for (text, expected) in cases {
            let e = parse(&text).unwrap_err().to_string();
            assert!(e.contains(expected), "expected `{expected}` in: {e}");
        }
    }
}
