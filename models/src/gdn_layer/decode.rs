//! The Gated DeltaNet mixer as generation runs it: its state between calls is the delta
//! rule's `S` per value head and the convolution's last `kernel − 1` inputs, so a new token
//! costs one recurrence step whatever the length so far (no cache that grows with it).

use stackscan::{DType, Result, Tensor, TensorType, concatenate, nn};

use super::{GatedDeltaNet, GdnDims, invalid};
use crate::gdn::gdn_recurrent_from;

impl GdnDims {
    /// The mixer's state for `rows` sequences: the convolution's window
    /// `[rows, kernel − 1, channels]` and the delta rule's `[rows, value_heads, value_dim,
    /// key_dim]`.
    pub fn state(&self, rows: i64) -> Vec<TensorType> {
        let g = &self.gdn;
        vec![
            TensorType::new(DType::F32, [rows, g.conv_kernel - 1, g.conv_channels()]),
            TensorType::new(DType::F32, [rows, g.value_heads, g.value_dim, g.key_dim]),
        ]
    }
}

impl GatedDeltaNet<Tensor> {
    /// [`GatedDeltaNet::forward`] of new positions `x: [B, T, d]` continuing from `state`
    /// ([`GdnDims::state`]); positions below 0 (`positions: [B, T]`) are padding at a row's
    /// end, which moves neither the recurrence (their β and gate are 0) nor the convolution's
    /// window. Returns the output and the new state.
    pub fn decode(
        &self,
        c: &GdnDims,
        x: &Tensor,
        positions: &Tensor,
        state: &[Tensor],
    ) -> Result<(Tensor, Vec<Tensor>)> {
        self.check(c, x)?;
        let [window, s] = state else {
            return Err(invalid(format!(
                "the state is the convolution's window and the recurrence's, got {} parts",
                state.len()
            )));
        };
        let g = &c.gdn;
        let kernel = g.conv_kernel;
        if kernel < 2 {
            return Err(invalid(format!(
                "generation keeps the convolution's last kernel − 1 inputs; a kernel of {kernel} keeps none"
            )));
        }
        let (b, t, ch) = (x.dims()[0], x.dims()[1], g.conv_channels());
        let qkv = concatenate(
            &[
                &x.matmul(&self.wq)?,
                &x.matmul(&self.wk)?,
                &x.matmul(&self.wv)?,
            ],
            2,
        )?;
        // The window before these positions, then them: position t reads taps t .. t + K − 1.
        let all = concatenate(&[&window.convert(qkv.dtype())?, &qkv], 1)?; // [B, K − 1 + T, C]
        let mut conv: Option<Tensor> = None;
        for j in 0..kernel {
            let tap = self
                .conv
                .slice_axis(0, j, j + 1)?
                .reshape(&[ch])?
                .broadcast_in_dim(&[b, t, ch], &[2])?;
            let term = all.slice_axis(1, j, j + t)?.mul(&tap)?;
            conv = Some(match conv {
                Some(a) => a.add(&term)?,
                None => term,
            });
        }
        let conv = conv.ok_or_else(|| invalid("the convolution needs a tap".into()))?;
        let qkv_conv = nn::silu(&conv)?;

        // Real positions come first in a row: the new window is the K − 1 inputs that end
        // at the row's last real one.
        let valid = positions.ge(&positions.zeros_like()?)?; // [B, T]
        let ones = valid.select(
            &x.scope().full(1.0, TensorType::new(DType::I32, [b, t]))?,
            &x.scope().full(0.0, TensorType::new(DType::I32, [b, t]))?,
        )?;
        let real = ones.sum(&[1])?; // [B]
        let span = kernel - 1 + t;
        let slot = x.scope().iota(TensorType::new(DType::I32, [b, span]), 1)?;
        let mut kept = Vec::with_capacity((kernel - 1) as usize);
        for i in 0..kernel - 1 {
            let at = real
                .add(&real.full_like(i as f64)?)?
                .broadcast_in_dim(&[b, span], &[0])?;
            let pick = slot.eq(&at)?.broadcast_in_dim(&[b, span, ch], &[0, 1])?;
            kept.push(
                pick.select(&all, &all.zeros_like()?)?
                    .sum(&[1])?
                    .reshape(&[b, 1, ch])?,
            );
        }
        let kept: Vec<&Tensor> = kept.iter().collect();
        let new_window = concatenate(&kept, 1)?.convert(DType::F32)?;

        let mut new_s = None;
        let hv = g.value_heads;
        let out = self.mix(c, x, &qkv_conv, |q, k, v, gate, beta| {
            // Padding writes nothing: β = 0 and a gate of 0 (decay 1) keep the state.
            let live = valid.broadcast_in_dim(&[b, t, hv], &[0, 1])?;
            let beta = live.select(beta, &beta.zeros_like()?)?;
            let gate = live.select(gate, &gate.zeros_like()?)?;
            let (o, last) = gdn_recurrent_from(q, k, v, &gate, &beta, s)?;
            new_s = Some(last.convert(DType::F32)?);
            Ok(o)
        })?;
        let new_s = new_s.ok_or_else(|| invalid("the recurrence returned no state".into()))?;
        Ok((out, vec![new_window, new_s]))
    }
}
