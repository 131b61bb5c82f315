//! Composites built from the op table: softmax, norms, activations, RoPE, masks, losses.
//!
//! None of these is a new op: each is a few primitive ops, so autodiff, emission and the
//! shape checks apply unchanged.
//!
//! Those whose accuracy a narrow type ruins (norms, softmaxes, rotary angles, the loss)
//! compute a bf16 input in f32 and return its type (the loss stays f32): the part of mixed
//! precision ([`crate::Precision`]) that lives where the values are made. An f32 input
//! emits no cast.
//!
//! ```
//! use stackscan::{DType, Scope, TensorType, nn};
//! let s = Scope::new("f");
//! let x = s.param(TensorType::new(DType::F32, [2, 5]));
//! let p = nn::softmax(&x, 1)?;
//! assert_eq!(p.dims(), &[2, 5]);
//! # Ok::<(), stackscan::Error>(())
//! ```

use crate::builder::Tensor;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ir::DotDims;
use crate::ops::concatenate;
use crate::types::TensorType;

pub mod cache;
pub mod context;

/// `x` in f32 if it is narrower (bf16), as it is otherwise (f32, f64 references, integers):
/// how a layer computes a part that needs range and precision (a router, a recurrence) in
/// f32 under mixed precision without narrowing an f64 reference.
pub fn at_least_f32(x: &Tensor) -> Result<Tensor> {
    if x.dtype() == DType::BF16 {
        x.convert(DType::F32)
    } else {
        Ok(x.clone())
    }
}

/// `f` of `x` computed in f32 when `x` is narrower (bf16), its result cast back to `x`'s type.
fn in_f32(x: &Tensor, f: impl FnOnce(&Tensor) -> Result<Tensor>) -> Result<Tensor> {
    f(&at_least_f32(x)?)?.convert(x.dtype())
}

/// Keeps all dimensions but `axis`: the mapping back after a reduction over `axis`.
fn kept(rank: usize, axis: usize) -> Vec<usize> {
    (0..rank).filter(|&i| i != axis).collect()
}

/// Reduces over `axis` with `f` and broadcasts back to `x`'s shape.
fn reduce_keep(x: &Tensor, axis: usize, f: impl Fn(&Tensor) -> Result<Tensor>) -> Result<Tensor> {
    x.check_axis("reduce", axis)?;
    f(x)?.broadcast_in_dim(x.dims(), &kept(x.rank(), axis))
}

/// `softmax(x)` along `axis`, shifted by the maximum for stability, in f32 when `x` is
/// narrower ([`Tensor::softmax`]: its VJP needs only the result).
pub fn softmax(x: &Tensor, axis: usize) -> Result<Tensor> {
    x.check_axis("softmax", axis)?;
    in_f32(x, |x| x.softmax(axis))
}

/// `log softmax(x)` along `axis`.
pub fn log_softmax(x: &Tensor, axis: usize) -> Result<Tensor> {
    in_f32(x, |x| log_softmax_same_type(x, axis))
}

fn log_softmax_same_type(x: &Tensor, axis: usize) -> Result<Tensor> {
    let m = reduce_keep(x, axis, |x| x.max_over(&[axis])?.stop_gradient())?;
    let shifted = x.sub(&m)?;
    let lse = reduce_keep(&shifted, axis, |s| s.exp()?.sum(&[axis])?.log())?;
    shifted.sub(&lse)
}

/// RMSNorm over the last dimension: `x / √(mean(x²) + eps) · weight`, `weight` of shape
/// `[last]`.
pub fn rms_norm(x: &Tensor, weight: &Tensor, eps: f64) -> Result<Tensor> {
    in_f32(x, |x| {
        rms_norm_same_type(x, &weight.convert(x.dtype())?, eps)
    })
}

fn rms_norm_same_type(x: &Tensor, weight: &Tensor, eps: f64) -> Result<Tensor> {
    let last = x
        .rank()
        .checked_sub(1)
        .ok_or_else(|| Error::invalid("rms_norm", "needs rank ≥ 1"))?;
    let ms = reduce_keep(&x.square()?, last, |s| s.mean(&[last]))?;
    let normed = x.mul(&ms.add_scalar(eps)?.rsqrt()?)?;
    normed.mul(&weight.broadcast_to(x.dims())?)
}

/// `x / √(Σ x² + eps)` along `axis`.
pub fn l2_normalize(x: &Tensor, axis: usize, eps: f64) -> Result<Tensor> {
    in_f32(x, |x| {
        let ss = reduce_keep(&x.square()?, axis, |s| s.sum(&[axis]))?;
        x.mul(&ss.add_scalar(eps)?.rsqrt()?)
    })
}

