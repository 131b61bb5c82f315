//! The causal language model every model here is (Llama, DeepSeek-V3, Qwen3.5 and a user's,
//! `examples/my-model`), declared once and generic over its stack: the token embedding's
//! lookup, the `#[layer_stack]`, the final RMSNorm, the LM head and the mean next-token
//! cross-entropy ([`CausalLm`]; [`TiedCausalLm`] when the head is the embedding's transpose). What differs between models, the config's field names, the final norm's
//! epsilon, the embedding's initial scale and the checks a config needs beyond its layers, is
//! read through [`LmConfig`], which each model's config implements.
//!
//! ```
//! use stackscan::{DType, Scope, TensorType};
//! use stackscan_models::causal_lm::Outer;
//!
//! let s = Scope::new("lm");
//! let (embed, norm, head) = (
//!     s.param(TensorType::new(DType::F32, [64, 8])),
//!     s.param(TensorType::new(DType::F32, [8])),
//!     s.param(TensorType::new(DType::F32, [8, 64])),
//! );
//! let lm = Outer { embed: &embed, final_norm: &norm, lm_head: Some(&head), eps: 1e-5 };
//! let tokens = s.param(TensorType::new(DType::I32, [2, 5]));
//! let h = lm.embed(&tokens)?;
//! assert_eq!(h.dims(), &[2, 5, 8]);
//! assert_eq!(lm.logits(&h)?.dims(), &[2, 5, 64]);
//! assert_eq!(lm.loss(&h, &tokens)?.rank(), 0);
//! # Ok::<(), stackscan::Error>(())
//! ```

use std::marker::PhantomData;

use stackscan::fsdp::InputSpec;
use stackscan::layer::Params;
use stackscan::model::{Inputs, Layers, ModelForward};
use stackscan::{DType, Error, LayerStack, Model, Result, Tensor, TensorType, nn};

/// What the causal language model reads of a model's config.
pub trait LmConfig: Clone + 'static {
    /// Vocabulary size: token ids and labels lie in `0..vocab`.
    fn vocab(&self) -> i64;
    /// The residual stream's width.
    fn d_model(&self) -> i64;
    /// Sequences per device.
    fn batch_per_device(&self) -> i64;
    /// Positions of each sequence on one device: all of them, unless the sequence is split
    /// over devices (context parallelism).
    fn seq_per_device(&self) -> i64;
    /// The final RMSNorm's epsilon (`rms_norm_eps` of the model's `config.json`).
    fn norm_eps(&self) -> f64;
    /// Standard deviation of the embedding's initialiser: the layers' 0.02 unless the model
    /// says otherwise.
    fn embed_std(&self) -> f64 {
        0.02
    }
    /// Checks the config against stack `S` beyond the shapes, before anything is built (head
    /// layouts, DeepSeek-V3's dense prefix); the default accepts every config.
    fn check<S: LayerStack<Config = Self>>(&self) -> Result<()> {
        Ok(())
    }
}

/// A step's inputs: token ids and the next token of each position, `[batch_per_device,
/// seq_per_device]` per device. Both index the vocabulary, a token through the embedding's
/// gather (which would clamp an id outside it), a label through the cross-entropy's one-hot
/// (which would match no class), so both declare `0..vocab` and bad data is rejected on the
/// host.
///
/// Written out rather than `#[derive(Inputs)]`: its config is the stack's, a type parameter,
/// which the derive does not take.
#[derive(Debug)]
pub struct Tokens<T, C> {
    /// Token ids.
    pub tokens: T,
    /// The next token of each position.
    pub labels: T,
    config: PhantomData<fn() -> C>,
}

impl<T, C> Params<T> for Tokens<T, C> {
    const LEN: usize = 2;

    fn from_values(values: Vec<T>) -> Result<Self> {
        let given = values.len();
        let [tokens, labels]: [T; 2] = values.try_into().map_err(|_| Error::InvalidOp {
            op: "causal_lm",
            message: format!("expected 2 inputs (tokens, labels), got {given}"),
        })?;
        Ok(Tokens {
            tokens,
            labels,
            config: PhantomData,
        })
    }

    fn into_values(self) -> Vec<T> {
        vec![self.tokens, self.labels]
    }

    fn values(&self) -> Vec<&T> {
        vec![&self.tokens, &self.labels]
    }
}

impl<C: LmConfig> Inputs for Tokens<Tensor, C> {
    type Config = C;

    fn input_specs(cfg: &C) -> Vec<InputSpec> {
        let ty = TensorType::new(DType::I32, [cfg.batch_per_device(), cfg.seq_per_device()]);
        ["tokens", "labels"]
            .into_iter()
            .map(|name| InputSpec::new(name, ty.clone()).with_values(0..cfg.vocab()))
            .collect()
    }
}

/// The whole model with stack `S` (a `#[layer_stack]` type whose config is an [`LmConfig`]):
/// the embedding, the stack, the final norm and the LM head, in the order they run. The
/// stack's depth is the config's, checked once against its block pattern when the model is
/// built ([`stackscan::model::stack_model`]).
#[derive(Debug, Model)]
#[model(config = S::Config, inputs = Tokens<T, S::Config>)]
pub struct CausalLm<T, S: LayerStack>
where
    S::Config: LmConfig,
{
    /// Token embedding, `[vocab, d]`.
    #[param(shape = [cfg.vocab(), cfg.d_model()], shard = 0, init = normal(cfg.embed_std()))]
    pub embed: T,
    /// The decoder layers.
    #[stack]
    pub layers: Layers<S>,
    /// RMSNorm scale after the stack, `[d]`.
    #[param(shape = [cfg.d_model()], replicated)]
    pub final_norm: T,
    /// LM head, `[d, vocab]`.
    #[param(shape = [cfg.d_model(), cfg.vocab()], shard = 0)]
    pub lm_head: T,
}

