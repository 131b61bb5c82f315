//! The Gated DeltaNet token mixer of a Qwen3.5-style hybrid layer (DESIGN.md §5), built
//! around the delta-rule core of [`crate::gdn`].
//!
//! On `h: [B, T, d]` the sub-layer computes `h + W_o · (RMSNorm(o) · SiLU(z))`, where
//!
//! ```text
//! x        = RMSNorm(h)
//! q|k|v    = SiLU(causal_depthwise_conv₄(x W_q | x W_k | x W_v))
//! z        = x W_z,   β = sigmoid(x W_b),   g = ln α = −exp(A_log) · softplus(x W_a + dt_bias)
//! o        = delta_rule(L2(q)/√dk, L2(k), v, g, β)      (Hk key heads, H value heads)
//! ```
//!
//! `g ≤ 0` by construction, so the state decays and never grows; the core's chunked form is
//! written so that strongly negative gates stay finite in value and gradient. The output
//! RMSNorm is per value head (its weight has `dv` entries, shared by the heads), as in
//! Qwen3-Next's gated norm.
//!
//! ```
//! use stackscan::{DType, Scope, TensorType};
//! use stackscan_examples::gdn_layer::{GdnConfig, gdn_params, gdn_sublayer};
//!
//! let c = GdnConfig::tiny();
//! let s = Scope::new("gdn_layer");
//! let h = s.param(TensorType::new(DType::F32, [2, 64, c.d_model]));
//! let w: Vec<_> = gdn_params(&c)
//!     .iter()
//!     .map(|p| s.param(TensorType::new(p.dtype, p.shape.clone())))
//!     .collect();
//! assert_eq!(gdn_sublayer(&c, &h, &w)?.dims(), h.dims());
//! # Ok::<(), stackscan::Error>(())
//! ```

use stackscan::fsdp::{Init, ParamSpec};
use stackscan::{DType, Error, Result, Tensor, concatenate, nn};

use crate::gdn::{gdn_chunked, gdn_recurrent};

/// RMSNorm epsilon of the input and output norms.
const NORM_EPS: f64 = 1e-6;

/// Which form of the delta rule the layer runs. Both compute the same function; the
/// recurrent one is the reference that model-level tests compare the chunked one against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GdnForm {
    /// One scan step per token.
    Recurrent,
    /// The chunked (WY) form with this chunk length, which must divide the sequence.
    Chunked(usize),
}

/// Sizes of one GDN sub-layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GdnConfig {
    /// Model width.
    pub d_model: i64,
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
    /// Layers in the whole model, which scales the output projection's initialisation.
    pub model_layers: usize,
}

impl GdnConfig {
    /// The tiny hybrid config of issue 12: d 128, 4 key / 8 value heads of 32, conv 4,
    /// chunk 16, 8 layers.
    pub const fn tiny() -> Self {
        GdnConfig {
            d_model: 128,
            key_heads: 4,
            value_heads: 8,
            key_dim: 32,
            value_dim: 32,
            conv_kernel: 4,
            form: GdnForm::Chunked(16),
            model_layers: 8,
        }
    }

    /// Qwen3.5-35B-A3B's published GDN sizes (for plans and cost models): d 2048, 16 key /
    /// 32 value heads of 128, conv 4, 40 layers.
    pub const fn qwen35_35b_a3b() -> Self {
        GdnConfig {
            d_model: 2048,
            key_heads: 16,
            value_heads: 32,
            key_dim: 128,
            value_dim: 128,
            conv_kernel: 4,
            form: GdnForm::Chunked(64),
            model_layers: 40,
        }
    }

    /// Channels through the convolution: `q | k | v`.
    pub const fn conv_channels(&self) -> i64 {
        2 * self.key_heads * self.key_dim + self.value_heads * self.value_dim
    }
}

