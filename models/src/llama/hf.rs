//! The Llama's Hugging Face side, `LlamaForCausalLM`: its `config.json` read into
//! [`LlamaConfig`] (the fields that would describe another model than the declared one,
//! biases or another activation, refused by name rather than silently dropped)
//! and written back, and the map between its tensors and ours (projections `[out, in]` there,
//! `[in, out]` here; RoPE already rotates halves in `transformers`' checkpoints, as ours does).

use crate::registry::Architecture;
use serde_json::json;
use stackscan::Result;
use stackscan::hf_map::{HfMap, Link, Step};

use super::{Llama3RopeScaling, LlamaConfig, NORM_EPS};
use crate::hf_config::keys::HfKey;
use crate::hf_config::{
    Fields, SEQ, count, invalid, known_scaling_fields, positive, scaling_kind, scaling_number,
};
use crate::hf_weights::{map_of, unmapped};

/// Every key of a Llama `config.json` beyond [`COMMON`](crate::hf_config::keys::COMMON), and
/// what [`read`] does with it.
pub const KEYS: &[(&str, HfKey)] = &[
    ("vocab_size", HfKey::Read),
    ("hidden_size", HfKey::Read),
    ("intermediate_size", HfKey::Read),
    ("num_hidden_layers", HfKey::Read),
    ("num_attention_heads", HfKey::Read),
    ("num_key_value_heads", HfKey::Read),
    ("head_dim", HfKey::Read),
    ("rope_theta", HfKey::Read),
    ("rope_parameters", HfKey::Read),
    (
        "rope_scaling",
        HfKey::Held("Llama 3.1's `llama3` scaling, or none"),
    ),
    ("max_position_embeddings", HfKey::Read),
    ("hidden_act", HfKey::Held("the MLP is SwiGLU (`silu`)")),
    (
        "attention_bias",
        HfKey::Held("the projections have no bias"),
    ),
    ("mlp_bias", HfKey::Held("the projections have no bias")),
    ("rms_norm_eps", HfKey::Read),
    ("tie_word_embeddings", HfKey::Read),
    (
        "pretraining_tp",
        HfKey::Ignored("how the original training split its matrices; the product is the same"),
    ),
];

/// The map of the Llama at `c`.
pub fn map(c: &LlamaConfig) -> Result<HfMap> {
    let (model, _) = Architecture::build(c)?;
    let (d, q, kv) = (c.d_model, c.heads * c.head_dim, c.kv_heads * c.head_dim);
    let mut map = map_of(&model, |name, layer| {
        let at = |p: &str| format!("model.layers.{}.{p}", layer.unwrap_or(0));
        // Their `[out, in]` projection `p`, transposed.
        let proj =
            |p: &str, out: i64, inn: i64| Link::new(&at(p), &[out, inn]).then(Step::TransposeLast2);
        Ok(vec![match name {
            "embed" => Link::new("model.embed_tokens.weight", &[c.vocab, d]),
            "final_norm" => Link::new("model.norm.weight", &[d]),
            "lm_head" => Link::new("lm_head.weight", &[c.vocab, d]).then(Step::TransposeLast2),
            "layers.attn_norm" => Link::new(&at("input_layernorm.weight"), &[d]),
            "layers.mlp_norm" => Link::new(&at("post_attention_layernorm.weight"), &[d]),
            "layers.attn.wq" => proj("self_attn.q_proj.weight", q, d),
            "layers.attn.wk" => proj("self_attn.k_proj.weight", kv, d),
            "layers.attn.wv" => proj("self_attn.v_proj.weight", kv, d),
            "layers.attn.wo" => proj("self_attn.o_proj.weight", d, q),
            "layers.mlp.w_gate" => proj("mlp.gate_proj.weight", c.ffn, d),
            "layers.mlp.w_up" => proj("mlp.up_proj.weight", c.ffn, d),
            "layers.mlp.w_down" => proj("mlp.down_proj.weight", d, c.ffn),
            other => return Err(unmapped("llama", other)),
        }])
    })?;
    if c.tie_embeddings {
        // `save_pretrained` leaves the tied head out; a file that keeps it holds a copy.
        map.skipped.push((
            "lm_head.weight".into(),
            "the LM head, tied to the embedding (the model reads `model.embed_tokens.weight`)"
                .into(),
        ));
    }
    Ok(map)
}

