//! `LlamaForCausalLM` files (`model_type = "llama"`): the sizes into [`LlamaConfig`], and the
//! fields that would describe another model than the declared one (biases, another
//! activation or norm epsilon) refused by name rather than silently dropped.

use super::{Fields, SEQ, count, invalid, positive};
use crate::llama::LlamaConfig;
use stackscan::Result;

/// The RMSNorm epsilon the declared Llama normalises with (Llama-2's and Llama-3's).
const NORM_EPS: f64 = 1e-5;

/// A Llama file's config.
pub(super) fn read(f: &Fields) -> Result<LlamaConfig> {
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
    if let Some(eps) = f.rms_norm_eps.filter(|e| *e != NORM_EPS) {
        return Err(invalid(format!(
            "field `rms_norm_eps` is {eps}; the declared Llama normalises with {NORM_EPS}"
        )));
    }
    if let Some(scaling) = f.rope_scaling.as_ref().filter(|v| !v.is_null()) {
        tracing::warn!(
            "config.json: `rope_scaling` ({scaling}) is not modelled; RoPE runs unscaled, \
             which changes no shape, FLOP or byte the plan and the cost model see"
        );
    }
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
        seq: match f.max_position_embeddings {
            Some(_) => positive(f.max_position_embeddings, "max_position_embeddings")?,
            None => SEQ,
        },
        batch_per_device: 1,
        window: None,
        context: 1,
    })
}