/// Parameters of one GDN sub-layer, in the order [`gdn_sublayer`] reads them.
///
/// `A_log` and `dt_bias` start at zero (decay rate `exp(0)·softplus(·)`, about `ln 2` per
/// step for a zero input), the convolution as a small random filter.
pub fn gdn_params(c: &GdnConfig) -> Vec<ParamSpec> {
    let f32 = DType::F32;
    let d = c.d_model;
    let (qk, vw) = (c.key_heads * c.key_dim, c.value_heads * c.value_dim);
    let out_std = 0.02 / (2.0 * c.model_layers as f64).sqrt();
    vec![
        ParamSpec::replicated("gdn_norm", &[d], f32),
        ParamSpec::sharded("wq", &[d, qk], f32, 0),
        ParamSpec::sharded("wk", &[d, qk], f32, 0),
        ParamSpec::sharded("wv", &[d, vw], f32, 0),
        ParamSpec::sharded("wz", &[d, vw], f32, 0),
        ParamSpec::sharded("wa", &[d, c.value_heads], f32, 0),
        ParamSpec::sharded("wb", &[d, c.value_heads], f32, 0),
        ParamSpec::sharded("conv", &[c.conv_kernel, c.conv_channels()], f32, 1)
            .with_init(Init::Normal(0.5)),
        ParamSpec::replicated("A_log", &[c.value_heads], f32).with_init(Init::Zeros),
        ParamSpec::replicated("dt_bias", &[c.value_heads], f32).with_init(Init::Zeros),
        ParamSpec::replicated("o_norm", &[c.value_dim], f32),
        ParamSpec::sharded("wo", &[vw, d], f32, 0).with_init(Init::Normal(out_std)),
    ]
}

/// A typed error naming the GDN parameter or input at fault.
fn invalid(message: String) -> Error {
    Error::InvalidOp {
        op: "gdn_sublayer",
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

/// Checks `h` and the weights against `c`, naming the first parameter whose shape differs.
fn check(c: &GdnConfig, h: &Tensor, w: &[Tensor]) -> Result<()> {
    crate::weights::check_shapes("gdn_sublayer", &gdn_params(c), w)?;
    match h.dims() {
        [_, _, d] if *d == c.d_model => {}
        _ => {
            return Err(invalid(format!(
                "expected h: [B, T, {}], got {}",
                c.d_model,
                h.ty()
            )));
        }
    }
    if c.key_heads <= 0 || c.value_heads % c.key_heads != 0 {
        return Err(invalid(format!(
            "{} value heads do not split over {} key heads",
            c.value_heads, c.key_heads
        )));
    }
    Ok(())
}

/// The GDN sub-layer with its residual on `h: [B, T, d]`, weights in the order of
/// [`gdn_params`]. Sequences of the batch are independent; the delta rule runs on all of
/// them at once, batched with the heads.
pub fn gdn_sublayer(c: &GdnConfig, h: &Tensor, w: &[Tensor]) -> Result<Tensor> {
    check(c, h, w)?;
    let [
        norm,
        wq,
        wk,
        wv,
        wz,
        wa,
        wb,
        conv,
        a_log,
        dt_bias,
        o_norm,
        wo,
    ] = w
    else {
        return Err(invalid(format!("expected 12 weights, got {}", w.len())));
    };
    let (b, t) = (h.dims()[0], h.dims()[1]);
    let (hk, hv, dk, dv) = (c.key_heads, c.value_heads, c.key_dim, c.value_dim);
    let x = nn::rms_norm(h, norm, NORM_EPS)?;
    let qkv = concatenate(&[&x.matmul(wq)?, &x.matmul(wk)?, &x.matmul(wv)?], 2)?;
    let qkv = nn::silu(&causal_depthwise_conv(&qkv, conv)?)?;
    let q = qkv.slice_axis(2, 0, hk * dk)?.reshape(&[b, t, hk, dk])?;
    let k = qkv
        .slice_axis(2, hk * dk, 2 * hk * dk)?
        .reshape(&[b, t, hk, dk])?;
    let v = qkv
        .slice_axis(2, 2 * hk * dk, c.conv_channels())?
        .reshape(&[b, t, hv, dv])?;
    let z = x.matmul(wz)?.reshape(&[b, t, hv, dv])?;
    let beta = x.matmul(wb)?.sigmoid()?;
    let rate = a_log.exp()?.broadcast_in_dim(&[b, t, hv], &[2])?;
    let bias = dt_bias.broadcast_in_dim(&[b, t, hv], &[2])?;
    let g = nn::softplus(&x.matmul(wa)?.add(&bias)?)?
        .mul(&rate)?
        .neg()?;
    // One call on the whole batch: the core folds sequences into its head batch, so the
    // program does not grow with the sequences per device.
    let o = match c.form {
        GdnForm::Recurrent => gdn_recurrent(&q, &k, &v, &g, &beta)?,
        GdnForm::Chunked(chunk) => gdn_chunked(&q, &k, &v, &g, &beta, chunk)?,
    };
    let gated = nn::rms_norm(&o, o_norm, NORM_EPS)?.mul(&nn::silu(&z)?)?;
    h.add(&gated.reshape(&[b, t, hv * dv])?.matmul(wo)?)
}
