//! Qwen3.5's Hugging Face side, `Qwen3_5MoeForCausalLM`: its `config.json` read into
//! [`Qwen35Config`] and written back, and the map between its tensors (the text model's) and
//! ours.
//!
//! Besides the `[out, in]` projections: their RMSNorms scale by `1 + w` where ours scale by
//! `w` (import `w + 1`, export `w − 1`), except the gated norm inside Gated DeltaNet, which
//! scales by `w` there too; the GDN's query, key and value projections are one `in_proj_qkv`
//! there (blocks of its rows here); its depthwise convolution is `[channels, 1, kernel]`
//! there, `[kernel, channels]` here; routed experts are one matrix per expert there, one bank
//! per layer here.

use crate::registry::Architecture;
use serde_json::json;
use stackscan::Result;
use stackscan::hf_map::{HfMap, Link, Step};

use super::Qwen35Config;
use crate::gated_attention::AttentionConfig;
use crate::gdn_layer::{GdnConfig, GdnForm};
use crate::hf_config::keys::HfKey;
use crate::hf_config::{
    Fields, SEQ, capacity_factor, coefficient, count, invalid, norm_eps, positive, scaling_kind,
};
use crate::hf_weights::{expert_links, map_of, unmapped};

/// Every key of a Qwen3.5 `config.json` beyond [`COMMON`](crate::hf_config::keys::COMMON): the
/// text model's (at the top level, or under `text_config` in the published vision-language
/// file) and the vision-language file's own, and what [`read`] does with each.
pub const KEYS: &[(&str, HfKey)] = &[
    ("text_config", HfKey::Read),
    (
        "vision_config",
        HfKey::Ignored("the vision tower is not modelled; the text model is read"),
    ),
    (
        "image_token_id",
        HfKey::Ignored("a token of the vision tower's inputs"),
    ),
    (
        "video_token_id",
        HfKey::Ignored("a token of the vision tower's inputs"),
    ),
    (
        "vision_start_token_id",
        HfKey::Ignored("a token of the vision tower's inputs"),
    ),
    (
        "vision_end_token_id",
        HfKey::Ignored("a token of the vision tower's inputs"),
    ),
    ("vocab_size", HfKey::Read),
    ("hidden_size", HfKey::Read),
    ("num_hidden_layers", HfKey::Read),
    (
        "layer_types",
        HfKey::Held("blocks of three `linear_attention` layers and one `full_attention`"),
    ),
    (
        "full_attention_interval",
        HfKey::Held("a full-attention layer every fourth"),
    ),
    ("num_attention_heads", HfKey::Read),
    ("num_key_value_heads", HfKey::Read),
    ("head_dim", HfKey::Read),
    ("linear_num_key_heads", HfKey::Read),
    ("linear_num_value_heads", HfKey::Read),
    ("linear_key_head_dim", HfKey::Read),
    ("linear_value_head_dim", HfKey::Read),
    ("linear_conv_kernel_dim", HfKey::Read),
    ("num_experts", HfKey::Read),
    ("num_experts_per_tok", HfKey::Read),
    ("moe_intermediate_size", HfKey::Read),
    ("shared_expert_intermediate_size", HfKey::Read),
    ("router_aux_loss_coef", HfKey::Read),
    (
        "output_router_logits",
        HfKey::Ignored("what a `transformers` forward returns"),
    ),
    ("rope_theta", HfKey::Read),
    ("rope_parameters", HfKey::Read),
    ("partial_rotary_factor", HfKey::Read),
    (
        "rope_scaling",
        HfKey::Held("no RoPE scaling: the published context needs none"),
    ),
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
        HfKey::Fixed("\"silu\"", "the experts are SwiGLU"),
    ),
    (
        "attention_bias",
        HfKey::Fixed("false", "the projections have no bias"),
    ),
];

