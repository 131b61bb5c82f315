//! DeepSeek-V3's layers as generation runs them: MLA against a cache of its compressed keys
//! and values ([`crate::mla::mla_cached`]), then the dense FFN or the MoE as in training.
//! Generation routes without a capacity limit ([`decoding`]), as `transformers` does: a
//! token is never dropped however few share the step.

use stackscan::decode::Decode;
use stackscan::{Result, Tensor, TensorType, nn};

use super::{DeepSeek3Config, Dense, MoeLayer, NORM_EPS};
use crate::mla::{Mla, cache_types, mla_cached};
use crate::moe::NO_DROP;

/// `c` as generation runs it: every token reaches its experts, the sequence whole on one
/// device.
pub(super) fn decoding(c: &DeepSeek3Config) -> DeepSeek3Config {
    DeepSeek3Config {
        capacity_factor: NO_DROP,
        context: 1,
        ..*c
    }
}

/// A layer's decode step: MLA against its cache, then `ffn`, each behind an RMSNorm with a
/// residual (the layers differ only in their FFN).
fn decode_layer(
    c: &DeepSeek3Config,
    h: &Tensor,
    (attn_norm, attn): (&Tensor, &Mla<Tensor>),
    positions: &Tensor,
    state: &[Tensor],
    ffn_norm: &Tensor,
    ffn: impl FnOnce(&Tensor) -> Result<Tensor>,
) -> Result<(Tensor, Vec<Tensor>)> {
    let x = nn::rms_norm(h, attn_norm, NORM_EPS)?;
    let (a, cache) = mla_cached(&c.mla(), &x, attn, positions, state)?;
    let h = h.add(&a)?;
    let y = nn::rms_norm(&h, ffn_norm, NORM_EPS)?;
    Ok((h.add(&ffn(&y)?)?, cache))
}

impl Decode for Dense<Tensor> {
    fn state(c: &DeepSeek3Config, rows: i64, capacity: i64) -> Vec<TensorType> {
        cache_types(&c.mla(), rows, capacity)
    }

    fn decode(
        &self,
        c: &DeepSeek3Config,
        h: &Tensor,
        positions: &Tensor,
        state: &[Tensor],
    ) -> Result<(Tensor, Vec<Tensor>)> {
        let attn = (&self.attn_norm, &self.attn);
        decode_layer(c, h, attn, positions, state, &self.ffn_norm, |y| {
            self.mlp.forward(y)
        })
    }
}

impl Decode for MoeLayer<Tensor> {
    fn state(c: &DeepSeek3Config, rows: i64, capacity: i64) -> Vec<TensorType> {
        cache_types(&c.mla(), rows, capacity)
    }

    fn decode(
        &self,
        c: &DeepSeek3Config,
        h: &Tensor,
        positions: &Tensor,
        state: &[Tensor],
    ) -> Result<(Tensor, Vec<Tensor>)> {
        let attn = (&self.attn_norm, &self.attn);
        decode_layer(c, h, attn, positions, state, &self.ffn_norm, |y| {
            self.moe.forward(&c.moe(), y)
        })
    }
}
