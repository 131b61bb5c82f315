//! Qwen3.5's layers as generation runs them: the GDN layer continues its delta rule and
//! convolution from their state ([`GatedDeltaNet::decode`](crate::gdn_layer::GatedDeltaNet)),
//! the attention layer reads a key/value cache; the MoE routes without a capacity limit, as
//! `transformers` does.

use stackscan::decode::Decode;
use stackscan::{Result, Tensor, TensorType, nn};

use super::{Attention, Gdn, NORM_EPS, Qwen35Config};
use crate::moe::{GatedMoe, NO_DROP};

/// `c` as generation runs it: every token reaches its experts.
pub(super) fn decoding(c: &Qwen35Config) -> Qwen35Config {
    Qwen35Config {
        capacity_factor: NO_DROP,
        ..*c
    }
}

/// `h + mixer(RMSNorm(h))`, then `h + moe(RMSNorm(h))`, the mixer returning its new state.
fn pre_norm_decode(
    c: &Qwen35Config,
    h: &Tensor,
    (mixer_norm, mixer): (
        &Tensor,
        impl FnOnce(&Tensor) -> Result<(Tensor, Vec<Tensor>)>,
    ),
    ffn_norm: &Tensor,
    moe: &GatedMoe<Tensor>,
) -> Result<(Tensor, Vec<Tensor>)> {
    let (mixed, state) = mixer(&nn::rms_norm(h, mixer_norm, NORM_EPS)?)?;
    let h = h.add(&mixed)?;
    let y = nn::rms_norm(&h, ffn_norm, NORM_EPS)?;
    Ok((h.add(&moe.forward(&c.moe_dims(), &y)?)?, state))
}

impl Decode for Gdn<Tensor> {
    fn state(c: &Qwen35Config, rows: i64, _capacity: i64) -> Vec<TensorType> {
        c.gdn_dims().state(rows)
    }

    fn decode(
        &self,
        c: &Qwen35Config,
        h: &Tensor,
        positions: &Tensor,
        state: &[Tensor],
    ) -> Result<(Tensor, Vec<Tensor>)> {
        let mixed = |x: &Tensor| self.mixer.decode(&c.gdn_dims(), x, positions, state);
        pre_norm_decode(c, h, (&self.mixer_norm, mixed), &self.ffn_norm, &self.moe)
    }
}

impl Decode for Attention<Tensor> {
    fn state(c: &Qwen35Config, rows: i64, capacity: i64) -> Vec<TensorType> {
        c.attention_dims().cache(rows, capacity)
    }

    fn decode(
        &self,
        c: &Qwen35Config,
        h: &Tensor,
        positions: &Tensor,
        state: &[Tensor],
    ) -> Result<(Tensor, Vec<Tensor>)> {
        let mixed = |x: &Tensor| self.mixer.decode(&c.attention_dims(), x, positions, state);
        pre_norm_decode(c, h, (&self.mixer_norm, mixed), &self.ffn_norm, &self.moe)
    }
}