/// The map of the Qwen3.5 model at `c`.
pub fn map(c: &Qwen35Config) -> Result<HfMap> {
    let (model, _) = Architecture::build(c)?;
    let (d, g, a) = (c.d_model, &c.gdn, &c.attention);
    let (key, value) = (g.key_heads * g.key_dim, g.value_heads * g.value_dim);
    let channels = 2 * key + value;
    let mut map = map_of(&model, |name, layer| {
        let at = |p: &str| format!("model.layers.{}.{p}", layer.unwrap_or(0));
        let proj =
            |p: &str, out: i64, inn: i64| Link::new(&at(p), &[out, inn]).then(Step::TransposeLast2);
        // Their `1 + w` norms.
        let norm = |full: String, n: i64| Link::new(&full, &[n]).then(Step::Add(1.0));
        let prefix = at("");
        let experts = |p: &str, out: i64, inn: i64| expert_links(&prefix, c.experts, p, out, inn);
        let qkv = |start, len| {
            Link::new(&at("linear_attn.in_proj_qkv.weight"), &[channels, d])
                .block(0, start, len)
                .then(Step::TransposeLast2)
        };
        let param = name.splitn(3, '.').nth(2).unwrap_or(name);
        Ok(match param {
            "embed" => vec![Link::new("model.embed_tokens.weight", &[c.vocab, d])],
            "final_norm" => vec![norm("model.norm.weight".into(), d)],
            "lm_head" => {
                vec![Link::new("lm_head.weight", &[c.vocab, d]).then(Step::TransposeLast2)]
            }
            "mixer_norm" => vec![norm(at("input_layernorm.weight"), d)],
            "ffn_norm" => vec![norm(at("post_attention_layernorm.weight"), d)],
            // Gated DeltaNet.
            "mixer.wq" if name.contains(".GDN.") => vec![qkv(0, key)],
            "mixer.wk" if name.contains(".GDN.") => vec![qkv(key, key)],
            "mixer.wv" if name.contains(".GDN.") => vec![qkv(2 * key, value)],
            "mixer.wz" => vec![proj("linear_attn.in_proj_z.weight", value, d)],
            "mixer.wa" => vec![proj("linear_attn.in_proj_a.weight", g.value_heads, d)],
            "mixer.wb" => vec![proj("linear_attn.in_proj_b.weight", g.value_heads, d)],
            "mixer.conv" => vec![
                Link::new(
                    &at("linear_attn.conv1d.weight"),
                    &[channels, 1, g.conv_kernel],
                )
                .then(Step::Squeeze(1))
                .then(Step::TransposeLast2),
            ],
            "mixer.a_log" => vec![Link::new(&at("linear_attn.A_log"), &[g.value_heads])],
            "mixer.dt_bias" => vec![Link::new(&at("linear_attn.dt_bias"), &[g.value_heads])],
            "mixer.o_norm" => vec![Link::new(&at("linear_attn.norm.weight"), &[g.value_dim])],
            "mixer.wo" if name.contains(".GDN.") => {
                vec![proj("linear_attn.out_proj.weight", d, value)]
            }
            // Gated attention: each head's query then its gate, as there.
            "mixer.wq" => vec![proj("self_attn.q_proj.weight", 2 * a.heads * a.head_dim, d)],
            "mixer.wk" => vec![proj("self_attn.k_proj.weight", a.kv_heads * a.head_dim, d)],
            "mixer.wv" => vec![proj("self_attn.v_proj.weight", a.kv_heads * a.head_dim, d)],
            "mixer.q_norm" => vec![norm(at("self_attn.q_norm.weight"), a.head_dim)],
            "mixer.k_norm" => vec![norm(at("self_attn.k_norm.weight"), a.head_dim)],
            "mixer.wo" => vec![proj("self_attn.o_proj.weight", d, a.heads * a.head_dim)],
            // The MoE FFN.
            "moe.router" => vec![proj("mlp.gate.weight", c.experts as i64, d)],
            "moe.experts.gate" => experts("gate_proj", c.expert_width, d),
            "moe.experts.up" => experts("up_proj", c.expert_width, d),
            "moe.experts.down" => experts("down_proj", d, c.expert_width),
            "moe.shared.w_gate" => vec![proj(
                "mlp.shared_expert.gate_proj.weight",
                c.shared_width,
                d,
            )],
            "moe.shared.w_up" => vec![proj("mlp.shared_expert.up_proj.weight", c.shared_width, d)],
            "moe.shared.w_down" => vec![proj(
                "mlp.shared_expert.down_proj.weight",
                d,
                c.shared_width,
            )],
            "moe.shared_gate" => vec![proj("mlp.shared_expert_gate.weight", 1, d)],
            _ => return Err(unmapped("qwen35", name)),
        })
    })?;
    // The published checkpoint is the vision-language model: its text model's tensors under
    // `model.language_model.`, a vision tower beside them.
    map.stored_under
        .push(("model.".into(), "model.language_model.".into()));
    map.skipped.push((
        "model.visual.".into(),
        "the vision tower of the vision-language checkpoint, which the declared text model \
         does not have"
            .into(),
    ));
    map.skipped.push((
        "mtp.".into(),
        "the multi-token-prediction layer, which the declared model does not have".into(),
    ));
    Ok(map)
}

