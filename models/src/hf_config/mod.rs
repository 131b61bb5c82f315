//! Hugging Face `config.json` files of Llama, DeepSeek-V3 and Qwen3.5 read into our configs,
//! so a user points `train`, `params`, `plan` or `timeline` at the file they have (through
//! [`crate::configs::load`], like a preset or a TOML file). Only the fields our models use are
//! read (unknown fields are ignored, as the files carry many for other tools); a missing or
//! out-of-range field is a one-line error naming it and the file. Which model a file is comes
//! from its `model_type` (else its `architectures`), matched against each registered model's
//! [`ConfigFile::HF_MODEL_TYPES`] and [`ConfigFile::HF_CLASSES`] (the registry is the one list
//! of models); a file of another architecture than the model asked for is an error naming
//! both. Qwen3.5's file nests the decoder's fields under
//! `text_config` (it is a vision-language model); a flat text-only file reads as well.
//!
//! Where `transformers` documents a default for a field the file may leave out, the same
//! default is taken (Llama's `num_key_value_heads` = `num_attention_heads`, `head_dim` =
//! `hidden_size / num_attention_heads`, `rope_theta` = 10000); the sizes have none and are
//! required. The MoE's `capacity_factor` is read where a file has one, else
//! [`CAPACITY_FACTOR`] (no dropping); the balancing losses' `aux_loss_alpha` (DeepSeek-V3,
//! default 0) and `router_aux_loss_coef` (Qwen3.5, default 0.001) likewise. A file says
//! nothing else of the training run: the sequence is
//! `max_position_embeddings` for Llama (as our Llama-3-8B preset), [`SEQ`] for the others,
//! one sequence per device.
//!
//! The layer pattern of DeepSeek-V3 (a dense prefix, then MoE layers) and Qwen3.5 (blocks of
//! three linear-attention (GDN) layers and one full-attention layer) is declared at compile
//! time (`#[layer_stack]`), so a file must describe that pattern; the depth, widths, heads and
//! expert counts are free.
//!
//! ```
//! use stackscan_models::deepseek3::DeepSeek3Config;
//! use stackscan_models::hf_config::parse;
//!
//! let text = include_str!("../../configs/hf/deepseek-v3.json");
//! let config = parse(text)?;
//! assert_eq!(config.model().as_str(), "deepseek3");
//! let c: &DeepSeek3Config = config.get().expect("a DeepSeek-V3 config");
//! assert_eq!((c.layers, c.dense_layers, c.experts, c.top_k), (61, 3, 256, 8));
//! # Ok::<(), stackscan::Error>(())
//! ```

use std::path::Path;

use serde::Deserialize;
use stackscan::{Error, Result};

pub mod keys;

use crate::configs::ConfigFile;
use crate::registry::{ModelConfig, ModelName, models};

/// Sequence length the DeepSeek-V3 and Qwen3.5 readers assume; a config file says nothing of
/// the training run.
pub const SEQ: i64 = 4096;

