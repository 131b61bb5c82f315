//! Attention against a key/value cache: what generation runs once a prompt's keys and values
//! are kept, so each new token attends to them without recomputing them.
//!
//! A cache is `[B, C, heads, D]`: row `b`'s key (or value) of position `p` at `[b, p]`, for up
//! to `C` positions. New positions are given per row (`positions: [B, T]`, integers), so the
//! rows of a batch of prompts may stand at different lengths; a negative position is padding,
//! written nowhere and attending to nothing that matters (its output is to be ignored).
//!
//! ```
//! use stackscan::{DType, Scope, TensorType, nn};
//! let s = Scope::new("decode");
//! let cache = s.param(TensorType::new(DType::F32, [2, 16, 1, 4]));
//! let k = s.param(TensorType::new(DType::F32, [2, 1, 1, 4]));
//! let at = s.param(TensorType::new(DType::I32, [2, 1]));
//! let cache = nn::cache::write(&cache, &k, &at)?;
//! let q = s.param(TensorType::new(DType::F32, [2, 1, 2, 4]));
//! let out = nn::cache::attend(&q, &cache, &cache, 0.5, &at, nn::Mask::Causal)?;
//! assert_eq!(out.dims(), &[2, 1, 8]);
//! # Ok::<(), stackscan::Error>(())
//! ```

use crate::builder::Tensor;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ir::DotDims;
use crate::types::TensorType;

use super::{Mask, head_scores, repeat_kv, softmax, weighted_values};

/// Checks `positions` against a new piece `[B, T, ..]` and returns `(B, T)`.
fn rows_and_positions(op: &'static str, new: &Tensor, positions: &Tensor) -> Result<(i64, i64)> {
    let (b, t) = match new.dims() {
        [b, t, ..] => (*b, *t),
        _ => {
            return Err(Error::invalid(
                op,
                format!("needs new values [B, T, ..], got {}", new.ty()),
            ));
        }
    };
    if positions.dims() != [b, t] || positions.dtype().is_float() {
        return Err(Error::invalid(
            op,
            format!(
                "needs integer positions [{b}, {t}] for {}, got {}",
                new.ty(),
                positions.ty()
            ),
        ));
    }
    Ok((b, t))
}

/// `[B, T, C]`: whether position `t` of row `b` is `c` (a one-hot of each position over the
/// cache's `C` slots; a negative or too large position matches none).
fn slots(positions: &Tensor, capacity: i64) -> Result<Tensor> {
    let &[b, t] = positions.dims() else {
        return Err(Error::invalid(
            "cache",
            format!("positions must be [B, T], got {}", positions.ty()),
        ));
    };
    let grid = TensorType::new(DType::I32, [b, t, capacity]);
    let slot = positions.scope().iota(grid.clone(), 2)?;
    let at = positions
        .convert(DType::I32)?
        .broadcast_in_dim(&grid.dims, &[0, 1])?;
    slot.eq(&at)
}

/// `cache: [B, C, ..]` with `new: [B, T, ..]` written at each row's `positions: [B, T]`
/// (distinct within a row); every other slot kept. Written as a one-hot product rather than a
/// scatter: rows at different positions need no loop, and the program stays one shape for
/// every length.
pub fn write(cache: &Tensor, new: &Tensor, positions: &Tensor) -> Result<Tensor> {
    let (b, t) = rows_and_positions("cache::write", new, positions)?;
    let capacity = match cache.dims() {
        [cb, c, rest @ ..] if *cb == b && rest == &new.dims()[2..] => *c,
        _ => {
            return Err(Error::invalid(
                "cache::write",
                format!(
                    "a cache [{b}, C, ..] of the new values' trailing dims, got {} for {}",
                    cache.ty(),
                    new.ty()
                ),
            ));
        }
    };
    let width: i64 = new.dims()[2..].iter().product();
    let hit = slots(positions, capacity)?;
    let one = hit.select(
        &cache
            .scope()
            .full(1.0, TensorType::new(cache.dtype(), [b, t, capacity]))?,
        &cache
            .scope()
            .full(0.0, TensorType::new(cache.dtype(), [b, t, capacity]))?,
    )?;
    // placed[b, c, :] = Σ_t one[b, t, c] · new[b, t, :]
    let placed = one.dot_general(
        &new.convert(cache.dtype())?.reshape(&[b, t, width])?,
        DotDims {
            lhs_batch: vec![0],
            rhs_batch: vec![0],
            lhs_contract: vec![1],
            rhs_contract: vec![1],
        },
    )?;
    let written = one.sum(&[1])?; // [B, C]: 1 where a new value lands
    let keep = written
        .full_like(1.0)?
        .sub(&written)?
        .broadcast_in_dim(&[b, capacity, width], &[0, 1])?;
    cache
        .reshape(&[b, capacity, width])?
        .mul(&keep)?
        .add(&placed)?
        .reshape(cache.dims())
}

