//! The part of a causal language model outside its stack, shared by every model here (Llama,
//! its sliding-window variant, DeepSeek-V3, Qwen3.5): the token embedding's lookup, the final
//! RMSNorm, the LM head and the mean next-token cross-entropy. A model borrows its own outer
//! weights into a [`CausalLm`] and its `ModelForward` methods are one call each; what differs
//! between models (the final norm's epsilon) is a field.
//!
//! ```
//! use stackscan::{DType, Scope, TensorType};
//! use stackscan_models::causal_lm::CausalLm;
//!
//! let s = Scope::new("lm");
//! let (embed, norm, head) = (
//!     s.param(TensorType::new(DType::F32, [64, 8])),
//!     s.param(TensorType::new(DType::F32, [8])),
//!     s.param(TensorType::new(DType::F32, [8, 64])),
//! );
//! let lm = CausalLm { embed: &embed, final_norm: &norm, lm_head: &head, eps: 1e-5 };
//! let tokens = s.param(TensorType::new(DType::I32, [2, 5]));
//! let h = lm.embed(&tokens)?;
//! assert_eq!(h.dims(), &[2, 5, 8]);
//! assert_eq!(lm.logits(&h)?.dims(), &[2, 5, 64]);
//! assert_eq!(lm.loss(&h, &tokens)?.rank(), 0);
//! # Ok::<(), stackscan::Error>(())
//! ```

use stackscan::{Error, Result, Tensor, nn};

/// A causal language model's outer weights, borrowed from its model struct.
#[derive(Clone, Copy, Debug)]
pub struct CausalLm<'a> {
    /// Token embedding, `[vocab, d]`.
    pub embed: &'a Tensor,
    /// RMSNorm scale after the stack, `[d]`.
    pub final_norm: &'a Tensor,
    /// LM head, `[d, vocab]`.
    pub lm_head: &'a Tensor,
    /// The final norm's epsilon (Llama's 1e-5, DeepSeek-V3's and Qwen3.5's 1e-6).
    pub eps: f64,
}

impl<'a> CausalLm<'a> {
    /// The outer part of a model whose fields are these weights.
    pub const fn new(
        embed: &'a Tensor,
        final_norm: &'a Tensor,
        lm_head: &'a Tensor,
        eps: f64,
    ) -> CausalLm<'a> {
        CausalLm {
            embed,
            final_norm,
            lm_head,
            eps,
        }
    }

    /// The embedding lookup of `tokens: [B, T]`: `[B, T, d]`.
    pub fn embed(&self, tokens: &Tensor) -> Result<Tensor> {
        self.embed.take(tokens, 0)
    }

    /// The logits `[B, T, vocab]` of `h: [B, T, d]`: the final RMSNorm, then the LM head.
    pub fn logits(&self, h: &Tensor) -> Result<Tensor> {
        nn::rms_norm(h, self.final_norm, self.eps)?.matmul(self.lm_head)
    }

    /// The mean next-token cross-entropy of `h: [B, T, d]`'s logits against `labels: [B, T]`
    /// (f32 whatever the activation's type, [`nn::cross_entropy`]).
    pub fn loss(&self, h: &Tensor, labels: &Tensor) -> Result<Tensor> {
        let (&[b, t, _], &[_, vocab]) = (h.dims(), self.lm_head.dims()) else {
            return Err(Error::InvalidOp {
                op: "causal_lm",
                message: format!(
                    "expected h [B, T, d] and an LM head [d, vocab], got {} and {}",
                    h.ty(),
                    self.lm_head.ty()
                ),
            });
        };
        let logits = self.logits(h)?.reshape(&[b * t, vocab])?;
        nn::cross_entropy(&logits, &labels.reshape(&[b * t])?)
    }
}
