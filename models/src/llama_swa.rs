//! The Llama with sliding-window attention (Mistral's local attention): each query attends to
//! itself and the `window − 1` tokens before it. The whole model is this file and one line of
//! [`crate::registry::BUILT_IN`]: the config (Llama's sizes and the window), its presets, the
//! sub-layer (Llama's parameters, [`Attention`] and [`SwiGlu`] reused), the stack, the model
//! and what the commands need to know of it.
//!
//! ```
//! use stackscan_models::llama_swa::SwaConfig;
//! use stackscan_models::registry::{ModelName, Preset};
//!
//! let swa: ModelName = "llama-swa".parse()?;
//! let c = swa.preset(Preset::Tiny)?;
//! assert_eq!(c.get::<SwaConfig>().map(|c| c.window), Some(16));
//! assert_eq!(c.build()?.0.stack.len(), 4);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use serde::{Deserialize, Serialize};
use stackscan::fsdp::StackModel;
use stackscan::layer::Forward;
use stackscan::model::{Layers, ModelForward, stack_model};
use stackscan::plan::PlanOptions;
use stackscan::{
    DType, DotDims, Error, Inputs, LayerStack, Model, Result, SubLayer, Tensor, TensorType,
    layer_stack, nn,
};

use crate::causal_lm::CausalLm;
use crate::configs::ConfigFile;
use crate::llama::{Attention, AttentionDims, LlamaConfig, NORM_EPS, Residual, SwiGlu};
use crate::registry::{Architecture, Shape};

/// Llama's sizes (the TOML table `[llama]`, completed field by field from the base preset's)
/// and the attention window.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SwaConfig {
    /// Keys each query attends to: itself and the `window − 1` before it.
    pub window: i64,
    /// The Llama's sizes.
    pub llama: LlamaConfig,
}

impl ConfigFile for SwaConfig {
    const MODEL: &'static str = "llama-swa";
    const PRESETS: &'static [(&'static str, &'static str)] =
        &[("tiny", TINY), ("mistral-7b", MISTRAL_7B)];
    const TABLES: &'static [&'static str] = &["llama"];
}

/// The tiny Llama with a window of a quarter of its sequence.
const TINY: &str = "
window = 16
[llama]
vocab = 512
d_model = 256
layers = 4
heads = 8
kv_heads = 2
head_dim = 32
ffn = 896
rope_theta = 500000.0
seq = 64
batch_per_device = 2
";

/// Mistral-7B v0.1's published sizes: 32 layers, a 4096-token window.
const MISTRAL_7B: &str = "
window = 4096
[llama]
vocab = 32000
d_model = 4096
layers = 32
heads = 32
kv_heads = 8
head_dim = 128
ffn = 14336
rope_theta = 10000.0
seq = 8192
batch_per_device = 1
";

/// Llama's decoder layer with windowed attention: the same parameters, in the same order.
#[derive(Debug, SubLayer)]
#[sublayer(config = SwaConfig, carry = Residual, name = "layer")]
pub struct SwaDecoder<T> {
    /// RMSNorm scale before attention.
    #[param(shape = [cfg.llama.d_model], replicated)]
    pub attn_norm: T,
    /// Self-attention's projections.
    #[module(config = cfg.llama.attention())]
    pub attn: Attention<T>,
    /// RMSNorm scale before the MLP.
    #[param(shape = [cfg.llama.d_model], replicated)]
    pub mlp_norm: T,
    /// The MLP.
    #[module(config = cfg.llama.mlp())]
    pub mlp: SwiGlu<T>,
}

impl Forward for SwaDecoder<Tensor> {
    fn forward(&self, c: &SwaConfig, h: &Tensor) -> Result<Tensor> {
        let x = nn::rms_norm(h, &self.attn_norm, 1e-5)?;
        let h = h.add(&windowed(&self.attn, &c.llama.attention(), c.window, &x)?)?;
        let y = nn::rms_norm(&h, &self.mlp_norm, 1e-5)?;
        h.add(&self.mlp.forward(&y)?)
    }
}

