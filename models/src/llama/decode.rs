//! The Llama's layer as generation runs it: attention over a key/value cache of
//! `[rows, capacity, kv_heads, head_dim]` per layer ([`stackscan::nn::cache`]), RoPE at each
//! row's own positions.

use stackscan::decode::Decode;
use stackscan::nn;
use stackscan::{DType, Error, Result, Tensor, TensorType};

use super::{Attention, AttentionDims, Decoder, LlamaConfig};

impl AttentionDims {
    /// [`AttentionDims::rope`] at each row's `positions: [B, T]`.
    fn rope_at(&self, x: &Tensor, positions: &Tensor) -> Result<Tensor> {
        let d = self.head_dim as usize;
        match &self.rope_scaling {
            None => nn::rope_at(x, self.rope_theta, d, positions),
            Some(s) => {
                nn::rope_with_frequencies_at(x, &s.inv_freq(self.rope_theta, d), 1.0, positions)
            }
        }
    }

    /// One layer's key and value caches.
    fn cache(&self, rows: i64, capacity: i64) -> Vec<TensorType> {
        let ty = TensorType::new(DType::F32, [rows, capacity, self.kv_heads, self.head_dim]);
        vec![ty.clone(), ty]
    }
}

impl Attention<Tensor> {
    /// [`Attention::forward`] of the new positions `x: [B, T, d]` at `positions: [B, T]`,
    /// their keys and values written into `cache` (`[keys, values]`) first; returns the
    /// output and the new cache.
    pub fn decode(
        &self,
        c: &AttentionDims,
        x: &Tensor,
        positions: &Tensor,
        cache: &[Tensor],
    ) -> Result<(Tensor, Vec<Tensor>)> {
        let [keys, values] = cache else {
            return Err(Error::InvalidOp {
                op: "llama decode",
                message: format!(
                    "a layer's cache is keys and values, got {} parts",
                    cache.len()
                ),
            });
        };
        let (q, k, v) = self.project(c, x, |t| c.rope_at(t, positions))?;
        let keys = nn::cache::write(keys, &k, positions)?;
        let values = nn::cache::write(values, &v, positions)?;
        let scale = 1.0 / (c.head_dim as f64).sqrt();
        let out =
            nn::cache::attend(&q, &keys, &values, scale, positions, c.mask)?.matmul(&self.wo)?;
        Ok((out, vec![keys, values]))
    }
}

impl Decode for Decoder<Tensor> {
    fn state(c: &LlamaConfig, rows: i64, capacity: i64) -> Vec<TensorType> {
        c.attention().cache(rows, capacity)
    }

    fn decode(
        &self,
        c: &LlamaConfig,
        h: &Tensor,
        positions: &Tensor,
        state: &[Tensor],
    ) -> Result<(Tensor, Vec<Tensor>)> {
        let x = nn::rms_norm(h, &self.attn_norm, c.norm_eps)?;
        let (a, cache) = self.attn.decode(&c.attention(), &x, positions, state)?;
        let h = h.add(&a)?;
        let y = nn::rms_norm(&h, &self.mlp_norm, c.norm_eps)?;
        Ok((h.add(&self.mlp.forward(&y)?)?, cache))
    }
}