/// `x · sigmoid(x)`
pub fn silu(x: &Tensor) -> Result<Tensor> {
    x.mul(&x.sigmoid()?)
}

/// `ln(1 + eˣ)`, computed as `max(x, 0) + ln(1 + e^-|x|)` so it never overflows.
pub fn softplus(x: &Tensor) -> Result<Tensor> {
    let pos = x.max(&x.zeros_like()?)?;
    pos.add(&x.abs()?.neg()?.exp()?.log1p()?)
}

/// Rotary position embedding on `x: [.., T, H, D]` (sequence at `rank - 3`), rotating the
/// first `rotary_dim` features of each head by position-dependent angles with base `theta`
/// (rotate-half convention); the remaining features pass through (partial RoPE).
pub fn rope(x: &Tensor, theta: f64, rotary_dim: usize) -> Result<Tensor> {
    rope_with_frequencies(x, &rope_frequencies(theta, rotary_dim)?, 1.0)
}

/// [`rope`] with the angle of feature pair `i` at position `t` being `t · inv_freq[i]`, and
/// cosines and sines scaled by `magnitude`: what a context-extension scheme such as YaRN
/// changes. `rotary_dim` is `2 · inv_freq.len()`; a `magnitude` of 1 emits no scaling.
/// A bf16 `x` is rotated in f32: bf16 holds integers exactly only up to 256, so its angles
/// `t · inv_freq` would be wrong from the 257th position on.
pub fn rope_with_frequencies(x: &Tensor, inv_freq: &[f64], magnitude: f64) -> Result<Tensor> {
    in_f32(x, |x| {
        rope_same_type(x, inv_freq, magnitude, Angles::From(None))
    })
}

/// [`rope`] of a piece of the sequence that starts at position `start` (an integer scalar,
/// which may differ between devices: a context-parallel shard's
/// [`sequence_start`](context::sequence_start)), so that position `t` of `x` is rotated as
/// position `start + t` of the whole sequence.
pub fn rope_from(x: &Tensor, theta: f64, rotary_dim: usize, start: &Tensor) -> Result<Tensor> {
    rope_with_frequencies_from(x, &rope_frequencies(theta, rotary_dim)?, 1.0, start)
}

/// [`rope_with_frequencies`] of a piece of the sequence that starts at position `start`
/// ([`rope_from`]).
pub fn rope_with_frequencies_from(
    x: &Tensor,
    inv_freq: &[f64],
    magnitude: f64,
    start: &Tensor,
) -> Result<Tensor> {
    in_f32(x, |x| {
        rope_same_type(x, inv_freq, magnitude, Angles::From(Some(start)))
    })
}

/// [`rope_with_frequencies`] of `x: [B, T, H, D]` whose row `b`, position `t` sits at
/// `positions[b, t]` (integers, `[B, T]`): new positions decoded after a prompt, each
/// sequence at its own length ([`cache`]).
pub fn rope_with_frequencies_at(
    x: &Tensor,
    inv_freq: &[f64],
    magnitude: f64,
    positions: &Tensor,
) -> Result<Tensor> {
    in_f32(x, |x| {
        rope_same_type(x, inv_freq, magnitude, Angles::At(positions))
    })
}

/// [`rope`] of `x: [B, T, H, D]` at `positions: [B, T]` ([`rope_with_frequencies_at`]).
pub fn rope_at(x: &Tensor, theta: f64, rotary_dim: usize, positions: &Tensor) -> Result<Tensor> {
    rope_with_frequencies_at(x, &rope_frequencies(theta, rotary_dim)?, 1.0, positions)
}