impl<S: LayerStack> CausalLm<Tensor, S>
where
    S::Config: LmConfig,
{
    /// The parts outside the stack, borrowed, with the config's norm epsilon.
    pub fn outer(&self, c: &S::Config) -> Outer<'_> {
        Outer {
            embed: &self.embed,
            final_norm: &self.final_norm,
            lm_head: Some(&self.lm_head),
            eps: c.norm_eps(),
        }
    }
}

/// The one forward of both causal LMs: the embedding, the loss and the logits through their
/// [`Outer`] parts, the config's checks.
macro_rules! forward_through_outer {
    ($model:ident) => {
        impl<S: LayerStack + 'static> ModelForward for $model<Tensor, S>
        where
            S::Config: LmConfig,
        {
            fn embed(&self, c: &S::Config, x: &Tokens<Tensor, S::Config>) -> Result<Tensor> {
                self.outer(c).embed(&x.tokens)
            }

            fn loss(
                &self,
                c: &S::Config,
                h: &Tensor,
                x: &Tokens<Tensor, S::Config>,
            ) -> Result<Tensor> {
                self.outer(c).loss(h, &x.labels)
            }

            fn logits(
                &self,
                c: &S::Config,
                h: &Tensor,
                _: &Tokens<Tensor, S::Config>,
            ) -> Result<Tensor> {
                self.outer(c).logits(h)
            }

            fn check(c: &S::Config) -> Result<()> {
                c.check::<S>()
            }
        }
    };
}

forward_through_outer!(CausalLm);
forward_through_outer!(TiedCausalLm);

/// The causal language model with stack `S` whose LM head is the token embedding's transpose
/// (`tie_word_embeddings`, as Llama 3.2 1B and 3B publish it): one `[vocab, d]` weight, read by
/// the lookup before the stack and by the logits after it, so its gradient is the sum of both
/// uses (the VJP adds them).
#[derive(Debug, Model)]
#[model(config = S::Config, inputs = Tokens<T, S::Config>)]
pub struct TiedCausalLm<T, S: LayerStack>
where
    S::Config: LmConfig,
{
    /// Token embedding, `[vocab, d]`, and (transposed) the LM head.
    #[param(shape = [cfg.vocab(), cfg.d_model()], shard = 0, init = normal(cfg.embed_std()))]
    pub embed: T,
    /// The decoder layers.
    #[stack]
    pub layers: Layers<S>,
    /// RMSNorm scale after the stack, `[d]`.
    #[param(shape = [cfg.d_model()], replicated)]
    pub final_norm: T,
}

impl<S: LayerStack> TiedCausalLm<Tensor, S>
where
    S::Config: LmConfig,
{
    /// The parts outside the stack, borrowed, the head tied to the embedding.
    pub fn outer(&self, c: &S::Config) -> Outer<'_> {
        Outer {
            embed: &self.embed,
            final_norm: &self.final_norm,
            lm_head: None,
            eps: c.norm_eps(),
        }
    }
}

/// A causal language model's outer weights, borrowed, and what they compute: the embedding
/// lookup before the stack, the logits and the loss after it.
#[derive(Clone, Copy, Debug)]
pub struct Outer<'a> {
    /// Token embedding, `[vocab, d]`.
    pub embed: &'a Tensor,
    /// RMSNorm scale after the stack, `[d]`.
    pub final_norm: &'a Tensor,
    /// LM head, `[d, vocab]`; `None`: the embedding's transpose (tied).
    pub lm_head: Option<&'a Tensor>,
    /// The final norm's epsilon.
    pub eps: f64,
}

impl Outer<'_> {
    /// The embedding lookup of `tokens: [B, T]`: `[B, T, d]`.
    pub fn embed(&self, tokens: &Tensor) -> Result<Tensor> {
        self.embed.take(tokens, 0)
    }

    /// The logits `[B, T, vocab]` of `h: [B, T, d]`: the final RMSNorm, then the LM head (or
    /// the embedding's transpose).
    pub fn logits(&self, h: &Tensor) -> Result<Tensor> {
        let normed = nn::rms_norm(h, self.final_norm, self.eps)?;
        match self.lm_head {
            Some(head) => normed.matmul(head),
            None => normed.matmul(&self.embed.transpose(&[1, 0])?),
        }
    }

    /// Vocabulary size: the LM head's columns (the embedding's rows when tied).
    fn vocab(&self) -> Option<i64> {
        match self.lm_head {
            Some(head) => match head.dims() {
                &[_, vocab] => Some(vocab),
                _ => None,
            },
            None => self.embed.dims().first().copied(),
        }
    }

    /// The mean next-token cross-entropy of `h: [B, T, d]`'s logits against `labels: [B, T]`
    /// (f32 whatever the activation's type, [`nn::cross_entropy`]).
    pub fn loss(&self, h: &Tensor, labels: &Tensor) -> Result<Tensor> {
        let (&[b, t, _], Some(vocab)) = (h.dims(), self.vocab()) else {
            return Err(Error::InvalidOp {
                op: "causal_lm",
                message: format!(
                    "expected h [B, T, d] and an LM head [d, vocab] (or an embedding [vocab, \
                     d]), got {} and {}",
                    h.ty(),
                    self.lm_head.unwrap_or(self.embed).ty()
                ),
            });
        };
        let logits = self.logits(h)?.reshape(&[b * t, vocab])?;
        nn::cross_entropy(&logits, &labels.reshape(&[b * t])?)
    }
}
