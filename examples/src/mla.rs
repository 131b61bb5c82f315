//! Multi-head latent attention (DeepSeek-V2/V3): queries through a low-rank bottleneck
//! (`q_lora`) with RMSNorm; keys and values from one compressed latent (`kv_lora`) with
//! RMSNorm, plus a single rotary key shared by all heads; each head's query and key split
//! into a position-free part (`nope`) and a rotary part (`rope`); a separate value head
//! size; causal; softmax scale `1/√(nope + rope)`, the query head size.
//!
//! ```
//! use stackscan::{DType, Scope, TensorType};
//! use stackscan_examples::mla::{MlaConfig, MlaWeights, mla};
//! let c = MlaConfig::deepseek3_tiny();
//! let s = Scope::new("mla");
//! let p = |dims: Vec<i64>| s.param(TensorType::new(DType::F32, dims));
//! let shapes = c.weight_shapes();
//! let w: Vec<_> = shapes.iter().map(|(_, d)| p(d.clone())).collect();
//! let x = p(vec![2, 64, c.d]);
//! let y = mla(&c, &x, &MlaWeights::from_slice(&w)?)?;
//! assert_eq!(y.dims(), &[2, 64, 128]);
//! # Ok::<(), stackscan::Error>(())
//! ```

use stackscan::{Error, Result, Tensor, concatenate, nn};

/// MLA's sizes.
#[derive(Clone, Copy, Debug, PartialEq)]
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
}

impl MlaConfig {
    /// The tiny DeepSeek-V3-style model's attention.
    pub const fn deepseek3_tiny() -> Self {
        MlaConfig {
            d: 128,
            heads: 4,
            q_lora: 48,
            kv_lora: 32,
            nope: 32,
            rope: 16,
            v: 32,
            rope_theta: 10_000.0,
            eps: 1e-6,
        }
    }

    /// DeepSeek-V3 (671B) as published.
    pub const fn deepseek3() -> Self {
        MlaConfig {
            d: 7168,
            heads: 128,
            q_lora: 1536,
            kv_lora: 512,
            nope: 128,
            rope: 64,
            v: 128,
            rope_theta: 10_000.0,
            eps: 1e-6,
        }
    }

    /// Query/key head size.
    pub const fn qk_head(&self) -> i64 {
        self.nope + self.rope
    }

    /// Each weight's name and shape, in [`MlaWeights::from_slice`]'s order.
    pub fn weight_shapes(&self) -> [(&'static str, Vec<i64>); 7] {
        let (h, d) = (self.heads, self.d);
        [
            ("q_down", vec![d, self.q_lora]),
            ("q_norm", vec![self.q_lora]),
            ("q_up", vec![self.q_lora, h * self.qk_head()]),
            ("kv_down", vec![d, self.kv_lora + self.rope]),
            ("kv_norm", vec![self.kv_lora]),
            ("kv_up", vec![self.kv_lora, h * (self.nope + self.v)]),
            ("out", vec![h * self.v, d]),
        ]
    }
}

/// MLA's weights, named as in the published checkpoints.
#[derive(Clone, Copy, Debug)]
pub struct MlaWeights<'a> {
    /// `[d, q_lora]` (`q_a_proj`)
    pub q_down: &'a Tensor,
    /// `[q_lora]` (`q_a_layernorm`)
    pub q_norm: &'a Tensor,
    /// `[q_lora, H·(nope + rope)]` (`q_b_proj`)
    pub q_up: &'a Tensor,
    /// `[d, kv_lora + rope]` (`kv_a_proj_with_mqa`): the latent, then the shared rotary key.
    pub kv_down: &'a Tensor,
    /// `[kv_lora]` (`kv_a_layernorm`)
    pub kv_norm: &'a Tensor,
    /// `[kv_lora, H·(nope + v)]` (`kv_b_proj`): per head, key features then value features.
    pub kv_up: &'a Tensor,
    /// `[H·v, d]` (`o_proj`)
    pub out: &'a Tensor,
}

impl<'a> MlaWeights<'a> {
    /// Names seven tensors in [`MlaConfig::weight_shapes`]' order.
    pub fn from_slice(w: &'a [Tensor]) -> Result<Self> {
        let [q_down, q_norm, q_up, kv_down, kv_norm, kv_up, out] = w else {
            return Err(Error::InvalidOp {
                op: "mla",
                message: format!("expected 7 weights, got {}", w.len()),
            });
        };
        Ok(MlaWeights {
            q_down,
            q_norm,
            q_up,
            kv_down,
            kv_norm,
            kv_up,
            out,
        })
    }
}

/// Causal MLA self-attention of `x: [B, T, d]` (already normalised), back to `[B, T, d]`.
pub fn mla(c: &MlaConfig, x: &Tensor, w: &MlaWeights<'_>) -> Result<Tensor> {
    if x.rank() != 3 || x.dims()[2] != c.d {
        return Err(Error::InvalidOp {
            op: "mla",
            message: format!("expected x [B, T, {}], got {}", c.d, x.ty()),
        });
    }
    for ((name, want), got) in c.weight_shapes().iter().zip([
        w.q_down, w.q_norm, w.q_up, w.kv_down, w.kv_norm, w.kv_up, w.out,
    ]) {
        if got.dims() != want.as_slice() {
            return Err(Error::InvalidOp {
                op: "mla",
                message: format!("weight `{name}` must be {want:?}, got {}", got.ty()),
            });
        }
    }
    let (b, t) = (x.dims()[0], x.dims()[1]);
    let (h, nope, rope) = (c.heads, c.nope, c.rope);
    let rot = |z: &Tensor| nn::rope(z, c.rope_theta, rope as usize);

    let q = nn::rms_norm(&x.matmul(w.q_down)?, w.q_norm, c.eps)?
        .matmul(w.q_up)?
        .reshape(&[b, t, h, c.qk_head()])?;
    let q_nope = q.slice_axis(3, 0, nope)?;
    let q_rope = rot(&q.slice_axis(3, nope, nope + rope)?)?;
    let q = concatenate(&[&q_nope, &q_rope], 3)?;

    let latent = x.matmul(w.kv_down)?;
    let k_rope = rot(&latent
        .slice_axis(2, c.kv_lora, c.kv_lora + rope)?
        .reshape(&[b, t, 1, rope])?)?
    .broadcast_in_dim(&[b, t, h, rope], &[0, 1, 2, 3])?;
    let kv = nn::rms_norm(&latent.slice_axis(2, 0, c.kv_lora)?, w.kv_norm, c.eps)?
        .matmul(w.kv_up)?
        .reshape(&[b, t, h, nope + c.v])?;
    let k = concatenate(&[&kv.slice_axis(3, 0, nope)?, &k_rope], 3)?;
    let v = kv.slice_axis(3, nope, nope + c.v)?;

    nn::causal_attention(&q, &k, &v, 1.0 / (c.qk_head() as f64).sqrt())?.matmul(w.out)
}
