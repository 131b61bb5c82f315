//! Context parallelism: each sequence split into contiguous pieces over a mesh axis
//! ([`CONTEXT_AXIS`]), so that a device holds the activations of `T / cp` positions of every
//! sequence of its batch and a long context need not fit one device.
//!
//! Everything a layer does position by position (projections, norms, MLPs, experts) runs on the
//! piece unchanged. Two things meet positions of other pieces:
//! - RoPE rotates position `t` of the piece as position `start + t` of the sequence
//!   ([`sequence_start`], [`super::rope_from`]);
//! - attention: the piece's queries need the keys and values of every earlier position.
//!
//! Keys and values are exchanged by an all-gather over the context axis ([`gather_sequence`]),
//! then each piece's queries attend to the whole sequence under a causal mask offset by the
//! piece's start ([`causal_attention`]). Its VJP is the dual reduce-scatter, which sums every
//! piece's contribution to a key's gradient. The alternative, a ring that passes key/value
//! blocks from neighbour to neighbour while attending to the block in hand (online softmax),
//! moves the same bytes, `(cp − 1)/cp` of the sequence's keys and values per device and layer,
//! but in `cp − 1` steps that each can hide behind a block of attention; it holds one block
//! instead of the whole sequence's keys. The gather is chosen here because its cost is one
//! collective that XLA schedules like the FSDP gathers (the latency-hiding scheduler overlaps
//! it with the query projection), its memory (`2·T·kv_heads·head_dim` per layer, grouped-query
//! heads gathered before they are repeated) is small beside the activations it splits, and it
//! keeps one attention kernel for every mesh; a ring pays off when the keys of the whole
//! sequence no longer fit, far beyond the contexts a CPU mesh tests.
//!
//! The gathered keys are attended to a block at a time ([`blocked_causal_attention`]), so a
//! piece of `t` queries never holds a `t × cp·t` score matrix: the memory a device spends on
//! attention scores does not grow with the context.
//!
//! ```
//! use stackscan::{Axis, DType, Scope, TensorType, nn};
//! let s = Scope::new("cp");
//! let axis = Axis::new(nn::context::CONTEXT_AXIS, 4);
//! // This device's piece: 8 of the sequence's 32 positions.
//! let q = s.param(TensorType::new(DType::F32, [2, 8, 4, 16]));
//! let k = s.param(TensorType::new(DType::F32, [2, 8, 4, 16]));
//! let v = s.param(TensorType::new(DType::F32, [2, 8, 4, 16]));
//! let out = nn::context::causal_attention(&q, &k, &v, 0.25, &axis)?;
//! assert_eq!(out.dims(), &[2, 8, 64]);
//! assert_eq!(nn::context::gather_sequence(&k, &axis)?.dims(), &[2, 32, 4, 16]);
//! # Ok::<(), stackscan::Error>(())
//! ```

use crate::builder::Tensor;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ir::Axis;
use crate::types::TensorType;

/// The name of the mesh axis the sequence is split over.
pub const CONTEXT_AXIS: &str = "context";

/// The position in the whole sequence of this device's first position: its coordinate on
/// `axis` times the piece's length `t` (an i32 scalar; 0 on a one-device axis).
pub fn sequence_start(like: &Tensor, t: i64, axis: &Axis) -> Result<Tensor> {
    let s = like.scope();
    let index = s.axis_index(axis)?;
    index.mul(&s.from_i64s(&[t], DType::I32, &[])?)
}

/// Every piece of `z: [B, t, ..]` side by side in sequence order, `[B, cp·t, ..]` (the
/// all-gather over `axis` along the sequence dimension).
pub fn gather_sequence(z: &Tensor, axis: &Axis) -> Result<Tensor> {
    if z.rank() < 2 {
        return Err(Error::invalid(
            "gather_sequence",
            format!("needs [B, T, ..], got {}", z.ty()),
        ));
    }
    z.all_gather(1, axis)
}

/// Causal attention of this device's piece of the sequence: queries `q: [B, t, H, Dk]` at
/// positions `start .. start + t`, against the keys `k: [B, t, H, Dk]` and values
/// `v: [B, t, H, Dv]` of every piece, gathered over `axis`; `[B, t, H·Dv]` like
/// [`super::causal_attention`]. With grouped-query attention, gather the key/value heads
/// ([`gather_sequence`]) before repeating them and call [`super::causal_attention_at`].
pub fn causal_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    axis: &Axis,
) -> Result<Tensor> {
    if q.rank() != 4 {
        return Err(Error::invalid(
            "context_attention",
            format!("needs q [B, T, H, Dk], got {}", q.ty()),
        ));
    }
    let start = sequence_start(q, q.dims()[1], axis)?;
    let (k, v) = (gather_sequence(k, axis)?, gather_sequence(v, axis)?);
    blocked_causal_attention(q, &k, &v, scale, &start, q.dims()[1])
}

