//! The Gated DeltaNet token mixer of a Qwen3.5-style hybrid layer (DESIGN.md §5), built
//! around the delta-rule core of [`crate::gdn`], as a module: [`GatedDeltaNet`], whose
//! shapes read [`GdnDims`].
//!
//! On the normalised stream `x = RMSNorm(h): [B, T, d]` the mixer computes
//! `W_o · (RMSNorm(o) · SiLU(z))`, where
//!
//! ```text
//! q|k|v    = SiLU(causal_depthwise_conv₄(x W_q | x W_k | x W_v))
//! z        = x W_z,   β = sigmoid(x W_b),   g = ln α = −exp(A_log) · softplus(x W_a + dt_bias)
//! o        = delta_rule(L2(q)/√dk, L2(k), v, g, β)      (Hk key heads, H value heads)
//! ```
//!
//! `g ≤ 0` by construction, so the state decays and never grows; the core's chunked form is
//! written so that strongly negative gates stay finite in value and gradient. The output
//! RMSNorm is per value head (its weight has `dv` entries, shared by the heads), as in
//! Qwen3-Next's gated norm. The pre-norm and the residual belong to the sub-layer holding
//! the mixer ([`qwen35::Gdn`](crate::qwen35::Gdn)).
//!
//! ```
//! use stackscan::layer::Params;
//! use stackscan::{DType, Module, Scope, Tensor, TensorType};
//! use stackscan_models::gdn_layer::{GatedDeltaNet, GdnConfig, GdnDims};
//!
//! let c = GdnDims::new(128, 8, GdnConfig::tiny());
//! let s = Scope::new("gdn_layer");
//! let x = s.param(TensorType::new(DType::F32, [2, 64, c.d_model]));
//! let specs = GatedDeltaNet::<Tensor>::param_specs(&c);
//! assert_eq!(specs[0].name, "wq");
//! let w = specs.iter().map(|p| s.param(p.full_type())).collect();
//! let gdn = GatedDeltaNet::from_values(w)?;
//! assert_eq!(gdn.forward(&c, &x)?.dims(), x.dims());
//! # Ok::<(), stackscan::Error>(())
//! ```

use serde::{Deserialize, Serialize};
use stackscan::layer::Params;
use stackscan::{Error, Module, Result, Tensor, concatenate, nn};

use crate::gdn::{gdn_chunked, gdn_recurrent};

mod decode;

/// RMSNorm epsilon of the output norm.
const NORM_EPS: f64 = 1e-6;

/// Which form of the delta rule the layer runs. Both compute the same function; the
/// recurrent one is the reference that model-level tests compare the chunked one against.
/// In a config file: `form = "recurrent"` or `form = { chunked = 16 }`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GdnForm {
    /// One scan step per token.
    Recurrent,
    /// The chunked (WY) form with this chunk length, which must divide the sequence.
    Chunked(usize),
}

/// The GDN mixer's own sizes, the `[gdn]` table of a model's config file: heads, head
/// widths, the convolution and the delta rule's form. The model width and the output
/// projection's initialisation are the model's ([`GdnDims`] adds them), so a config states
/// each once. A file's missing fields are its base preset's ([`crate::configs`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GdnConfig {
    /// Key (and query) heads; must divide `value_heads`.
    pub key_heads: i64,
    /// Value heads (one delta-rule state each).
    pub value_heads: i64,
    /// Width of a key head.
    pub key_dim: i64,
    /// Width of a value head.
    pub value_dim: i64,
    /// Taps of the depthwise causal convolution on `q|k|v`.
    pub conv_kernel: i64,
    /// The delta-rule form.
    pub form: GdnForm,
}

impl Default for GdnConfig {
    fn default() -> Self {
        GdnConfig::tiny()
    }
}

impl GdnConfig {
    /// The tiny hybrid config of issue 12: 4 key / 8 value heads of 32, conv 4, chunk 16.
    /// The `[gdn]` table of the tiny Qwen3.5 preset.
    pub fn tiny() -> Self {
        crate::qwen35::Qwen35Config::tiny().gdn
    }

    /// Qwen3.5-35B-A3B's published GDN sizes (for plans and cost models): 16 key / 32 value
    /// heads of 128, conv 4.
    /// The `[gdn]` table of the published Qwen3.5 preset.
    pub fn qwen35_35b_a3b() -> Self {
        crate::qwen35::Qwen35Config::qwen35_35b_a3b().gdn
    }

    /// Width of all query (or key) heads together.
    pub const fn qk_width(&self) -> i64 {
        self.key_heads * self.key_dim
    }

    /// Width of all value heads together.
    pub const fn v_width(&self) -> i64 {
        self.value_heads * self.value_dim
    }