/// The `config.json` of the Qwen3.5 model at `c`, as `transformers` reads it
/// (`Qwen3_5MoeForCausalLM`, the text model).
pub fn config_json(c: &Qwen35Config) -> serde_json::Value {
    let (g, a) = (&c.gdn, &c.attention);
    let block = [
        "linear_attention",
        "linear_attention",
        "linear_attention",
        "full_attention",
    ];
    let layer_types: Vec<&str> = (0..c.layers).map(|l| block[l % 4]).collect();
    json!({
        "architectures": ["Qwen3_5MoeForCausalLM"],
        "model_type": "qwen3_5_moe_text",
        "vocab_size": c.vocab,
        "hidden_size": c.d_model,
        "num_hidden_layers": c.layers,
        "layer_types": layer_types,
        "num_attention_heads": a.heads,
        "num_key_value_heads": a.kv_heads,
        "head_dim": a.head_dim,
        "linear_num_key_heads": g.key_heads,
        "linear_num_value_heads": g.value_heads,
        "linear_key_head_dim": g.key_dim,
        "linear_value_head_dim": g.value_dim,
        "linear_conv_kernel_dim": g.conv_kernel,
        "num_experts": c.experts,
        "num_experts_per_tok": c.top_k,
        "moe_intermediate_size": c.expert_width,
        "shared_expert_intermediate_size": c.shared_width,
        "router_aux_loss_coef": c.router_aux_loss_coef,
        "rope_parameters": {
            "rope_theta": a.rope_theta,
            "partial_rotary_factor": a.rotary_dim as f64 / a.head_dim as f64,
            "rope_type": "default",
        },
        "rms_norm_eps": crate::qwen35::NORM_EPS,
        "max_position_embeddings": c.seq,
        "tie_word_embeddings": false,
        "hidden_act": "silu",
        "dtype": "float32",
    })
}

/// A Qwen3.5 file's config (its decoder's fields: `text_config` of a vision-language file).
pub(crate) fn read(f: &Fields) -> Result<Qwen35Config> {
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
    // The block is declared (`block = [Gdn, Gdn, Gdn, Attention]`); the number of blocks is
    // the config's.
    let declared: Vec<bool> = (0..layers).map(|l| l % 4 == 3).collect();
    if !layers.is_multiple_of(4) || full != declared {
        return Err(invalid(format!(
            "fields `num_hidden_layers` = {layers} and `layer_types`: the declared Qwen3.5 \
             stack is blocks of three `linear_attention` layers and one `full_attention`"
        )));
    }
    norm_eps(f, crate::qwen35::NORM_EPS, "Qwen3.5")?;
    if let Some((kind, _)) = scaling_kind(f.rope_scaling.as_ref())? {
        return Err(invalid(format!(
            "field `rope_scaling` has type `{kind}`; the declared Qwen3.5 implements no RoPE \
             scaling (its published context needs none)"
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
        capacity_factor: capacity_factor(f)?,
        router_aux_loss_coef: coefficient(
            f.router_aux_loss_coef,
            "router_aux_loss_coef",
            crate::qwen35::ROUTER_AUX_LOSS_COEF,
        )?,
        direct_token_gather: false,
        dlhs_transpose_rhs: false,
        expert_mesh: crate::moe::ExpertMesh::OFF,
        gdn,
        attention,
    })
}
