//! Multi-head latent attention (DeepSeek-V2/V3): queries through a low-rank bottleneck
//! (`q_lora`) with RMSNorm; keys and values from one compressed latent (`kv_lora`) with
//! RMSNorm, plus a single rotary key shared by all heads; each head's query and key split
//! into a position-free part (`nope`) and a rotary part (`rope`); a separate value head
//! size; causal; softmax scale `1/√(nope + rope)`, the query head size.
//!
//! MLA is a module ([`Mla`], `#[derive(Module)]`): a layer holds it as a field
//! `#[module(config = cfg.mla())] attn: Mla<T>`, so its weights are named `attn.q_down`, …,
//! `attn.out`, as in the published checkpoints' `self_attn.*`.
//!
//! ```
//! use stackscan::layer::Params;
//! use stackscan::{DType, Module, Scope, Tensor, TensorType};
//! use stackscan_models::mla::{Mla, MlaConfig};
//! let c = MlaConfig::deepseek3_tiny();
//! let s = Scope::new("mla");
//! let w = <Mla<Tensor> as Module>::param_specs(&c)
//!     .iter()
//!     .map(|p| s.param(p.full_type()))
//!     .collect();
//! let attn = Mla::from_values(w)?;
//! let y = attn.forward(&c, &s.param(TensorType::new(DType::F32, [2, 64, c.d])))?;
//! assert_eq!(y.dims(), &[2, 64, 128]);
//! # Ok::<(), stackscan::Error>(())
//! ```

use serde::{Deserialize, Serialize};
use stackscan::layer::Params;
use stackscan::{Axis, Error, Module, Result, Tensor, concatenate, nn};

use crate::yarn::Yarn;

/// MLA's sizes; data (a `[mla]` table of a model's TOML config; its missing fields are the
/// base preset's, [`crate::configs`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MlaConfig {
    /// Model width.
    pub d: i64,
    /// Attention heads.
    pub heads: i64,
    /// Query bottleneck rank.
    pub q_lora: i64,
    /// Key/value latent rank.
    pub kv_lora: i64,
    /// Per-head query/key features without position.
    pub nope: i64,
    /// Per-head rotary query/key features (the rotary key is shared by all heads).
    pub rope: i64,
    /// Per-head value features.
    pub v: i64,
    /// RoPE base.
    pub rope_theta: f64,
    /// RMSNorm epsilon of the two latents.
    pub eps: f64,
    /// YaRN context extension of the rotary features (`rope_scaling` of the published
    /// config); none: plain RoPE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_scaling: Option<Yarn>,
    /// Keys per step of blockwise causal attention (the online softmax of
    /// [`nn::context::blocked_causal_attention`]): a layer holds `[B, heads, seq, block]`
    /// scores instead of `[B, heads, seq, seq]`. It must divide the sequence. Absent, the
    /// default: the whole score matrix (under context parallelism, blocks of a piece).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_block: Option<i64>,
    /// Devices each sequence is split over (context parallelism): set by the model from its
    /// run's layout, never read from a file. 1: none.
    #[serde(skip, default = "crate::llama::one")]
    pub context: usize,
}

impl Default for MlaConfig {
    fn default() -> Self {
        MlaConfig::deepseek3_tiny()
    }
}

impl MlaConfig {
    /// The tiny DeepSeek-V3-style model's attention.
    /// The `[mla]` table of the tiny DeepSeek-V3 preset.
    pub fn deepseek3_tiny() -> Self {
        crate::deepseek3::DeepSeek3Config::tiny().mla
    }

    /// DeepSeek-V3 (671B) as published.
    /// The `[mla]` table of the published DeepSeek-V3 preset.
    pub fn deepseek3() -> Self {
        crate::deepseek3::DeepSeek3Config::deepseek3().mla
    }

    /// Query/key head size.
    pub const fn qk_head(&self) -> i64 {
        self.nope + self.rope
    }

    /// Each weight's name and shape, in declaration order (what [`Mla::from_values`] takes).
    pub fn weight_shapes(&self) -> Vec<(String, Vec<i64>)> {
        <Mla<Tensor> as Module>::param_specs(self)
            .into_iter()
            .map(|p| (p.name, p.shape))
            .collect()
    }
}

/// MLA's weights, named as in the published checkpoints; the projections sharded on their
/// input dimension, the two latent norms replicated.
#[derive(Debug, Module)]
#[module(config = MlaConfig)]
pub struct Mla<T> {
    /// `[d, q_lora]` (`q_a_proj`)
    #[param(shape = [cfg.d, cfg.q_lora], shard = 0)]
    pub q_down: T,
    /// `[q_lora]` (`q_a_layernorm`)
    #[param(shape = [cfg.q_lora], replicated)]
    pub q_norm: T,
    /// `[q_lora, H·(nope + rope)]` (`q_b_proj`)
    #[param(shape = [cfg.q_lora, cfg.heads * cfg.qk_head()], shard = 0)]
    pub q_up: T,
    /// `[d, kv_lora + rope]` (`kv_a_proj_with_mqa`): the latent, then the shared rotary key.
    #[param(shape = [cfg.d, cfg.kv_lora + cfg.rope], shard = 0)]
    pub kv_down: T,
    /// `[kv_lora]` (`kv_a_layernorm`)
    #[param(shape = [cfg.kv_lora], replicated)]
    pub kv_norm: T,
    /// `[kv_lora, H·(nope + v)]` (`kv_b_proj`): per head, key features then value features.
    #[param(shape = [cfg.kv_lora, cfg.heads * (cfg.nope + cfg.v)], shard = 0)]
    pub kv_up: T,
    /// `[H·v, d]` (`o_proj`)
    #[param(shape = [cfg.heads * cfg.v, cfg.d], shard = 0)]
    pub out: T,
}