/// Where RoPE's positions come from.
#[derive(Clone, Copy)]
enum Angles<'a> {
    /// `0..T`, plus an integer scalar start where given.
    From(Option<&'a Tensor>),
    /// Each row's own positions, `[B, T]`.
    At(&'a Tensor),
}

/// RoPE's inverse frequencies `theta^(-2i / rotary_dim)`, `i < rotary_dim / 2`.
fn rope_frequencies(theta: f64, rotary_dim: usize) -> Result<Vec<f64>> {
    if rotary_dim == 0 || !rotary_dim.is_multiple_of(2) {
        return Err(Error::invalid(
            "rope",
            format!("rotary_dim {rotary_dim} must be even and above 0"),
        ));
    }
    Ok((0..rotary_dim / 2)
        .map(|i| theta.powf(-2.0 * i as f64 / rotary_dim as f64))
        .collect())
}

/// `iota` along `dim` of `ty` plus `start` (an integer scalar) where given: positions of a
/// piece of a sequence that starts at `start`.
pub(crate) fn positions(
    x: &Tensor,
    ty: TensorType,
    dim: usize,
    start: Option<&Tensor>,
) -> Result<Tensor> {
    let at = x.scope().iota(ty.clone(), dim)?;
    let Some(start) = start else {
        return Ok(at);
    };
    if start.rank() != 0 || start.dtype().is_float() {
        return Err(Error::invalid(
            "positions",
            format!(
                "a sequence's start must be an integer scalar, got {}",
                start.ty()
            ),
        ));
    }
    at.add(&start.convert(ty.dtype)?.broadcast_in_dim(&ty.dims, &[])?)
}

fn rope_same_type(x: &Tensor, inv_freq: &[f64], magnitude: f64, at: Angles<'_>) -> Result<Tensor> {
    let r = x.rank();
    if r < 3 {
        return Err(Error::invalid(
            "rope",
            format!("needs [.., T, H, D], got {}", x.ty()),
        ));
    }
    let (t, d) = (x.dims()[r - 3], x.dims()[r - 1]);
    let rotary_dim = 2 * inv_freq.len();
    if rotary_dim == 0 || rotary_dim as i64 > d {
        return Err(Error::invalid(
            "rope",
            format!("rotary_dim {rotary_dim} must be even, above 0 and at most {d}"),
        ));
    }
    if let Some(bad) = inv_freq.iter().find(|f| !f.is_finite()) {
        return Err(Error::invalid(
            "rope",
            format!("frequency {bad} is not finite"),
        ));
    }
    if !magnitude.is_finite() {
        return Err(Error::invalid(
            "rope",
            format!("magnitude {magnitude} is not finite"),
        ));
    }
    let half = rotary_dim as i64 / 2;
    let s = x.scope();
    let dtype = x.dtype();
    let (angle, mapping) = match at {
        // angle[t, i] = (start + t) · inv_freq[i]
        Angles::From(start) => {
            let pos = positions(x, TensorType::new(dtype, [t, half]), 0, start)?;
            let inv = s
                .from_f64s(inv_freq, dtype, &[half])?
                .broadcast_in_dim(&[t, half], &[1])?;
            (pos.mul(&inv)?, vec![r - 3, r - 1])
        }
        // angle[b, t, i] = positions[b, t] · inv_freq[i]
        Angles::At(pos) => {
            let b = x.dims()[0];
            if r != 4 || pos.dims() != [b, t] || pos.dtype().is_float() {
                return Err(Error::invalid(
                    "rope",
                    format!(
                        "positions per row need x [B, T, H, D] and integer positions [B, T], \
                         got {} and {}",
                        x.ty(),
                        pos.ty()
                    ),
                ));
            }
            let grid = [b, t, half];
            let pos = pos.convert(dtype)?.broadcast_in_dim(&grid, &[0, 1])?;
            let inv = s
                .from_f64s(inv_freq, dtype, &[half])?
                .broadcast_in_dim(&grid, &[2])?;
            (pos.mul(&inv)?, vec![0, 1, 3])
        }
    };
    let mut dims = x.dims().to_vec();
    dims[r - 1] = half;
    let spread = |a: Tensor| -> Result<Tensor> {
        let a = if magnitude == 1.0 {
            a
        } else {
            a.mul(&s.full(magnitude, a.ty().clone())?)?
        };
        a.broadcast_in_dim(&dims, &mapping)
    };
    let (cos, sin) = (spread(angle.cos()?)?, spread(angle.sin()?)?);
    let x1 = x.slice_axis(r - 1, 0, half)?;
    let x2 = x.slice_axis(r - 1, half, 2 * half)?;
    let y1 = x1.mul(&cos)?.sub(&x2.mul(&sin)?)?;
    let y2 = x2.mul(&cos)?.add(&x1.mul(&sin)?)?;
    if rotary_dim as i64 == d {
        concatenate(&[&y1, &y2], r - 1)
    } else {
        let rest = x.slice_axis(r - 1, rotary_dim as i64, d)?;
        concatenate(&[&y1, &y2, &rest], r - 1)
    }
}

/// Which keys each query of a sequence attends to, by position: query `i`, key `j`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mask {
    /// `j ≤ i`: itself and every earlier position.
    #[default]
    Causal,
    /// `i − window < j ≤ i`: itself and the `window − 1` positions before it (Mistral's local
    /// attention). A window as long as the sequence is [`Mask::Causal`].
    SlidingWindow(i64),
    /// `j ≤ i` within `i`'s block of `len` positions (`j / len = i / len`): causal attention
    /// inside fixed-length blocks, as for documents packed into a sequence at a fixed stride.
    Block(i64),
}