/// [`Attention`]'s projections, RoPE and grouped-query heads, with query `i` attending to
/// keys `i − window < j ≤ i`.
fn windowed(a: &Attention<Tensor>, c: &AttentionDims, window: i64, x: &Tensor) -> Result<Tensor> {
    let (b, t) = (x.dims()[0], x.dims()[1]);
    let (nh, nkv, hd) = (c.heads, c.kv_heads, c.head_dim);
    let heads = |w: &Tensor, n: i64| x.matmul(w)?.reshape(&[b, t, n, hd]);
    let q = nn::rope(&heads(&a.wq, nh)?, c.rope_theta, hd as usize)?;
    let k = nn::repeat_kv(
        &nn::rope(&heads(&a.wk, nkv)?, c.rope_theta, hd as usize)?,
        nh,
    )?;
    let v = nn::repeat_kv(&heads(&a.wv, nkv)?, nh)?;
    let batch_heads = |rhs_contract| DotDims {
        lhs_batch: vec![0, 2],
        rhs_batch: vec![0, 2],
        lhs_contract: vec![3],
        rhs_contract: vec![rhs_contract],
    };
    // [B, H, T, S]
    let scores = q
        .dot_general(&k, batch_heads(3))?
        .scale(1.0 / (hd as f64).sqrt())?;
    let probs = nn::softmax(&window_mask(&scores, window)?, 3)?;
    let out = probs.dot_general(
        &v,
        DotDims {
            lhs_batch: vec![0, 1],
            ..batch_heads(1)
        },
    )?; // [B, H, T, D]
    out.transpose(&[0, 2, 1, 3])?
        .reshape(&[b, t, nh * hd])?
        .matmul(&a.wo)
}

/// Keeps `scores[.., i, j]` for `i − window < j ≤ i`, the rest a large negative value, so a
/// following softmax gives them zero weight.
pub fn window_mask(scores: &Tensor, window: i64) -> Result<Tensor> {
    if window < 1 {
        return Err(Error::InvalidOp {
            op: "llama_swa",
            message: format!("`SwaConfig.window` is {window}; expected 1 or more"),
        });
    }
    let s = scores.scope();
    let (dims, r) = (scores.dims(), scores.rank());
    if r < 2 {
        return Err(Error::InvalidOp {
            op: "llama_swa",
            message: format!(
                "the window mask needs scores [.., Q, K], got {}",
                scores.ty()
            ),
        });
    }
    // Built as one `[Q, K]` predicate and broadcast into a single select, as `nn::causal_mask`
    // is: it depends on nothing in a layer, so XLA hoists it out of the layer loops and keeps
    // it for the whole step at the size it is built, and the scores pass through one select.
    let ty = TensorType::new(DType::I32, &dims[r - 2..]);
    let (i, j) = (s.iota(ty.clone(), 0)?, s.iota(ty, 1)?);
    let past = j.le(&i)?;
    let within = i.sub(&j)?.lt(&j.full_like(window as f64)?)?;
    // `past ∧ within`: where `past` is false the select keeps it.
    let keep = past.select(&within, &past)?;
    keep.broadcast_in_dim(dims, &[r - 2, r - 1])?
        .select(scores, &scores.full_like(-1e30)?)
}

/// The sliding-window Llama's stack: `llama.layers` decoder layers, prefetch and deferred
/// reduce-scatter.
#[layer_stack(
    block = [SwaDecoder],
    layers = cfg.llama.layers,
    prefetch_fsdp_weights,
    defer_grad_reduce_scatter,
)]
#[derive(Debug)]
pub struct SwaStack;

