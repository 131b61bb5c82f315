//! DeepSeek-V3's Hugging Face side, `DeepseekV3ForCausalLM`: its `config.json` read into
//! [`DeepSeek3Config`] and written back, and the map between its tensors and ours.
//!
//! Besides the `[out, in]` projections: the checkpoints store each head's rotary query
//! columns and the shared rotary key's columns interleaved (pairs `2i, 2i + 1` rotate
//! together; `rope_interleave`, which `transformers` undoes at run time), ours rotate halves
//! (`i, i + rope/2`), so those columns are reordered on the way in; routed experts are one
//! `[out, in]` matrix per expert there and one bank per layer here; the multi-token-prediction
//! layer (`model.layers.{num_hidden_layers}`) is not modelled and skipped.

use crate::registry::Architecture;
use serde_json::json;
use stackscan::Result;
use stackscan::hf_map::{HfMap, Link, Step};

use super::DeepSeek3Config;
use crate::hf_config::keys::HfKey;
use crate::hf_config::{
    BIAS_UPDATE_SPEED, Fields, SEQ, capacity_factor, coefficient, count, invalid, need, norm_eps,
    positive, yarn,
};
use crate::hf_weights::{expert_links, map_of, unmapped};
use crate::mla::MlaConfig;

/// Our index `j` of `rope` rotary features is their index `order[j]`: the first half are
/// their even features, the second half their odd ones.
fn deinterleave(rope: usize) -> Vec<usize> {
    (0..rope)
        .map(|j| {
            if j < rope / 2 {
                2 * j
            } else {
                2 * (j - rope / 2) + 1
            }
        })
        .collect()
}

/// Every key of a DeepSeek-V3 `config.json` beyond [`COMMON`](crate::hf_config::keys::COMMON),
/// the published file's own included, and what [`read`] does with it.
pub const KEYS: &[(&str, HfKey)] = &[
    ("vocab_size", HfKey::Read),
    ("hidden_size", HfKey::Read),
    ("intermediate_size", HfKey::Read),
    ("moe_intermediate_size", HfKey::Read),
    ("num_hidden_layers", HfKey::Read),
    (
        "first_k_dense_replace",
        HfKey::Held("the declared stack has 3 dense layers, then MoE layers"),
    ),
    ("num_attention_heads", HfKey::Read),
    (
        "num_key_value_heads",
        HfKey::Ignored("multi-head latent attention reads every head's keys from one latent"),
    ),
    ("q_lora_rank", HfKey::Read),
    ("kv_lora_rank", HfKey::Read),
    ("qk_nope_head_dim", HfKey::Read),
    ("qk_rope_head_dim", HfKey::Read),
    ("v_head_dim", HfKey::Read),
    (
        "qk_head_dim",
        HfKey::Ignored("`qk_nope_head_dim` + `qk_rope_head_dim`, both read"),
    ),
    ("head_dim", HfKey::Ignored("`qk_rope_head_dim`, read")),
    ("n_routed_experts", HfKey::Read),
    ("num_experts_per_tok", HfKey::Read),
    ("n_group", HfKey::Read),
    ("topk_group", HfKey::Read),
    ("n_shared_experts", HfKey::Read),
    ("routed_scaling_factor", HfKey::Read),
    (
        "norm_topk_prob",
        HfKey::Fixed("true", "the router normalises the chosen experts' weights"),
    ),
    (
        "scoring_func",
        HfKey::Fixed("\"sigmoid\"", "the router scores experts with a sigmoid"),
    ),
    (
        "topk_method",
        HfKey::Fixed(
            "\"noaux_tc\"",
            "the router picks groups, then experts, by the bias-corrected scores",
        ),
    ),
    (
        "moe_layer_freq",
        HfKey::Fixed("1", "every layer after the dense prefix is an MoE layer"),
    ),
    ("aux_loss_alpha", HfKey::Read),
    (
        "seq_aux",
        HfKey::Ignored("the form of the balancing loss; `aux_loss_alpha` weights ours"),
    ),
    (
        "ep_size",
        HfKey::Ignored("the original training's expert parallelism; `--ep` sets ours"),
    ),
    (
        "num_nextn_predict_layers",
        HfKey::Ignored("the multi-token-prediction layer is not modelled; its weights are skipped"),
    ),
    (
        "output_router_logits",
        HfKey::Ignored("what a `transformers` forward returns"),
    ),
    ("rope_theta", HfKey::Read),
    ("rope_parameters", HfKey::Read),
    ("rope_scaling", HfKey::Held("YaRN, or none")),
    ("rope_interleave", HfKey::Read),
    (
        "max_position_embeddings",
        HfKey::Ignored("the longest context of the published model; `--seq` sets the sequence"),
    ),
    (
        "rms_norm_eps",
        HfKey::Held("the norms divide with ε = 1e-6"),
    ),
    (
        "hidden_act",
        HfKey::Fixed("\"silu\"", "the MLPs and experts are SwiGLU"),
    ),
    (
        "attention_bias",
        HfKey::Fixed("false", "the projections have no bias"),
    ),
    (
        "pretraining_tp",
        HfKey::Ignored("how the original training split its matrices; the product is the same"),
    ),
    (
        "quantization_config",
        HfKey::Ignored(
            "read by the import, not the config: FP8 (e4m3) weights with block scales are \
             dequantized into the f32 masters; another quantization is refused there",
        ),
    ),
];