/// The fields read, all optional so a missing one is reported by its name.
#[derive(Clone, Debug, Default, Deserialize)]
pub(crate) struct Fields {
    pub(crate) model_type: Option<String>,
    pub(crate) architectures: Option<Vec<String>>,
    pub(crate) text_config: Option<Box<Fields>>,
    pub(crate) vocab_size: Option<i64>,
    pub(crate) hidden_size: Option<i64>,
    pub(crate) intermediate_size: Option<i64>,
    pub(crate) num_hidden_layers: Option<usize>,
    pub(crate) num_attention_heads: Option<i64>,
    pub(crate) num_key_value_heads: Option<i64>,
    pub(crate) head_dim: Option<i64>,
    pub(crate) rope_theta: Option<f64>,
    /// Where `transformers` 5 writes RoPE's settings (`rope_theta`, `partial_rotary_factor`,
    /// `rope_type` and a scaling's own fields) instead of the top level and `rope_scaling`.
    pub(crate) rope_parameters: Option<serde_json::Value>,
    pub(crate) rms_norm_eps: Option<f64>,
    pub(crate) max_position_embeddings: Option<i64>,
    pub(crate) tie_word_embeddings: Option<bool>,
    // Llama.
    pub(crate) hidden_act: Option<String>,
    pub(crate) attention_bias: Option<bool>,
    pub(crate) mlp_bias: Option<bool>,
    pub(crate) rope_scaling: Option<serde_json::Value>,
    pub(crate) rope_interleave: Option<bool>,
    // DeepSeek-V3.
    pub(crate) first_k_dense_replace: Option<usize>,
    pub(crate) n_routed_experts: Option<usize>,
    pub(crate) n_shared_experts: Option<i64>,
    pub(crate) num_experts_per_tok: Option<usize>,
    pub(crate) moe_intermediate_size: Option<i64>,
    pub(crate) q_lora_rank: Option<i64>,
    pub(crate) kv_lora_rank: Option<i64>,
    pub(crate) qk_nope_head_dim: Option<i64>,
    pub(crate) qk_rope_head_dim: Option<i64>,
    pub(crate) v_head_dim: Option<i64>,
    pub(crate) n_group: Option<usize>,
    pub(crate) topk_group: Option<usize>,
    pub(crate) routed_scaling_factor: Option<f64>,
    // Qwen3.5.
    pub(crate) layer_types: Option<Vec<String>>,
    pub(crate) full_attention_interval: Option<usize>,
    pub(crate) num_experts: Option<usize>,
    pub(crate) shared_expert_intermediate_size: Option<i64>,
    pub(crate) linear_num_key_heads: Option<i64>,
    pub(crate) linear_num_value_heads: Option<i64>,
    pub(crate) linear_key_head_dim: Option<i64>,
    pub(crate) linear_value_head_dim: Option<i64>,
    pub(crate) linear_conv_kernel_dim: Option<i64>,
    pub(crate) partial_rotary_factor: Option<f64>,
    // Training: MoE capacity and balancing.
    pub(crate) capacity_factor: Option<f64>,
    pub(crate) aux_loss_alpha: Option<f64>,
    pub(crate) router_aux_loss_coef: Option<f64>,
}

impl Fields {
    /// The file's RoPE settings where the readers look for them, from `rope_parameters` when
    /// the file keeps them there (`transformers` 5): its `rope_theta` and
    /// `partial_rotary_factor` at the top level, and a scaling (a `rope_type` other than
    /// `default`) as the legacy `rope_scaling`, its own fields only. A file with both forms
    /// must say the same in each.
    fn lift_rope_parameters(mut self) -> Result<Fields> {
        let Some(p) = self.rope_parameters.take() else {
            return Ok(self);
        };
        let Some(table) = p.as_object() else {
            return Err(invalid(format!(
                "field `rope_parameters` must be an object, got {p}"
            )));
        };
        let number = |key: &str| -> Result<Option<f64>> {
            match table.get(key) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(v) => v.as_f64().map(Some).ok_or_else(|| {
                    invalid(format!(
                        "field `rope_parameters.{key}` must be a number, got {v}"
                    ))
                }),
            }
        };
        self.rope_theta = self.rope_theta.or(number("rope_theta")?);
        self.partial_rotary_factor = self
            .partial_rotary_factor
            .or(number("partial_rotary_factor")?);
        let mut scaling = table.clone();
        scaling.remove("rope_theta");
        scaling.remove("partial_rotary_factor");
        let scaling = serde_json::Value::Object(scaling);
        if scaling_kind(Some(&scaling))?.is_some() {
            match &self.rope_scaling {
                Some(legacy) if !legacy.is_null() && *legacy != scaling => {
                    return Err(invalid(format!(
                        "fields `rope_scaling` ({legacy}) and `rope_parameters` ({scaling}) \
                         describe two RoPE scalings"
                    )));
                }
                _ => self.rope_scaling = Some(scaling),
            }
        }
        Ok(self)
    }
}