/// Attention of new queries `q: [B, T, H, Dk]` at `positions: [B, T]` against the whole
/// cache `k: [B, C, KV, Dk]`, `v: [B, C, KV, Dv]` (grouped-query: `KV` divides `H`), query
/// `(b, t)` seeing slot `c` where `mask` lets position `positions[b, t]` see position `c`;
/// scores scaled by `scale`. The heads' outputs side by side, `[B, T, H·Dv]`, as
/// [`masked_attention`](super::masked_attention) gives them.
pub fn attend(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    positions: &Tensor,
    mask: Mask,
) -> Result<Tensor> {
    mask.validate()?;
    let (b, t) = rows_and_positions("cache::attend", q, positions)?;
    let (&[_, _, h, _], &[_, c, _, dv]) = (q.dims(), v.dims()) else {
        return Err(Error::invalid(
            "cache::attend",
            format!(
                "needs q [B, T, H, D] and v [B, C, KV, D], got {} and {}",
                q.ty(),
                v.ty()
            ),
        ));
    };
    let (k, v) = (repeat_kv(k, h)?, repeat_kv(v, h)?);
    let scores = head_scores(q, &k)?.scale(scale)?; // [B, H, T, C]
    let grid = TensorType::new(DType::I32, [b, t, c]);
    let slot = q.scope().iota(grid.clone(), 2)?;
    let at = positions
        .convert(DType::I32)?
        .broadcast_in_dim(&grid.dims, &[0, 1])?;
    let past = slot.le(&at)?;
    let keep = match mask {
        Mask::Causal => past,
        Mask::SlidingWindow(window) => {
            let within = at.sub(&slot)?.lt(&slot.full_like(window as f64)?)?;
            past.select(&within, &past)?
        }
        Mask::Block(len) => {
            let len = slot.full_like(len as f64)?;
            let same = at.div(&len)?.eq(&slot.div(&len)?)?;
            past.select(&same, &past)?
        }
    };
    let masked = keep
        .broadcast_in_dim(scores.dims(), &[0, 2, 3])?
        .select(&scores, &scores.full_like(-1e30)?)?;
    let probs = softmax(&masked, 3)?;
    weighted_values(&probs, &v)? // [B, H, T, Dv]
        .transpose(&[0, 2, 1, 3])?
        .reshape(&[b, t, h * dv])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Scope;

    #[test]
    fn shapes_are_checked_by_name() {
        let s = Scope::new("t");
        let cache = s.param(TensorType::new(DType::F32, [2, 8, 1, 4]));
        let new = s.param(TensorType::new(DType::F32, [2, 1, 1, 4]));
        let bad = s.param(TensorType::new(DType::I32, [2, 3]));
        let e = write(&cache, &new, &bad).unwrap_err().to_string();
        assert!(e.contains("cache::write") && e.contains("positions"), "{e}");
        let wide = s.param(TensorType::new(DType::F32, [2, 1, 2, 4]));
        let at = s.param(TensorType::new(DType::I32, [2, 1]));
        let e = write(&cache, &wide, &at).unwrap_err().to_string();
        assert!(e.contains("trailing dims"), "{e}");
    }
}