/// A step's tokens and next tokens.
#[derive(Debug, Inputs)]
#[inputs(config = SwaConfig)]
pub struct Tokens<T> {
    /// Token ids.
    #[input(shape = [cfg.llama.batch_per_device, cfg.llama.seq], dtype = i32, values = 0..cfg.llama.vocab)]
    pub tokens: T,
    /// The next token of each position.
    #[input(shape = [cfg.llama.batch_per_device, cfg.llama.seq], dtype = i32, values = 0..cfg.llama.vocab)]
    pub labels: T,
}

/// The whole model: Llama's outer parts around the sliding-window stack.
#[derive(Debug, Model)]
#[model(config = SwaConfig, inputs = Tokens)]
pub struct SwaLlama<T, S> {
    /// Token embedding, `[vocab, d]`.
    #[param(shape = [cfg.llama.vocab, cfg.llama.d_model], shard = 0)]
    pub embed: T,
    /// The decoder layers.
    #[stack]
    pub layers: Layers<S>,
    /// RMSNorm scale after the stack, `[d]`.
    #[param(shape = [cfg.llama.d_model], replicated)]
    pub final_norm: T,
    /// LM head, `[d, vocab]`.
    #[param(shape = [cfg.llama.d_model, cfg.llama.vocab], shard = 0)]
    pub lm_head: T,
}

impl<S> SwaLlama<Tensor, S> {
    fn outer(&self) -> CausalLm<'_> {
        CausalLm::new(&self.embed, &self.final_norm, &self.lm_head, NORM_EPS)
    }
}

impl<S: LayerStack<Config = SwaConfig> + 'static> ModelForward for SwaLlama<Tensor, S> {
    fn embed(&self, _: &SwaConfig, x: &Tokens<Tensor>) -> Result<Tensor> {
        self.outer().embed(&x.tokens)
    }

    fn loss(&self, _: &SwaConfig, h: &Tensor, x: &Tokens<Tensor>) -> Result<Tensor> {
        self.outer().loss(h, &x.labels)
    }

    fn logits(&self, _: &SwaConfig, h: &Tensor, _: &Tokens<Tensor>) -> Result<Tensor> {
        self.outer().logits(h)
    }

    fn check(c: &SwaConfig) -> Result<()> {
        if c.llama.context > 1 {
            return Err(Error::InvalidOp {
                op: "llama_swa",
                message: "sliding-window attention has no context-parallel form here (`--cp` \
                          needs its window's keys from the piece before); use `--cp 1`"
                    .to_owned(),
            });
        }
        if c.window < 1 {
            return Err(Error::InvalidOp {
                op: "llama_swa",
                message: format!("`SwaConfig.window` is {}; expected 1 or more", c.window),
            });
        }
        Ok(())
    }
}

/// The sliding-window Llama as the commands know it (`--model llama-swa`).
#[derive(Debug)]
pub struct LlamaSwaModel;

impl Architecture for LlamaSwaModel {
    type Config = SwaConfig;
    type Stack = SwaStack;
    const ABOUT: &'static str =
        "Llama with sliding-window attention (published: Mistral-7B v0.1, a 4096-token window)";
    const PUBLISHED: &'static str = "mistral-7b";

    fn build(c: &SwaConfig) -> Result<(StackModel, PlanOptions)> {
        stack_model::<SwaLlama<Tensor, SwaStack>>(c)
    }

    fn describe(c: &SwaConfig) -> String {
        let l = &c.llama;
        format!(
            "Llama with sliding-window attention (declared with the macros): window {}, {} layers, d {}, {}/{} heads × {}, FFN {}, vocab {}; {} × {} tokens per device",
            c.window,
            l.layers,
            l.d_model,
            l.heads,
            l.kv_heads,
            l.head_dim,
            l.ffn,
            l.vocab,
            l.batch_per_device,
            l.seq
        )
    }

    fn shape(c: &mut SwaConfig) -> Shape<'_> {
        let l = &mut c.llama;
        Shape {
            vocab: l.vocab,
            seq: &mut l.seq,
            batch_per_device: &mut l.batch_per_device,
            layers: &mut l.layers,
        }
    }
}