/// [`super::causal_attention_at`] computed `block` keys at a time: a scan over the key blocks
/// that keeps each query's running maximum, softmax denominator and weighted sum of values
/// (the online softmax of blockwise and flash attention), so that no `[B, H, t, S]` score
/// matrix exists, only one block's `[B, H, t, block]`.
///
/// Why it matters here: a piece of `t` queries against the gathered `S = cp·t` keys would hold
/// `cp` times the scores of a device without context parallelism, in the forward and again in
/// the recompute and VJP of its layer. The scan's VJP saves only each step's carry (the
/// running statistics, `[B, H, t, Dv]` and two `[B, H, t]`) and recomputes the step, so the
/// scores of one block are live at a time. The running maximum is held without gradient: the
/// result does not depend on the shift it subtracts, so the gradient is exact without it.
///
/// Scores, statistics and the sum are f32 for f32 and bf16 inputs (f64 for f64);
/// the result has `q`'s type. Block 0 holds key 0, which every query may see, so every query's
/// maximum is finite after the first step and a fully masked later block adds exactly zero.
pub fn blocked_causal_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    q_start: &Tensor,
    block: i64,
) -> Result<Tensor> {
    let [b, t, h, dv] = super::attention_shapes("blocked_attention", q, k, v, true)?;
    let (keys, dk) = (k.dims()[1], k.dims()[3]);
    if block <= 0 || keys % block != 0 {
        return Err(Error::invalid(
            "blocked_attention",
            format!("blocks of {block} keys do not split {keys} keys"),
        ));
    }
    let s = q.scope();
    let n = keys / block;
    // [n, B, block, H, D]: the scan's rows.
    let blocks = |z: &Tensor, d: i64| z.reshape(&[b, n, block, h, d])?.transpose(&[1, 0, 2, 3, 4]);
    let starts = s
        .iota(TensorType::new(DType::I32, [n]), 0)?
        .mul(&s.full(block as f64, TensorType::new(DType::I32, [n]))?)?;
    // The statistics' type: f32, or f64 for an f64 reference.
    let wide = if q.dtype() == DType::F64 {
        DType::F64
    } else {
        DType::F32
    };
    let stats = TensorType::new(wide, [b, h, t]);
    let init = [
        s.full(-1e30, stats.clone())?,
        s.full(0.0, stats.clone())?,
        s.full(0.0, TensorType::new(wide, [b, h, t, dv]))?,
    ];
    let xs = [blocks(k, dk)?, blocks(v, dv)?, starts];
    let label = [(
        crate::fsdp::LOOP_LABEL,
        "attention, one block of keys a step",
    )];
    let (carry, _) =
        s.scan_with_attributes(&init, &xs, n as usize, false, &label, |_, carry, x| {
            let ([m, l, acc], [kj, vj, first]) = (carry, x) else {
                return Err(Error::invalid(
                    "blocked_attention",
                    "the scan got the wrong inputs",
                ));
            };
            // [B, H, t, block]
            let scores = super::at_least_f32(&super::head_scores(q, kj)?.scale(scale)?)?;
            let ty = TensorType::new(DType::I32, scores.dims());
            let query = super::positions(&scores, ty.clone(), 2, Some(q_start))?;
            let key = super::positions(&scores, ty, 3, Some(first))?;
            let scores = key.le(&query)?.select(&scores, &scores.full_like(-1e30)?)?;
            let spread = |z: &Tensor, last: i64| z.broadcast_in_dim(&[b, h, t, last], &[0, 1, 2]);
            let m_new = m.max(&scores.max_over(&[3])?)?.stop_gradient()?;
            let p = scores.sub(&spread(&m_new, block)?)?.exp()?;
            let rescale = m.sub(&m_new)?.exp()?;
            let l_new = l.mul(&rescale)?.add(&p.sum(&[3])?)?;
            // [B, H, t, Dv]
            let weighted = super::weighted_values(&p.convert(vj.dtype())?, vj)?.convert(wide)?;
            let acc_new = acc.mul(&spread(&rescale, dv)?)?.add(&weighted)?;
            Ok((vec![m_new, l_new, acc_new], vec![]))
        })?;
    let [_, l, acc] = carry.as_slice() else {
        return Err(Error::invalid(
            "blocked_attention",
            "the scan lost its carry",
        ));
    };
    acc.div(&l.broadcast_in_dim(&[b, h, t, dv], &[0, 1, 2])?)?
        .convert(q.dtype())?
        .transpose(&[0, 2, 1, 3])?
        .reshape(&[b, t, h * dv])
}