impl Mask {
    /// Checks the mask's own length: a window or block of at least one position.
    pub fn validate(self) -> Result<()> {
        match self {
            Mask::Causal => Ok(()),
            Mask::SlidingWindow(n) | Mask::Block(n) if n >= 1 => Ok(()),
            Mask::SlidingWindow(n) => Err(Error::invalid(
                "mask",
                format!("a sliding window of {n} positions; expected 1 or more"),
            )),
            Mask::Block(n) => Err(Error::invalid(
                "mask",
                format!("blocks of {n} positions; expected 1 or more"),
            )),
        }
    }
}

/// Keeps `scores[.., q, k]` where `k ≤ q` and replaces the rest by a large negative value, so
/// a following softmax gives them zero weight.
pub fn causal_mask(scores: &Tensor) -> Result<Tensor> {
    mask_scores(scores, None, Mask::Causal)
}

/// [`causal_mask`] for queries that start at position `q_start` (an integer scalar) of a
/// sequence whose keys all are present: `scores[.., q, k]` is kept where `k ≤ q_start + q`.
pub fn causal_mask_at(scores: &Tensor, q_start: &Tensor) -> Result<Tensor> {
    mask_scores(scores, Some(q_start), Mask::Causal)
}

/// Keeps `scores[.., q, k]` where `mask` lets query `q` see key `k`, the rest a large negative
/// value, so a following softmax gives them zero weight.
pub fn apply_mask(scores: &Tensor, mask: Mask) -> Result<Tensor> {
    mask_scores(scores, None, mask)
}

fn mask_scores(scores: &Tensor, q_start: Option<&Tensor>, mask: Mask) -> Result<Tensor> {
    mask.validate()?;
    let r = scores.rank();
    if r < 2 {
        return Err(Error::invalid(
            "mask",
            format!("needs scores [.., Q, K], got {}", scores.ty()),
        ));
    }
    // The mask is built as one `[Q, K]` predicate and broadcast into a single select: it
    // depends on nothing in a layer, so XLA hoists it out of the layer loops and keeps it for
    // the whole step at the size it is built, not the scores'.
    let s = scores.scope();
    let dims = scores.dims();
    let ty = TensorType::new(DType::I32, &dims[r - 2..]);
    let q = positions(scores, ty.clone(), 0, q_start)?;
    let k = s.iota(ty, 1)?;
    let past = k.le(&q)?;
    let keep = match mask {
        Mask::Causal => past,
        Mask::SlidingWindow(window) => {
            let within = q.sub(&k)?.lt(&k.full_like(window as f64)?)?;
            // `past ∧ within`: where `past` is false the select keeps it.
            past.select(&within, &past)?
        }
        Mask::Block(len) => {
            let len = k.full_like(len as f64)?;
            let same = q.div(&len)?.eq(&k.div(&len)?)?;
            past.select(&same, &past)?
        }
    };
    keep.broadcast_in_dim(dims, &[r - 2, r - 1])?
        .select(scores, &scores.full_like(-1e30)?)
}

/// Grouped-query attention's key/value sharing: `z: [B, T, KV, D]` repeated to
/// `[B, T, heads, D]`, head `j` of `z` serving query heads `j·g .. (j+1)·g` with
/// `g = heads / KV`.
pub fn repeat_kv(z: &Tensor, heads: i64) -> Result<Tensor> {
    let &[b, t, kv, d] = z.dims() else {
        return Err(Error::invalid(
            "repeat_kv",
            format!("needs [B, T, KV, D], got {}", z.ty()),
        ));
    };
    if kv <= 0 || heads % kv != 0 {
        return Err(Error::invalid(
            "repeat_kv",
            format!("{heads} query heads do not split over {kv} key/value heads"),
        ));
    }
    z.broadcast_in_dim(&[b, t, kv, heads / kv, d], &[0, 1, 2, 4])?
        .reshape(&[b, t, heads, d])
}

/// Causal softmax attention: `q: [B, T, H, Dk]` against `k: [B, T, H, Dk]` and
/// `v: [B, T, H, Dv]`, scores scaled by `scale`, query `i` attending to keys `j ≤ i`; the
/// heads' outputs side by side, `[B, T, H·Dv]`, ready for the output projection.
pub fn causal_attention(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64) -> Result<Tensor> {
    attention(q, k, v, scale, None, Mask::Causal)
}

