//! The gated attention token mixer of a Qwen3.5-style hybrid layer, as a module
//! ([`GatedAttention`], shapes from [`GatedAttentionDims`]): grouped-query causal attention
//! with per-head RMSNorm on queries and keys (QK-norm), rotary embedding on the first
//! quarter of each head's features (partial RoPE), and a sigmoid output gate that the query
//! projection produces alongside the queries.
//!
//! On the normalised stream `x = RMSNorm(h): [B, T, d]` it computes
//! `W_o · (attention(x) · sigmoid(gate))` with `x W_q = [query | gate]` per head (each head's
//! `2·hd` outputs are its query followed by its gate, as in Qwen3-Next). The gate lets a
//! head write nothing, which removes the attention-sink pressure on the first token. The
//! pre-norm and the residual belong to the sub-layer holding the mixer
//! ([`qwen35::Attention`](crate::qwen35::Attention)).
//!
//! ```
//! use stackscan::layer::Params;
//! use stackscan::{DType, Module, Scope, Tensor, TensorType};
//! use stackscan_models::gated_attention::{AttentionConfig, GatedAttention, GatedAttentionDims};
//!
//! let c = GatedAttentionDims::new(128, 8, AttentionConfig::tiny());
//! let s = Scope::new("attention");
//! let x = s.param(TensorType::new(DType::F32, [2, 64, c.d_model]));
//! let specs = GatedAttention::<Tensor>::param_specs(&c);
//! assert_eq!(specs[0].shape, [128, 2 * 8 * 32]);
//! let w = specs.iter().map(|p| s.param(p.full_type())).collect();
//! let attn = GatedAttention::from_values(w)?;
//! assert_eq!(attn.forward(&c, &x)?.dims(), x.dims());
//! # Ok::<(), stackscan::Error>(())
//! ```

use serde::{Deserialize, Serialize};
use stackscan::layer::Params;
use stackscan::{Error, Module, Result, Tensor, nn};

/// RMSNorm epsilon of the QK-norm.
const NORM_EPS: f64 = 1e-6;

/// The gated attention's own sizes, the `[attention]` table of a model's config file. The
/// model width and the output projection's initialisation are the model's
/// ([`GatedAttentionDims`] adds them). A file's missing fields are its base preset's
/// ([`crate::configs`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttentionConfig {
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
}

impl Default for AttentionConfig {
    fn default() -> Self {
        AttentionConfig::tiny()
    }
}

impl AttentionConfig {
    /// The tiny hybrid config of issue 12: 8 query heads, 1 key/value head of 32, rotary on
    /// 8 of the 32 features.
    /// The `[attention]` table of the tiny Qwen3.5 preset.
    pub fn tiny() -> Self {
        crate::qwen35::Qwen35Config::tiny().attention
    }

    /// Qwen3.5-35B-A3B's published attention sizes (for plans and cost models): 16 query /
    /// 2 key-value heads of 256, rotary on 64 features.
    /// The `[attention]` table of the published Qwen3.5 preset.
    pub fn qwen35_35b_a3b() -> Self {
        crate::qwen35::Qwen35Config::qwen35_35b_a3b().attention
    }
}

/// What [`GatedAttention`] reads: its own sizes at a model width, and the standard
/// deviation of its output projection's initialiser.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GatedAttentionDims {
    /// Model width.
    pub d_model: i64,
    /// The mixer's own sizes.
    pub attention: AttentionConfig,
    /// Standard deviation of `wo`'s initialiser.
    pub out_std: f64,
}

impl GatedAttentionDims {
    /// `attention` at width `d_model` in a model of `layers` layers, whose output
    /// projections start at `0.02 / √(2·layers)` (GPT-2's residual scaling).
    pub fn new(d_model: i64, layers: usize, attention: AttentionConfig) -> Self {
        GatedAttentionDims {
            d_model,
            attention,
            out_std: 0.02 / (2.0 * layers as f64).sqrt(),
        }
    }
}

impl GatedAttentionDims {
    /// One layer's key and value caches for `rows` sequences of up to `capacity` positions,
    /// `[rows, capacity, kv_heads, head_dim]` each.
    pub fn cache(&self, rows: i64, capacity: i64) -> Vec<stackscan::TensorType> {
        let a = &self.attention;
        let ty = stackscan::TensorType::new(
            stackscan::DType::F32,
            [rows, capacity, a.kv_heads, a.head_dim],
        );
        vec![ty.clone(), ty]
    }
}

/// Gated grouped-query causal attention of the normalised stream. `wq` is twice as wide as
/// the heads: each head's query and then its gate.
#[derive(Debug, Module)]
#[module(config = GatedAttentionDims)]
pub struct GatedAttention<T> {
    /// Query and gate projection, `[d, 2·heads·head_dim]`.
    #[param(shape = [cfg.d_model, 2 * cfg.attention.heads * cfg.attention.head_dim], shard = 0)]
    pub wq: T,
    /// Key projection, `[d, kv_heads·head_dim]`.
    #[param(shape = [cfg.d_model, cfg.attention.kv_heads * cfg.attention.head_dim], shard = 0)]
    pub wk: T,
    /// Value projection, `[d, kv_heads·head_dim]`.
    #[param(shape = [cfg.d_model, cfg.attention.kv_heads * cfg.attention.head_dim], shard = 0)]
    pub wv: T,
    /// Query RMSNorm scale (per head), `[head_dim]`.
    #[param(shape = [cfg.attention.head_dim], replicated)]
    pub q_norm: T,
    /// Key RMSNorm scale (per head), `[head_dim]`.
    #[param(shape = [cfg.attention.head_dim], replicated)]
    pub k_norm: T,
    /// Output projection, `[heads·head_dim, d]`.
    #[param(
        shape = [cfg.attention.heads * cfg.attention.head_dim, cfg.d_model],
        shard = 0,
        init = normal(cfg.out_std),
    )]
    pub wo: T,
}