/// The map of the DeepSeek-V3 model at `c`.
pub fn map(c: &DeepSeek3Config) -> Result<HfMap> {
    let (model, _) = Architecture::build(c)?;
    let m = &c.mla;
    let (d, h) = (c.d, m.heads);
    let (rope, qk) = (m.rope as usize, (m.nope + m.rope) as usize);
    // Per head: the position-free features as they are, the rotary ones de-interleaved.
    let q_order: Vec<usize> = (0..h as usize)
        .flat_map(|head| {
            let base = head * qk;
            (0..m.nope as usize).map(move |j| base + j).chain(
                deinterleave(rope)
                    .into_iter()
                    .map(move |j| base + m.nope as usize + j),
            )
        })
        .collect();
    let kv_order: Vec<usize> = (0..m.kv_lora as usize)
        .chain(
            deinterleave(rope)
                .into_iter()
                .map(|j| m.kv_lora as usize + j),
        )
        .collect();
    // A checkpoint that already rotates halves (`rope_interleave: false`) is read as it is.
    let reorder = |link: Link, order: &[usize]| {
        if c.rope_interleave {
            link.then(Step::Reorder {
                dim: 1,
                order: order.to_vec(),
            })
        } else {
            link
        }
    };
    let shared = c.shared_experts * c.expert_width;
    let mut map = map_of(&model, |name, layer| {
        let at = |p: &str| format!("model.layers.{}.{p}", layer.unwrap_or(0));
        let proj =
            |p: &str, out: i64, inn: i64| Link::new(&at(p), &[out, inn]).then(Step::TransposeLast2);
        let prefix = at("");
        let experts = |p: &str, out: i64, inn: i64| expert_links(&prefix, c.experts, p, out, inn);
        let kind = name.split('.').nth(1).unwrap_or("");
        let param = name.splitn(3, '.').nth(2).unwrap_or(name);
        Ok(match (kind, param) {
            (_, "embed") if layer.is_none() => {
                vec![Link::new("model.embed_tokens.weight", &[c.vocab, d])]
            }
            (_, "final_norm") if layer.is_none() => vec![Link::new("model.norm.weight", &[d])],
            (_, "lm_head") if layer.is_none() => {
                vec![Link::new("lm_head.weight", &[c.vocab, d]).then(Step::TransposeLast2)]
            }
            (_, "attn_norm") => vec![Link::new(&at("input_layernorm.weight"), &[d])],
            (_, "ffn_norm") => vec![Link::new(&at("post_attention_layernorm.weight"), &[d])],
            (_, "attn.q_down") => vec![proj("self_attn.q_a_proj.weight", m.q_lora, d)],
            (_, "attn.q_norm") => vec![Link::new(
                &at("self_attn.q_a_layernorm.weight"),
                &[m.q_lora],
            )],
            (_, "attn.q_up") => vec![reorder(
                proj("self_attn.q_b_proj.weight", h * m.qk_head(), m.q_lora),
                &q_order,
            )],
            (_, "attn.kv_down") => vec![reorder(
                proj("self_attn.kv_a_proj_with_mqa.weight", m.kv_lora + m.rope, d),
                &kv_order,
            )],
            (_, "attn.kv_norm") => {
                vec![Link::new(
                    &at("self_attn.kv_a_layernorm.weight"),
                    &[m.kv_lora],
                )]
            }
            (_, "attn.kv_up") => vec![proj(
                "self_attn.kv_b_proj.weight",
                h * (m.nope + m.v),
                m.kv_lora,
            )],
            (_, "attn.out") => vec![proj("self_attn.o_proj.weight", d, h * m.v)],
            (_, "mlp.w_gate") => vec![proj("mlp.gate_proj.weight", c.dense_ffn, d)],
            (_, "mlp.w_up") => vec![proj("mlp.up_proj.weight", c.dense_ffn, d)],
            (_, "mlp.w_down") => vec![proj("mlp.down_proj.weight", d, c.dense_ffn)],
            (_, "moe.router") => vec![proj("mlp.gate.weight", c.experts as i64, d)],
            (_, "moe.router_bias") => {
                vec![Link::new(
                    &at("mlp.gate.e_score_correction_bias"),
                    &[c.experts as i64],
                )]
            }
            (_, "moe.experts.gate") => experts("gate_proj", c.expert_width, d),
            (_, "moe.experts.up") => experts("up_proj", c.expert_width, d),
            (_, "moe.experts.down") => experts("down_proj", d, c.expert_width),
            (_, "moe.shared.w_gate") => {
                vec![proj("mlp.shared_experts.gate_proj.weight", shared, d)]
            }
            (_, "moe.shared.w_up") => vec![proj("mlp.shared_experts.up_proj.weight", shared, d)],
            (_, "moe.shared.w_down") => {
                vec![proj("mlp.shared_experts.down_proj.weight", d, shared)]
            }
            _ => return Err(unmapped("deepseek3", name)),
        })
    })?;
    map.skipped.push((
        format!("model.layers.{}.", c.layers),
        "DeepSeek-V3's multi-token-prediction layer, which the declared model does not have".into(),
    ));
    Ok(map)
}