/// A `rope_scaling`'s type and fields: `None` for none (absent, null, or of type `default`).
pub(crate) fn scaling_kind(
    scaling: Option<&serde_json::Value>,
) -> Result<Option<(String, &serde_json::Map<String, serde_json::Value>)>> {
    let Some(v) = scaling.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let Some(table) = v.as_object() else {
        return Err(invalid(format!(
            "field `rope_scaling` must be an object or null, got {v}"
        )));
    };
    let kind = table
        .get("rope_type")
        .or_else(|| table.get("type"))
        .and_then(|t| t.as_str())
        .unwrap_or("");
    Ok((kind != "default").then(|| (kind.to_owned(), table)))
}

/// The number `field` of a `rope_scaling` table, else `default` (required when `None`).
pub(crate) fn scaling_number(
    table: &serde_json::Map<String, serde_json::Value>,
    field: &str,
    default: Option<f64>,
) -> Result<f64> {
    match table.get(field) {
        Some(n) => n.as_f64().ok_or_else(|| {
            invalid(format!(
                "field `rope_scaling.{field}` must be a number, got {n}"
            ))
        }),
        None => default.ok_or_else(|| invalid(format!("missing field `rope_scaling.{field}`"))),
    }
}

/// Refuses a `rope_scaling` field that is not one of `known`, naming it.
pub(crate) fn known_scaling_fields(
    table: &serde_json::Map<String, serde_json::Value>,
    kind: &str,
    known: &[&str],
) -> Result<()> {
    match table
        .keys()
        .find(|k| !known.contains(&k.as_str()) && *k != "type" && *k != "rope_type")
    {
        Some(other) => Err(invalid(format!(
            "field `rope_scaling.{other}` is not part of `{kind}` scaling; known: {}",
            known.join(", ")
        ))),
        None => Ok(()),
    }
}

pub(crate) fn invalid(message: impl Into<String>) -> Error {
    Error::InvalidOp {
        op: "config.json",
        message: message.into(),
    }
}

/// `e` with the file it came from in front of its message.
pub fn in_file(path: &Path, e: Error) -> Error {
    match e {
        Error::InvalidOp { message, .. } => invalid(format!("`{}`: {message}", path.display())),
        other => other,
    }
}

/// Refuses an `rms_norm_eps` other than `eps`, the one the declared `model`'s layer and final
/// norms use (a constant of the model, as the published checkpoints agree on it).
pub(crate) fn norm_eps(f: &Fields, eps: f64, model: &str) -> Result<()> {
    match f.rms_norm_eps {
        Some(e) if e != eps => Err(invalid(format!(
            "field `rms_norm_eps` is {e}; the declared {model} normalises with {eps}"
        ))),
        _ => Ok(()),
    }
}

/// DeepSeek-V3's `rope_scaling`: none, or YaRN with the published defaults for the fields
/// it leaves out. Another scaling type is refused: the model would compute something else.
pub(crate) fn yarn(scaling: Option<&serde_json::Value>) -> Result<Option<crate::yarn::Yarn>> {
    let Some((kind, table)) = scaling_kind(scaling)? else {
        return Ok(None);
    };
    if kind != "yarn" {
        return Err(invalid(format!(
            "field `rope_scaling` has type `{kind}`; the declared DeepSeek-V3 implements \
             `yarn` (its published scaling) or none"
        )));
    }
    known_scaling_fields(
        table,
        "yarn",
        &[
            "factor",
            "original_max_position_embeddings",
            "beta_fast",
            "beta_slow",
            "mscale",
            "mscale_all_dim",
        ],
    )?;
    let number = |field: &str, default: Option<f64>| scaling_number(table, field, default);
    let published = crate::yarn::Yarn::deepseek3();
    let y = crate::yarn::Yarn {
        factor: number("factor", None)?,
        original_context: number("original_max_position_embeddings", None)?,
        beta_fast: number("beta_fast", Some(published.beta_fast))?,
        beta_slow: number("beta_slow", Some(published.beta_slow))?,
        mscale: number("mscale", Some(1.0))?,
        mscale_all_dim: number("mscale_all_dim", Some(0.0))?,
    };
    y.validate().map_err(invalid)?;
    Ok(Some(y))
}