/// A typed error naming the attention parameter or input at fault.
fn invalid(message: String) -> Error {
    Error::InvalidOp {
        op: "gated_attention",
        message,
    }
}

impl GatedAttention<Tensor> {
    /// The output gate `[B, T, H·D]` and the queries, keys and values `[B, T, heads, D]` of
    /// `x: [B, T, d]`, queries and keys normalised per head and rotated by `rotate` (with its
    /// rotary width): the part the training forward and decoding share.
    fn project(
        &self,
        c: &GatedAttentionDims,
        x: &Tensor,
        rotate: impl Fn(&Tensor, usize) -> Result<Tensor>,
    ) -> Result<[Tensor; 4]> {
        let a = &c.attention;
        let (b, t) = (x.dims()[0], x.dims()[1]);
        let (nh, nkv, hd) = (a.heads, a.kv_heads, a.head_dim);
        let rotary = usize::try_from(a.rotary_dim)
            .map_err(|_| invalid(format!("rotary_dim {} is negative", a.rotary_dim)))?;
        let qg = x.matmul(&self.wq)?.reshape(&[b, t, nh, 2 * hd])?;
        let gate = qg.slice_axis(3, hd, 2 * hd)?.reshape(&[b, t, nh * hd])?;
        let q = nn::rms_norm(&qg.slice_axis(3, 0, hd)?, &self.q_norm, NORM_EPS)?;
        let q = rotate(&q, rotary)?;
        let k = x.matmul(&self.wk)?.reshape(&[b, t, nkv, hd])?;
        let k = rotate(&nn::rms_norm(&k, &self.k_norm, NORM_EPS)?, rotary)?;
        let v = x.matmul(&self.wv)?.reshape(&[b, t, nkv, hd])?;
        Ok([gate, q, k, v])
    }

    /// The mixer of the normalised stream `x: [B, T, d]`, projected back to `[B, T, d]`.
    pub fn forward(&self, c: &GatedAttentionDims, x: &Tensor) -> Result<Tensor> {
        self.check(c, x)?;
        let a = &c.attention;
        let [gate, q, k, v] = self.project(c, x, |z, rotary| nn::rope(z, a.rope_theta, rotary))?;
        // Grouped-query attention: key/value head `j` serves query heads `j·g .. (j+1)·g`.
        let (k, v) = (nn::repeat_kv(&k, a.heads)?, nn::repeat_kv(&v, a.heads)?);
        let attn = nn::causal_attention(&q, &k, &v, 1.0 / (a.head_dim as f64).sqrt())?;
        attn.mul(&gate.sigmoid()?)?.matmul(&self.wo)
    }

    /// [`GatedAttention::forward`] of new positions `x: [B, T, d]` at `positions: [B, T]`
    /// against a key/value cache ([`GatedAttentionDims::cache`]), written first; returns the
    /// output and the new cache.
    pub fn decode(
        &self,
        c: &GatedAttentionDims,
        x: &Tensor,
        positions: &Tensor,
        cache: &[Tensor],
    ) -> Result<(Tensor, Vec<Tensor>)> {
        self.check(c, x)?;
        let [keys, values] = cache else {
            return Err(invalid(format!(
                "a layer's cache is keys and values, got {} parts",
                cache.len()
            )));
        };
        let a = &c.attention;
        let hd = a.head_dim;
        let [gate, q, k, v] = self.project(c, x, |z, rotary| {
            nn::rope_at(z, a.rope_theta, rotary, positions)
        })?;
        let keys = nn::cache::write(keys, &k, positions)?;
        let values = nn::cache::write(values, &v, positions)?;
        let scale = 1.0 / (hd as f64).sqrt();
        let attn = nn::cache::attend(&q, &keys, &values, scale, positions, nn::Mask::Causal)?;
        let out = attn.mul(&gate.sigmoid()?)?.matmul(&self.wo)?;
        Ok((out, vec![keys, values]))
    }

    /// Checks `x`, the weights and the head split against `c`, naming the first parameter
    /// whose shape differs.
    fn check(&self, c: &GatedAttentionDims, x: &Tensor) -> Result<()> {
        let weights: Vec<Tensor> = self.values().into_iter().cloned().collect();
        crate::weights::check_shapes("gated_attention", &Self::param_specs(c), &weights)?;
        if !matches!(x.dims(), [_, _, d] if *d == c.d_model) {
            return Err(invalid(format!(
                "expected x: [B, T, {}], got {}",
                c.d_model,
                x.ty()
            )));
        }
        let a = &c.attention;
        if a.kv_heads <= 0 || a.heads % a.kv_heads != 0 {
            return Err(invalid(format!(
                "{} query heads do not split over {} key/value heads",
                a.heads, a.kv_heads
            )));
        }
        Ok(())
    }
}
