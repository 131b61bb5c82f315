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
    super::causal_attention_at(q, &k, &v, scale, &start)
}