impl Mla<Tensor> {
    /// [`mla`] with these weights.
    pub fn forward(&self, c: &MlaConfig, x: &Tensor) -> Result<Tensor> {
        mla(c, x, self)
    }
}

/// RoPE's inverse frequencies, the rotation's magnitude and the softmax scale's factor (YaRN
/// changes all three; 1 without it).
fn rotary(c: &MlaConfig) -> Result<(Vec<f64>, f64, f64)> {
    let rope = c.rope;
    if rope <= 0 || rope % 2 != 0 {
        return Err(Error::InvalidOp {
            op: "mla",
            message: format!("`rope` ({rope}) must be even and above 0: RoPE rotates pairs"),
        });
    }
    Ok(match &c.rope_scaling {
        Some(y) => {
            y.validate()
                .map_err(|message| Error::InvalidOp { op: "mla", message })?;
            (
                y.inv_freq(c.rope_theta, rope as usize),
                y.rotation_magnitude(),
                y.attention_factor(),
            )
        }
        None => (
            (0..rope / 2)
                .map(|i| c.rope_theta.powf(-2.0 * i as f64 / rope as f64))
                .collect(),
            1.0,
            1.0,
        ),
    })
}

/// Checks `x: [B, T, d]` and the weights' shapes.
fn check(c: &MlaConfig, x: &Tensor, w: &Mla<Tensor>) -> Result<()> {
    if x.rank() != 3 || x.dims()[2] != c.d {
        return Err(Error::InvalidOp {
            op: "mla",
            message: format!("expected x [B, T, {}], got {}", c.d, x.ty()),
        });
    }
    for ((name, want), got) in c.weight_shapes().iter().zip(w.values()) {
        if got.dims() != want.as_slice() {
            return Err(Error::InvalidOp {
                op: "mla",
                message: format!("weight `{name}` must be {want:?}, got {}", got.ty()),
            });
        }
    }
    Ok(())
}

/// The queries `[B, T, H, nope + rope]`, their rotary part rotated by `rot`.
fn queries(
    c: &MlaConfig,
    x: &Tensor,
    w: &Mla<Tensor>,
    rot: &dyn Fn(&Tensor) -> Result<Tensor>,
) -> Result<Tensor> {
    let (b, t) = (x.dims()[0], x.dims()[1]);
    let q = nn::rms_norm(&x.matmul(&w.q_down)?, &w.q_norm, c.eps)?
        .matmul(&w.q_up)?
        .reshape(&[b, t, c.heads, c.qk_head()])?;
    let q_nope = q.slice_axis(3, 0, c.nope)?;
    let q_rope = rot(&q.slice_axis(3, c.nope, c.nope + c.rope)?)?;
    concatenate(&[&q_nope, &q_rope], 3)
}

/// The rotated shared key `k_rope: [B, S, 1, rope]` given to every head, `[B, S, H, rope]`.
fn every_head(c: &MlaConfig, k_rope: &Tensor) -> Result<Tensor> {
    let (b, keys) = (k_rope.dims()[0], k_rope.dims()[1]);
    k_rope.broadcast_in_dim(&[b, keys, c.heads, c.rope], &[0, 1, 2, 3])
}

/// The keys `[B, S, H, nope + rope]` and values `[B, S, H, v]` of the normalised latent
/// `c_kv: [B, S, kv_lora]` and the rotated shared key of every head, `k_rope: [B, S, H,
/// rope]` ([`every_head`]).
fn keys_and_values(
    c: &MlaConfig,
    w: &Mla<Tensor>,
    c_kv: &Tensor,
    k_rope: &Tensor,
) -> Result<(Tensor, Tensor)> {
    let (b, keys, h, nope) = (c_kv.dims()[0], c_kv.dims()[1], c.heads, c.nope);
    let kv = c_kv.matmul(&w.kv_up)?.reshape(&[b, keys, h, nope + c.v])?;
    let k = concatenate(&[&kv.slice_axis(3, 0, nope)?, k_rope], 3)?;
    Ok((k, kv.slice_axis(3, nope, nope + c.v)?))
}