    /// Channels through the convolution: `q | k | v`.
    pub const fn conv_channels(&self) -> i64 {
        2 * self.qk_width() + self.v_width()
    }
}

/// What [`GatedDeltaNet`] reads: its own sizes at a model width, and the standard
/// deviation of its output projection's initialiser (a model's residual scaling).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GdnDims {
    /// Model width.
    pub d_model: i64,
    /// The mixer's own sizes.
    pub gdn: GdnConfig,
    /// Standard deviation of `wo`'s initialiser.
    pub out_std: f64,
}

impl GdnDims {
    /// `gdn` at width `d_model` in a model of `layers` layers, whose output projections
    /// start at `0.02 / √(2·layers)` (GPT-2's residual scaling).
    pub fn new(d_model: i64, layers: usize, gdn: GdnConfig) -> Self {
        GdnDims {
            d_model,
            gdn,
            out_std: 0.02 / (2.0 * layers as f64).sqrt(),
        }
    }
}

/// The Gated DeltaNet token mixer of the normalised stream `x: [B, T, d]` (the module
/// docs give the formulas); a sub-layer adds its pre-norm and residual around it.
///
/// `a_log` and `dt_bias` start at zero (decay rate `exp(0)·softplus(·)`, about `ln 2` per
/// step for a zero input), the convolution as a small random filter.
#[derive(Debug, Module)]
#[module(config = GdnDims)]
pub struct GatedDeltaNet<T> {
    /// Query projection, `[d, key_heads·key_dim]`.
    #[param(shape = [cfg.d_model, cfg.gdn.qk_width()], shard = 0)]
    pub wq: T,
    /// Key projection, `[d, key_heads·key_dim]`.
    #[param(shape = [cfg.d_model, cfg.gdn.qk_width()], shard = 0)]
    pub wk: T,
    /// Value projection, `[d, value_heads·value_dim]`.
    #[param(shape = [cfg.d_model, cfg.gdn.v_width()], shard = 0)]
    pub wv: T,
    /// Output-gate projection (`z`), `[d, value_heads·value_dim]`.
    #[param(shape = [cfg.d_model, cfg.gdn.v_width()], shard = 0)]
    pub wz: T,
    /// Decay-input projection (`a`), `[d, value_heads]`.
    #[param(shape = [cfg.d_model, cfg.gdn.value_heads], shard = 0)]
    pub wa: T,
    /// Write-strength projection (`b`, `β = sigmoid(b)`), `[d, value_heads]`.
    #[param(shape = [cfg.d_model, cfg.gdn.value_heads], shard = 0)]
    pub wb: T,
    /// Depthwise causal convolution on `q|k|v`, `[kernel, channels]`.
    #[param(shape = [cfg.gdn.conv_kernel, cfg.gdn.conv_channels()], shard = 1, init = normal(0.5))]
    pub conv: T,
    /// Log decay rate per value head (`A_log`).
    #[param(shape = [cfg.gdn.value_heads], replicated, init = zeros)]
    pub a_log: T,
    /// Decay time-step bias per value head.
    #[param(shape = [cfg.gdn.value_heads], replicated, init = zeros)]
    pub dt_bias: T,
    /// Output RMSNorm scale (per value head, shared by the heads), `[value_dim]`.
    #[param(shape = [cfg.gdn.value_dim], replicated)]
    pub o_norm: T,
    /// Output projection, `[value_heads·value_dim, d]`.
    #[param(shape = [cfg.gdn.v_width(), cfg.d_model], shard = 0, init = normal(cfg.out_std))]
    pub wo: T,
}

/// A typed error naming the GDN parameter or input at fault.
fn invalid(message: String) -> Error {
    Error::InvalidOp {
        op: "gated_delta_net",
        message,
    }
}

/// The depthwise causal convolution along `T` of `x: [B, T, C]` with `w: [K, C]`:
/// `y[t, c] = Σ_j w[j, c] · x[t − K + 1 + j, c]`, zeros before the sequence starts, so a
/// token never reads a later one.
fn causal_depthwise_conv(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let (b, t, ch) = (x.dims()[0], x.dims()[1], x.dims()[2]);
    let k = w.dims()[0];
    let zero = x.scope().scalar(0.0, x.dtype())?;
    let padded = x.pad(&zero, &[0, k - 1, 0], &[0, 0, 0], &[0, 0, 0])?;
    let mut acc: Option<Tensor> = None;
    for j in 0..k {
        let tap = w
            .slice_axis(0, j, j + 1)?
            .reshape(&[ch])?
            .broadcast_in_dim(&[b, t, ch], &[2])?;
        let term = padded.slice_axis(1, j, j + t)?.mul(&tap)?;
        acc = Some(match acc {
            Some(a) => a.add(&term)?,
            None => term,
        });
    }
    acc.ok_or_else(|| invalid("the convolution needs at least one tap".into()))
}