/// [`causal_attention`] with query `i` attending to the keys `mask` lets it see
/// ([`Mask::SlidingWindow`], [`Mask::Block`]; [`Mask::Causal`] is [`causal_attention`]).
pub fn masked_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    mask: Mask,
) -> Result<Tensor> {
    attention(q, k, v, scale, None, mask)
}

/// [`causal_attention`] of queries `q: [B, T, H, Dk]` that start at position `q_start` (an
/// integer scalar) of a sequence of `S` keys `k: [B, S, H, Dk]` and values `v: [B, S, H, Dv]`:
/// query `i` attends to keys `j ≤ q_start + i`. What a shard of the sequence computes once it
/// has every shard's keys and values (context parallelism, [`context`]).
pub fn causal_attention_at(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    q_start: &Tensor,
) -> Result<Tensor> {
    attention(q, k, v, scale, Some(q_start), Mask::Causal)
}

fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    q_start: Option<&Tensor>,
    mask: Mask,
) -> Result<Tensor> {
    let [b, t, h, dv] = attention_shapes("causal_attention", q, k, v, q_start.is_some())?;
    let scores = head_scores(q, k)?.scale(scale)?; // [B, H, T, S]
    let probs = softmax(&mask_scores(&scores, q_start, mask)?, 3)?;
    weighted_values(&probs, v)? // [B, H, T, Dv]
        .transpose(&[0, 2, 1, 3])?
        .reshape(&[b, t, h * dv])
}

/// Checks `q: [B, T, H, Dk]` against `k: [B, S, H, Dk]` and `v: [B, S, H, Dv]` (`S = T`
/// unless `more_keys`); returns `[B, T, H, Dv]`. `op` names the caller in the error.
pub(crate) fn attention_shapes(
    op: &'static str,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    more_keys: bool,
) -> Result<[i64; 4]> {
    let (&[b, t, h, dk], &[_, keys, _, dv]) = (q.dims(), v.dims()) else {
        return Err(Error::invalid(
            op,
            format!("needs rank-4 q and v, got {} and {}", q.ty(), v.ty()),
        ));
    };
    let keys = if more_keys { keys } else { t };
    if k.dims() != [b, keys, h, dk] || v.dims()[..3] != [b, keys, h] {
        return Err(Error::invalid(
            op,
            format!(
                "expected k [{b}, {keys}, {h}, {dk}] and v [{b}, {keys}, {h}, Dv], got {} and {}",
                k.ty(),
                v.ty()
            ),
        ));
    }
    Ok([b, t, h, dv])
}

/// Every head's scores `q · kᵀ`: `q: [B, T, H, D]`, `k: [B, S, H, D]` → `[B, H, T, S]`.
pub(crate) fn head_scores(q: &Tensor, k: &Tensor) -> Result<Tensor> {
    q.dot_general(
        k,
        DotDims {
            lhs_batch: vec![0, 2],
            rhs_batch: vec![0, 2],
            lhs_contract: vec![3],
            rhs_contract: vec![3],
        },
    )
}

/// Every head's weighted values `p · v`: `p: [B, H, T, S]`, `v: [B, S, H, Dv]` →
/// `[B, H, T, Dv]`.
pub(crate) fn weighted_values(p: &Tensor, v: &Tensor) -> Result<Tensor> {
    p.dot_general(
        v,
        DotDims {
            lhs_batch: vec![0, 1],
            rhs_batch: vec![0, 2],
            lhs_contract: vec![3],
            rhs_contract: vec![1],
        },
    )
}

/// Mean cross-entropy of `logits: [N, V]` against integer `labels: [N]`; bf16 logits are
/// computed and averaged in f32, and the loss is f32.
pub fn cross_entropy(logits: &Tensor, labels: &Tensor) -> Result<Tensor> {
    if logits.rank() != 2 || labels.dims() != [logits.dims()[0]] {
        return Err(Error::invalid(
            "cross_entropy",
            format!(
                "expected logits [N, V] and labels [N], got {} and {}",
                logits.ty(),
                labels.ty()
            ),
        ));
    }
    let v = logits.dims()[1] as usize;
    let logits = &at_least_f32(logits)?;
    let logp = log_softmax(logits, 1)?;
    let hot = labels.one_hot(v, logits.dtype())?;
    logp.mul(&hot)?.sum(&[1])?.mean(&[0])?.neg()
}