/// The `config.json` of the Llama at `c`, as `transformers` reads it.
pub fn config_json(c: &LlamaConfig) -> serde_json::Value {
    let mut v = json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": c.vocab,
        "hidden_size": c.d_model,
        "intermediate_size": c.ffn,
        "num_hidden_layers": c.layers,
        "num_attention_heads": c.heads,
        "num_key_value_heads": c.kv_heads,
        "head_dim": c.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": c.seq,
        "rms_norm_eps": c.norm_eps,
        "rope_theta": c.rope_theta,
        "attention_bias": false,
        "mlp_bias": false,
        "tie_word_embeddings": c.tie_embeddings,
        "dtype": "float32",
    });
    if let Some(s) = &c.rope_scaling {
        v["rope_scaling"] = json!({
            "rope_type": "llama3",
            "factor": s.factor,
            "low_freq_factor": s.low_freq_factor,
            "high_freq_factor": s.high_freq_factor,
            "original_max_position_embeddings": s.original_max_position_embeddings,
        });
    }
    v
}

/// A Llama file's config.
pub(crate) fn read(f: &Fields) -> Result<LlamaConfig> {
    let d_model = positive(f.hidden_size, "hidden_size")?;
    let heads = positive(f.num_attention_heads, "num_attention_heads")?;
    // `transformers`' defaults: multi-head attention, heads that split the width.
    let kv_heads = positive(f.num_key_value_heads.or(Some(heads)), "num_key_value_heads")?;
    if heads % kv_heads != 0 {
        return Err(invalid(format!(
            "field `num_attention_heads` = {heads} is not a multiple of `num_key_value_heads` \
             = {kv_heads}"
        )));
    }
    let head_dim = match f.head_dim {
        Some(_) => positive(f.head_dim, "head_dim")?,
        None if d_model % heads == 0 => d_model / heads,
        None => {
            return Err(invalid(format!(
                "missing field `head_dim`, and `hidden_size` = {d_model} does not split into \
                 `num_attention_heads` = {heads}"
            )));
        }
    };
    if let Some(act) = f.hidden_act.as_deref().filter(|a| *a != "silu") {
        return Err(invalid(format!(
            "field `hidden_act` is `{act}`; the declared Llama's MLP is SwiGLU (`silu`)"
        )));
    }
    for (field, on) in [
        ("attention_bias", f.attention_bias),
        ("mlp_bias", f.mlp_bias),
    ] {
        if on == Some(true) {
            return Err(invalid(format!(
                "field `{field}` is true; the declared Llama's projections have no bias"
            )));
        }
    }
    let norm_eps = match f.rms_norm_eps {
        Some(e) if e.is_finite() && e > 0.0 => e,
        Some(e) => {
            return Err(invalid(format!(
                "field `rms_norm_eps` must be a positive number, got {e}"
            )));
        }
        None => NORM_EPS,
    };
    let rope_scaling = llama3_scaling(f.rope_scaling.as_ref())?;
    Ok(LlamaConfig {
        vocab: positive(f.vocab_size, "vocab_size")?,
        d_model,
        layers: count(f.num_hidden_layers, "num_hidden_layers")?,
        heads,
        kv_heads,
        head_dim,
        ffn: positive(f.intermediate_size, "intermediate_size")?,
        rope_theta: match f.rope_theta {
            Some(t) if t.is_finite() && t > 0.0 => t,
            Some(t) => {
                return Err(invalid(format!(
                    "field `rope_theta` must be a positive number, got {t}"
                )));
            }
            None => 10_000.0,
        },
        rope_scaling,
        seq: match f.max_position_embeddings {
            Some(_) => positive(f.max_position_embeddings, "max_position_embeddings")?,
            None => SEQ,
        },
        batch_per_device: 1,
        window: None,
        attention_block: None,
        tie_embeddings: f.tie_word_embeddings.unwrap_or(false),
        norm_eps,
        context: 1,
    })
}

/// The Llama's `rope_scaling` (or `rope_parameters`): none, or Llama 3's. Another type is
/// refused by name: the declared Llama would compute something else.
fn llama3_scaling(scaling: Option<&serde_json::Value>) -> Result<Option<Llama3RopeScaling>> {
    let Some((kind, table)) = scaling_kind(scaling)? else {
        return Ok(None);
    };
    if kind != "llama3" {
        return Err(invalid(format!(
            "field `rope_scaling` has type `{kind}`; the declared Llama implements `llama3` \
             (Llama 3.1's) or none"
        )));
    }
    let fields = [
        "factor",
        "low_freq_factor",
        "high_freq_factor",
        "original_max_position_embeddings",
    ];
    known_scaling_fields(table, "llama3", &fields)?;
    let number = |field: &str| scaling_number(table, field, None);
    let s = Llama3RopeScaling {
        factor: number("factor")?,
        low_freq_factor: number("low_freq_factor")?,
        high_freq_factor: number("high_freq_factor")?,
        original_max_position_embeddings: number("original_max_position_embeddings")?,
    };
    s.validate().map_err(invalid)?;
    Ok(Some(s))
}