/// Causal MLA self-attention of `x: [B, T, d]` (already normalised), back to `[B, T, d]`.
pub fn mla(c: &MlaConfig, x: &Tensor, w: &Mla<Tensor>) -> Result<Tensor> {
    check(c, x, w)?;
    let (b, t) = (x.dims()[0], x.dims()[1]);
    let (inv_freq, magnitude, attention_factor) = rotary(c)?;
    // Under context parallelism `x` is this device's piece of each sequence, starting at
    // `start`; RoPE rotates from there.
    let context = (c.context > 1).then(|| Axis::new(nn::context::CONTEXT_AXIS, c.context));
    let start = match &context {
        Some(axis) => Some(nn::context::sequence_start(x, t, axis)?),
        None => None,
    };
    let rot = |z: &Tensor| match &start {
        Some(start) => nn::rope_with_frequencies_from(z, &inv_freq, magnitude, start),
        None => nn::rope_with_frequencies(z, &inv_freq, magnitude),
    };
    let q = queries(c, x, w, &rot)?;

    let latent = x.matmul(&w.kv_down)?;
    let k_rope = rot(&latent
        .slice_axis(2, c.kv_lora, c.kv_lora + c.rope)?
        .reshape(&[b, t, 1, c.rope])?)?;
    let c_kv =
        |latent: &Tensor| nn::rms_norm(&latent.slice_axis(2, 0, c.kv_lora)?, &w.kv_norm, c.eps);
    // Context parallelism exchanges the compressed keys and values: the normalised latent and
    // the rotated shared key, `kv_lora + rope` numbers a position, not the expanded heads'
    // `heads·(nope + v) + rope`; every device then expands the whole sequence's latent.
    let (k_rope, c_kv) = match &context {
        Some(axis) => {
            let c_kv = nn::context::gather_sequence(&c_kv(&latent)?, axis)?;
            let k_rope = nn::context::gather_sequence(&k_rope, axis)?;
            (every_head(c, &k_rope)?, c_kv)
        }
        None => (every_head(c, &k_rope)?, c_kv(&latent)?),
    };
    let (k, v) = keys_and_values(c, w, &c_kv, &k_rope)?;
    let scale = attention_factor / (c.qk_head() as f64).sqrt();
    match (&start, c.attention_block) {
        (Some(start), block) => {
            nn::context::blocked_causal_attention(&q, &k, &v, scale, start, block.unwrap_or(t))?
                .matmul(&w.out)
        }
        (None, Some(block)) => {
            let first = x.scope().from_i64s(&[0], stackscan::DType::I32, &[])?;
            nn::context::blocked_causal_attention(&q, &k, &v, scale, &first, block)?.matmul(&w.out)
        }
        (None, None) => nn::causal_attention(&q, &k, &v, scale)?.matmul(&w.out),
    }
}

/// [`mla`] of new positions `x: [B, T, d]` at `positions: [B, T]` against a cache of the
/// compressed keys and values (`[latent [B, C, kv_lora], rotated shared key [B, C, 1, rope]]`,
/// [`cache_types`]), written first; returns the output and the new cache. The cache holds
/// `kv_lora + rope` numbers a position, as context parallelism exchanges them; each step
/// expands the whole cache into heads.
pub fn mla_cached(
    c: &MlaConfig,
    x: &Tensor,
    w: &Mla<Tensor>,
    positions: &Tensor,
    cache: &[Tensor],
) -> Result<(Tensor, Vec<Tensor>)> {
    check(c, x, w)?;
    let [latents, shared] = cache else {
        return Err(Error::InvalidOp {
            op: "mla",
            message: format!(
                "the cache is latents and shared keys, got {} parts",
                cache.len()
            ),
        });
    };
    let (b, t) = (x.dims()[0], x.dims()[1]);
    let (inv_freq, magnitude, attention_factor) = rotary(c)?;
    let rot = |z: &Tensor| nn::rope_with_frequencies_at(z, &inv_freq, magnitude, positions);
    let q = queries(c, x, w, &rot)?;
    let latent = x.matmul(&w.kv_down)?;
    let k_rope = rot(&latent
        .slice_axis(2, c.kv_lora, c.kv_lora + c.rope)?
        .reshape(&[b, t, 1, c.rope])?)?;
    let c_kv = nn::rms_norm(&latent.slice_axis(2, 0, c.kv_lora)?, &w.kv_norm, c.eps)?;
    let latents = nn::cache::write(latents, &c_kv, positions)?;
    let shared = nn::cache::write(shared, &k_rope, positions)?;
    let (k, v) = keys_and_values(c, w, &latents, &every_head(c, &shared)?)?;
    let scale = attention_factor / (c.qk_head() as f64).sqrt();
    let out = nn::cache::attend(&q, &k, &v, scale, positions, nn::Mask::Causal)?.matmul(&w.out)?;
    Ok((out, vec![latents, shared]))
}

/// One MLA layer's cache for `rows` sequences of up to `capacity` positions
/// ([`mla_cached`]).
pub fn cache_types(c: &MlaConfig, rows: i64, capacity: i64) -> Vec<stackscan::TensorType> {
    use stackscan::{DType, TensorType};
    vec![
        TensorType::new(DType::F32, [rows, capacity, c.kv_lora]),
        TensorType::new(DType::F32, [rows, capacity, 1, c.rope]),
    ]
}
