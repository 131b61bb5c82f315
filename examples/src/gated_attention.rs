//! The gated attention sub-layer of a Qwen3.5-style hybrid layer: grouped-query causal
//! attention with per-head RMSNorm on queries and keys (QK-norm), rotary embedding on the
//! first quarter of each head's features (partial RoPE), and a sigmoid output gate that the
//! query projection produces alongside the queries.
//!
//! On `h: [B, T, d]` it computes `h + W_o · (attention(x) · sigmoid(gate))` with
//! `x = RMSNorm(h)` and `x W_q = [query | gate]` per head (each head's `2·hd` outputs are its
//! query followed by its gate, as in Qwen3-Next). The gate lets a head write nothing, which
//! removes the attention-sink pressure on the first token.
//!
//! ```
//! use stackscan::{DType, Scope, TensorType};
//! use stackscan_examples::gated_attention::{AttentionConfig, attention_params, gated_attention};
//!
//! let c = AttentionConfig::tiny();
//! let s = Scope::new("attention");
//! let h = s.param(TensorType::new(DType::F32, [2, 64, c.d_model]));
//! let w: Vec<_> = attention_params(&c)
//!     .iter()
//!     .map(|p| s.param(TensorType::new(p.dtype, p.shape.clone())))
//!     .collect();
//! assert_eq!(gated_attention(&c, &h, &w)?.dims(), h.dims());
//! # Ok::<(), stackscan::Error>(())
//! ```

use stackscan::fsdp::{Init, ParamSpec};
use stackscan::{DType, Error, Result, Tensor, nn};

/// RMSNorm epsilon of the input norm and the QK-norm.
const NORM_EPS: f64 = 1e-6;

/// Sizes of one gated attention sub-layer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionConfig {
    /// Model width.
    pub d_model: i64,
    /// Query heads; a multiple of `kv_heads`.
    pub heads: i64,
    /// Key/value heads.
    pub kv_heads: i64,
    /// Width of one head.
    pub head_dim: i64,
    /// Features of each head that RoPE rotates (even, at most `head_dim`).
    pub rotary_dim: i64,
    /// RoPE base.
    pub rope_theta: f64,
    /// Layers in the whole model, which scales the output projection's initialisation.
    pub model_layers: usize,
}

impl AttentionConfig {
    /// The tiny hybrid config of issue 12: d 128, 8 query heads, 1 key/value head of 32,
    /// rotary on 8 of the 32 features.
    pub const fn tiny() -> Self {
        AttentionConfig {
            d_model: 128,
            heads: 8,
            kv_heads: 1,
            head_dim: 32,
            rotary_dim: 8,
            rope_theta: 10_000_000.0,
            model_layers: 8,
        }
    }

    /// Qwen3.5-35B-A3B's published attention sizes (for plans and cost models): d 2048,
    /// 16 query / 2 key-value heads of 256, rotary on 64 features, 40 layers.
    pub const fn qwen35_35b_a3b() -> Self {
        AttentionConfig {
            d_model: 2048,
            heads: 16,
            kv_heads: 2,
            head_dim: 256,
            rotary_dim: 64,
            rope_theta: 10_000_000.0,
            model_layers: 40,
        }
    }
}

/// Parameters of one gated attention sub-layer, in the order [`gated_attention`] reads
/// them. `wq` is twice as wide as the heads: each head's query and then its gate.
pub fn attention_params(c: &AttentionConfig) -> Vec<ParamSpec> {
    let f32 = DType::F32;
    let (d, hd) = (c.d_model, c.head_dim);
    let out_std = 0.02 / (2.0 * c.model_layers as f64).sqrt();
    vec![
        ParamSpec::replicated("attn_norm", &[d], f32),
        ParamSpec::sharded("wq", &[d, 2 * c.heads * hd], f32, 0),
        ParamSpec::sharded("wk", &[d, c.kv_heads * hd], f32, 0),
        ParamSpec::sharded("wv", &[d, c.kv_heads * hd], f32, 0),
        ParamSpec::replicated("q_norm", &[hd], f32),
        ParamSpec::replicated("k_norm", &[hd], f32),
        ParamSpec::sharded("wo", &[c.heads * hd, d], f32, 0).with_init(Init::Normal(out_std)),
    ]
}

/// A typed error naming the attention parameter or input at fault.
fn invalid(message: String) -> Error {
    Error::InvalidOp {
        op: "gated_attention",
        message,
    }
}

/// Checks `h`, the weights and the head split against `c`.
fn check(c: &AttentionConfig, h: &Tensor, w: &[Tensor]) -> Result<()> {
    crate::weights::check_shapes("gated_attention", &attention_params(c), w)?;
    if !matches!(h.dims(), [_, _, d] if *d == c.d_model) {
        return Err(invalid(format!(
            "expected h: [B, T, {}], got {}",
            c.d_model,
            h.ty()
        )));
    }
    if c.kv_heads <= 0 || c.heads % c.kv_heads != 0 {
        return Err(invalid(format!(
            "{} query heads do not split over {} key/value heads",
            c.heads, c.kv_heads
        )));
    }
    Ok(())
}

/// The gated attention sub-layer with its residual on `h: [B, T, d]`, weights in the order
/// of [`attention_params`].
pub fn gated_attention(c: &AttentionConfig, h: &Tensor, w: &[Tensor]) -> Result<Tensor> {
    check(c, h, w)?;
    let [norm, wq, wk, wv, q_norm, k_norm, wo] = w else {
        return Err(invalid(format!("expected 7 weights, got {}", w.len())));
    };
    let (b, t) = (h.dims()[0], h.dims()[1]);
    let (nh, nkv, hd) = (c.heads, c.kv_heads, c.head_dim);
    let rotary = usize::try_from(c.rotary_dim)
        .map_err(|_| invalid(format!("rotary_dim {} is negative", c.rotary_dim)))?;
    let x = nn::rms_norm(h, norm, NORM_EPS)?;
    let qg = x.matmul(wq)?.reshape(&[b, t, nh, 2 * hd])?;
    let gate = qg.slice_axis(3, hd, 2 * hd)?.reshape(&[b, t, nh * hd])?;
    let q = nn::rms_norm(&qg.slice_axis(3, 0, hd)?, q_norm, NORM_EPS)?;
    let q = nn::rope(&q, c.rope_theta, rotary)?;
    let k = nn::rms_norm(&x.matmul(wk)?.reshape(&[b, t, nkv, hd])?, k_norm, NORM_EPS)?;
    let k = nn::rope(&k, c.rope_theta, rotary)?;
    let v = x.matmul(wv)?.reshape(&[b, t, nkv, hd])?;
    // Grouped-query attention: key/value head `j` serves query heads `j·g .. (j+1)·g`.
    let (k, v) = (nn::repeat_kv(&k, nh)?, nn::repeat_kv(&v, nh)?);
    let attn = nn::causal_attention(&q, &k, &v, 1.0 / (hd as f64).sqrt())?;
    h.add(&attn.mul(&gate.sigmoid()?)?.matmul(wo)?)
}
