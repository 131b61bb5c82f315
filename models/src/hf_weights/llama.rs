//! `LlamaForCausalLM`'s tensors: projections `[out, in]` there, `[in, out]` here; RoPE
//! already rotates halves in `transformers`' checkpoints, as ours does.

use serde_json::json;
use stackscan::Result;
use stackscan::hf_map::{HfMap, Link, Step};

use super::{map_of, unmapped};
use crate::llama::LlamaConfig;

/// The map of the Llama at `c`.
pub fn map(c: &LlamaConfig) -> Result<HfMap> {
    let (model, _) = crate::llama::for_config(c)?;
    let (d, q, kv) = (c.d_model, c.heads * c.head_dim, c.kv_heads * c.head_dim);
    map_of(&model, |name, layer| {
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
    })
}

/// The `config.json` of the Llama at `c`, as `transformers` reads it.
pub fn config_json(c: &LlamaConfig) -> serde_json::Value {
    json!({
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
        "rms_norm_eps": 1e-5,
        "rope_theta": c.rope_theta,
        "attention_bias": false,
        "mlp_bias": false,
        "tie_word_embeddings": false,
        "dtype": "float32",
    })
}