/// A required field.
pub(crate) fn need<T: Copy>(v: Option<T>, field: &str) -> Result<T> {
    v.ok_or_else(|| invalid(format!("missing field `{field}`")))
}

/// A required positive integer field.
pub(crate) fn positive<T: Copy + Into<i64>>(v: Option<T>, field: &str) -> Result<T> {
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
pub(crate) fn count(v: Option<usize>, field: &str) -> Result<usize> {
    match need(v, field)? {
        0 => Err(invalid(format!("field `{field}` must be positive, got 0"))),
        n => Ok(n),
    }
}

/// Refuses tied embeddings: every declared model has its own LM head.
pub(crate) fn untied(f: &Fields, model: &str) -> Result<()> {
    if f.tie_word_embeddings == Some(true) {
        return Err(invalid(format!(
            "field `tie_word_embeddings` is true; the declared `{model}` model has its own LM \
             head, not the embedding's transpose"
        )));
    }
    Ok(())
}

/// Reads the file at `path`, whichever registered model it describes.
pub fn load(path: &Path) -> Result<ModelConfig> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| invalid(format!("cannot read `{}`: {e}", path.display())))?;
    parse(&text).map_err(|e| in_file(path, e))
}

/// The registered model the `config.json` at `path` describes (a model directory: the
/// `config.json` in it), by its `model_type` or `architectures`.
pub fn model_of(path: &Path) -> Result<ModelName> {
    let file = if path.is_dir() {
        path.join("config.json")
    } else {
        path.to_owned()
    };
    let text = std::fs::read_to_string(&file)
        .map_err(|e| invalid(format!("cannot read `{}`: {e}", file.display())))?;
    identify(&text)?.model().map_err(|e| in_file(&file, e))
}

/// What a file says it is: its (decoder's) fields, its `model_type` and its `architectures`.
struct Identity {
    fields: Fields,
    model_type: Option<String>,
    architectures: Vec<String>,
    /// `` `deepseek_v3` (DeepseekV3ForCausalLM)``, for errors.
    what: String,
}

fn identify(text: &str) -> Result<Identity> {
    let f: Fields = {
        let mut json = serde_json::Deserializer::from_str(text);
        serde_path_to_error::deserialize(&mut json).map_err(|e| {
            let field = e.path().to_string();
            let inner = e.into_inner();
            if inner.is_data() && field != "." {
                // A value of the wrong type: named by its field's path, not a column.
                invalid(format!("field `{field}`: {inner}"))
            } else {
                invalid(format!("not a config.json: {inner}"))
            }
        })?
    };
    let outer_type = f.model_type.clone();
    let architectures = f.architectures.clone().unwrap_or_default();
    let fields = match f.text_config {
        Some(text) => *text,
        None => f,
    }
    .lift_rope_parameters()?;
    let model_type = fields.model_type.clone().or(outer_type.clone());
    let what = format!(
        "`{}`{}",
        outer_type
            .as_deref()
            .or(model_type.as_deref())
            .unwrap_or("?"),
        described(&architectures)
    );
    Ok(Identity {
        fields,
        model_type,
        architectures,
        what,
    })
}

impl Identity {
    /// Whether the file is one of `types` (by `model_type`), or of `classes` (by
    /// `architectures`, when it has no `model_type`).
    fn is(&self, types: &[&str], classes: &[&str]) -> bool {
        match &self.model_type {
            Some(t) => types.contains(&t.as_str()),
            None => self
                .architectures
                .iter()
                .any(|a| classes.contains(&a.as_str())),
        }
    }