/// The `config.json` of the DeepSeek-V3 model at `c`, as `transformers` reads it.
pub fn config_json(c: &DeepSeek3Config) -> serde_json::Value {
    let m = &c.mla;
    let mut v = json!({
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "vocab_size": c.vocab,
        "hidden_size": c.d,
        "intermediate_size": c.dense_ffn,
        "moe_intermediate_size": c.expert_width,
        "num_hidden_layers": c.layers,
        "first_k_dense_replace": c.dense_layers,
        "num_attention_heads": m.heads,
        "num_key_value_heads": m.heads,
        "q_lora_rank": m.q_lora,
        "kv_lora_rank": m.kv_lora,
        "qk_nope_head_dim": m.nope,
        "qk_rope_head_dim": m.rope,
        "v_head_dim": m.v,
        "n_routed_experts": c.experts,
        "num_experts_per_tok": c.top_k,
        "n_group": c.groups,
        "topk_group": c.top_groups,
        "n_shared_experts": c.shared_experts,
        "routed_scaling_factor": c.scaling,
        "norm_topk_prob": true,
        "rope_interleave": c.rope_interleave,
        "rope_theta": m.rope_theta,
        "rms_norm_eps": crate::deepseek3::NORM_EPS,
        "max_position_embeddings": c.seq,
        "tie_word_embeddings": false,
        "hidden_act": "silu",
        "dtype": "float32",
    });
    // The YaRN the model computes with, in the legacy form every `transformers` reads.
    if let Some(y) = &m.rope_scaling {
        v["rope_scaling"] = json!({
            "type": "yarn",
            "factor": y.factor,
            "original_max_position_embeddings": y.original_context,
            "beta_fast": y.beta_fast,
            "beta_slow": y.beta_slow,
            "mscale": y.mscale,
            "mscale_all_dim": y.mscale_all_dim,
        });
    }
    v
}