impl GatedDeltaNet<Tensor> {
    /// The mixer of the normalised stream `x: [B, T, d]`, projected back to `[B, T, d]`.
    /// Sequences of the batch are independent; the delta rule runs on all of them at once,
    /// batched with the heads.
    pub fn forward(&self, c: &GdnDims, x: &Tensor) -> Result<Tensor> {
        self.check(c, x)?;
        let g = &c.gdn;
        let qkv = concatenate(
            &[
                &x.matmul(&self.wq)?,
                &x.matmul(&self.wk)?,
                &x.matmul(&self.wv)?,
            ],
            2,
        )?;
        let qkv = nn::silu(&causal_depthwise_conv(&qkv, &self.conv)?)?;
        self.mix(c, x, &qkv, |q, k, v, gate, beta| match g.form {
            GdnForm::Recurrent => gdn_recurrent(q, k, v, gate, beta),
            GdnForm::Chunked(chunk) => gdn_chunked(q, k, v, gate, beta, chunk),
        })
    }

    /// The mixer after its convolution: `qkv: [B, T, q|k|v]` (convolved and activated) split
    /// into heads, the gates from `x`, the delta rule by `core(q, k, v, g, β)`, then the
    /// output norm, gate and projection.
    fn mix(
        &self,
        c: &GdnDims,
        x: &Tensor,
        qkv: &Tensor,
        core: impl FnOnce(&Tensor, &Tensor, &Tensor, &Tensor, &Tensor) -> Result<Tensor>,
    ) -> Result<Tensor> {
        let g = &c.gdn;
        let (b, t) = (x.dims()[0], x.dims()[1]);
        let (hk, hv, dk, dv) = (g.key_heads, g.value_heads, g.key_dim, g.value_dim);
        let q = qkv.slice_axis(2, 0, hk * dk)?.reshape(&[b, t, hk, dk])?;
        let k = qkv
            .slice_axis(2, hk * dk, 2 * hk * dk)?
            .reshape(&[b, t, hk, dk])?;
        let v = qkv
            .slice_axis(2, 2 * hk * dk, g.conv_channels())?
            .reshape(&[b, t, hv, dv])?;
        let z = x.matmul(&self.wz)?.reshape(&[b, t, hv, dv])?;
        // The decay and the recurrence run in f32 under mixed precision, as the reference
        // implementation's: the state sums over the whole sequence and the gates' cumulative
        // sums are exponentiated. An f32 (or f64) layer casts nothing.
        let wide = nn::at_least_f32;
        let beta = wide(&x.matmul(&self.wb)?)?.sigmoid()?;
        let rate = wide(&self.a_log)?
            .exp()?
            .broadcast_in_dim(&[b, t, hv], &[2])?;
        let bias = wide(&self.dt_bias)?.broadcast_in_dim(&[b, t, hv], &[2])?;
        let gate = nn::softplus(&wide(&x.matmul(&self.wa)?)?.add(&bias)?)?
            .mul(&rate)?
            .neg()?;
        let (q, k, v) = (wide(&q)?, wide(&k)?, wide(&v)?);
        // One call on the whole batch: the core folds sequences into its head batch, so the
        // program does not grow with the sequences per device.
        let o = core(&q, &k, &v, &gate, &beta)?;
        let o = nn::rms_norm(&o, &self.o_norm, NORM_EPS)?.convert(x.dtype())?;
        let gated = o.mul(&nn::silu(&z)?)?;
        gated.reshape(&[b, t, hv * dv])?.matmul(&self.wo)
    }

    /// Checks `x`, the weights and the head split against `c`, naming the first parameter
    /// whose shape differs.
    fn check(&self, c: &GdnDims, x: &Tensor) -> Result<()> {
        let weights: Vec<Tensor> = self.values().into_iter().cloned().collect();
        crate::weights::check_shapes("gated_delta_net", &Self::param_specs(c), &weights)?;
        if !matches!(x.dims(), [_, _, d] if *d == c.d_model) {
            return Err(invalid(format!(
                "expected x: [B, T, {}], got {}",
                c.d_model,
                x.ty()
            )));
        }
        let g = &c.gdn;
        if g.key_heads <= 0 || g.value_heads % g.key_heads != 0 {
            return Err(invalid(format!(
                "{} value heads do not split over {} key heads",
                g.value_heads, g.key_heads
            )));
        }
        Ok(())
    }
}