    /// The registered model the file is of; an error naming the model types read.
    fn model(&self) -> Result<ModelName> {
        let found = models()
            .iter()
            .copied()
            .find(|m| self.is(m.hf_model_types(), m.hf_classes()));
        match (found, &self.model_type) {
            (Some(m), _) => Ok(m),
            (None, None) => Err(invalid("missing field `model_type`")),
            (None, Some(t)) => Err(invalid(format!(
                "field `model_type` is `{t}`{}; expected {}",
                described(&self.architectures),
                known()
            ))),
        }
    }
}

/// ` (Class, …)` for a file's `architectures`, or nothing.
fn described(architectures: &[String]) -> String {
    if architectures.is_empty() {
        String::new()
    } else {
        format!(" ({})", architectures.join(", "))
    }
}

/// The model types the registered models read, as error messages list them.
fn known() -> String {
    models()
        .iter()
        .flat_map(|m| m.hf_model_types().iter().map(|t| format!("`{t}`")))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What a model's files say they are, for an error: `` `llama` (LlamaForCausalLM)``.
fn expected(types: &[&str], classes: &[&str]) -> String {
    let types: Vec<String> = types.iter().map(|t| format!("`{t}`")).collect();
    format!("{} ({})", types.join(" or "), classes.join(", "))
}

/// Parses a `config.json`'s text, whichever registered model it describes.
pub fn parse(text: &str) -> Result<ModelConfig> {
    identify(text)?.model()?.parse_hf_config(text)
}

/// Parses a `config.json`'s text as a config of `C` with `read`: a file of another
/// architecture is an error naming both.
pub(crate) fn parse_as<C: ConfigFile>(text: &str, read: fn(&Fields) -> Result<C>) -> Result<C> {
    let id = identify(text)?;
    let (model, types, classes) = (C::MODEL, C::HF_MODEL_TYPES, C::HF_CLASSES);
    if id.is(types, classes) {
        keys::check(text, C::HF_KEYS)?;
        // A family whose table reads `tie_word_embeddings` models the tied head.
        if keys::handling(C::HF_KEYS, "tie_word_embeddings") != Some(keys::HfKey::Read) {
            untied(&id.fields, model)?;
        }
        return read(&id.fields);
    }
    let what = &id.what;
    Err(match id.model() {
        Ok(other) => invalid(format!(
            "model_type {what} is a `{other}` config, not a `{model}` one (model_type {})",
            expected(types, classes)
        )),
        Err(e) => invalid(format!(
            "{}; a `{model}` config has model_type {}",
            match e {
                Error::InvalidOp { message, .. } => message,
                other => other.to_string(),
            },
            expected(types, classes)
        )),
    })
}

/// The capacity factor where a file gives none: [`NO_DROP`](crate::moe::NO_DROP), since the
/// published models train without dropping tokens (DeepSeek-V3's report says so; Qwen's
/// `transformers` code computes every routed token).
pub const CAPACITY_FACTOR: f64 = crate::moe::NO_DROP;

/// DeepSeek-V3's bias update speed γ, which its `config.json` does not carry: the report's
/// 0.001.
pub const BIAS_UPDATE_SPEED: f64 = 0.001;

/// The file's `capacity_factor`, else [`CAPACITY_FACTOR`]; 0 or positive.
pub(crate) fn capacity_factor(f: &Fields) -> Result<f64> {
    let factor = f.capacity_factor.unwrap_or(CAPACITY_FACTOR);
    crate::moe::check_capacity_factor("capacity_factor", factor).map_err(|_| {
        invalid(format!(
            "field `capacity_factor` must be positive, or 0 for no dropping, got {factor}"
        ))
    })?;
    Ok(factor)
}

/// A loss coefficient `field`, else `default`; finite and non-negative.
pub(crate) fn coefficient(v: Option<f64>, field: &str, default: f64) -> Result<f64> {
    let x = v.unwrap_or(default);
    if !(x.is_finite() && x >= 0.0) {
        return Err(invalid(format!(
            "field `{field}` must be a finite number >= 0, got {x}"
        )));
    }
    Ok(x)
}

#[cfg(test)]
mod tests;