/// A DeepSeek-V3 file's config.
pub(crate) fn read(f: &Fields) -> Result<DeepSeek3Config> {
    let layers = count(f.num_hidden_layers, "num_hidden_layers")?;
    let dense = need(f.first_k_dense_replace, "first_k_dense_replace")?;
    // The dense prefix is declared (`prefix = [Dense, Dense, Dense]`); the depth is the
    // config's, checked when the model is built.
    if dense != 3 || layers <= dense {
        return Err(invalid(format!(
            "fields `num_hidden_layers` = {layers}, `first_k_dense_replace` = {dense}: the \
             declared DeepSeek-V3 stack has 3 dense layers, then at least one MoE layer"
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
    norm_eps(f, crate::deepseek3::NORM_EPS, "DeepSeek-V3")?;
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
            // The latent norms (`q_a_layernorm`, `kv_a_layernorm`) keep RMSNorm's default
            // epsilon there; `rms_norm_eps` is the layers' and the final norm's (checked above).
            eps: crate::deepseek3::NORM_EPS,
            rope_scaling: yarn(f.rope_scaling.as_ref())?,
            attention_block: None,
            context: 1,
        },
        dense_ffn: positive(f.intermediate_size, "intermediate_size")?,
        experts,
        top_k,
        groups,
        top_groups,
        expert_width: positive(f.moe_intermediate_size, "moe_intermediate_size")?,
        shared_experts: positive(f.n_shared_experts, "n_shared_experts")?,
        scaling: f.routed_scaling_factor.unwrap_or(1.0),
        capacity_factor: capacity_factor(f)?,
        bias_update_speed: BIAS_UPDATE_SPEED,
        aux_loss_alpha: coefficient(f.aux_loss_alpha, "aux_loss_alpha", 0.0)?,
        direct_token_gather: false,
        dlhs_transpose_rhs: false,
        expert_mesh: crate::moe::ExpertMesh::OFF,
        context: 1,
        seq: SEQ,
        batch_per_device: 1,
        rope_interleave: f.rope_interleave.unwrap_or(true),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotary_features_are_de_interleaved() {
        // Their pairs (0, 1), (2, 3) are our pairs (0, 2), (1, 3).
        assert_eq!(deinterleave(4), vec![0, 2, 1, 3]);
        assert_eq!(deinterleave(6), vec![0, 2, 4, 1, 3, 5]);
    }

    /// `rope_interleave: false` (a checkpoint whose rotary columns already rotate halves) is
    /// read: its map moves no column, where the published layout's de-interleaves them; the
    /// flag is written back by export and left out of a written config at its default.
    #[test]
    fn rope_interleave_false_reads_the_columns_as_they_are() {
        use crate::configs::ConfigFile;
        let c = DeepSeek3Config::small(4, 3, 1);
        let reorders = |c: &DeepSeek3Config| {
            map(c)
                .unwrap()
                .weights
                .iter()
                .flat_map(|w| &w.links)
                .filter(|l| l.steps.iter().any(|s| matches!(s, Step::Reorder { .. })))
                .count()
        };
        assert!(reorders(&c) > 0);
        let plain = DeepSeek3Config {
            rope_interleave: false,
            ..c
        };
        assert_eq!(reorders(&plain), 0);
        let written = config_json(&plain);
        assert_eq!(written["rope_interleave"], false);
        let read = DeepSeek3Config::from_hf(&written.to_string()).unwrap();
        assert!(!read.rope_interleave);
        let fields = serde_json::to_value(c).unwrap();
        assert!(fields.get("rope_interleave").is_none(), "{fields}");
        assert_eq!(
            serde_json::to_value(plain).unwrap()["rope_interleave"],
            false
        );
    }
}
