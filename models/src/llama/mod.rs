//! A Llama-style decoder, stacked homogeneously: RMSNorm, RoPE, grouped-query causal
//! attention and a SwiGLU MLP per layer; embedding, final norm, LM head and cross-entropy
//! outside the scanned stack.
//!
//! The model is the causal language model ([`CausalLm`](crate::causal_lm::CausalLm)) over the
//! stack [`LlamaStack`](crate::llama::LlamaStack), built by its config's
//! [`Architecture::build`](crate::registry::Architecture::build).
//!
//! ```
//! use stackscan_models::llama::LlamaConfig;
//! use stackscan_models::registry::Architecture;
//! let (m, _) = LlamaConfig::tiny().build()?;
//! assert_eq!(m.stack.len(), 4);
//! # Ok::<(), stackscan::Error>(())
//! ```

mod architecture;
mod decode;
pub mod hf;
mod rope_scaling;

pub use architecture::{LlamaStack, model};
pub use rope_scaling::Llama3RopeScaling;

use serde::{Deserialize, Serialize};
use stackscan::layer::{ActivationMarker, Forward};
use stackscan::nn::context;
use stackscan::rng::Rng;
use stackscan::{Axis, Error, LayerStack, Module, Result, SubLayer, Tensor, nn};

use crate::causal_lm::LmConfig;
use crate::configs::ConfigFile;

/// Sizes of a Llama-style model; data (`models/configs/llama-*.toml`, [`LlamaConfig::load`]:
/// a file's missing fields are its base preset's, see [`crate::configs`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlamaConfig {
    /// Vocabulary.
    pub vocab: i64,
    /// Model width.
    pub d_model: i64,
    /// Decoder layers.
    pub layers: usize,
    /// Query heads.
    pub heads: i64,
    /// Key/value heads (grouped-query attention).
    pub kv_heads: i64,
    /// Width of one head.
    pub head_dim: i64,
    /// MLP hidden width.
    pub ffn: i64,
    /// RoPE base.
    pub rope_theta: f64,
    /// Llama 3's RoPE scaling (Llama 3.1 and later). Absent, the default: unscaled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_scaling: Option<Llama3RopeScaling>,
    /// Sequence length.
    pub seq: i64,
    /// Sequences per device.
    pub batch_per_device: i64,
    /// Sliding-window attention (Mistral's): each query attends to itself and the
    /// `window − 1` positions before it. Absent, the default: every earlier position.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<i64>,
    /// Attention computed this many keys at a time, an online softmax over key blocks
    /// ([`stackscan::nn::context::blocked_causal_attention`]): a layer holds one block's
    /// `[B, heads, seq, block]` scores where it would hold `[B, heads, seq, seq]`, in the
    /// forward and again in its recompute and VJP, which at long sequences is most of a
    /// step's temporaries. It must divide `seq`, and masks causally only (no `window`).
    /// Absent, the default: the whole score matrix at once (under context parallelism, blocks
    /// of one piece's length).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_block: Option<i64>,
    /// The RMSNorms' epsilon (`rms_norm_eps`; [`NORM_EPS`], Llama 3's, in every preset).
    pub norm_eps: f64,
    /// The LM head is the embedding's transpose, one weight (`tie_word_embeddings`, Llama 3.2
    /// 1B and 3B): the model is [`TiedCausalLm`](crate::causal_lm::TiedCausalLm). Absent, the
    /// default: a head of its own.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tie_embeddings: bool,
    /// Devices each sequence is split over (context parallelism, `--cp`): a device holds
    /// `seq / context` positions of each of its sequences, and attention gathers the keys and
    /// values of the others ([`stackscan::nn::context`]). 1, the default, splits nothing.
    /// A run's layout rather than a size (`--cp`, never read from a file), like DeepSeek-V3's
    /// expert mesh.
    #[serde(skip, default = "one")]
    pub context: usize,
}

pub(crate) fn one() -> usize {
    1
}

impl Default for LlamaConfig {
    fn default() -> Self {
        LlamaConfig::tiny()
    }
}

impl LlamaConfig {
    /// A config kept in the repository by name (`tiny`, `llama3-8b`), a TOML file or a
    /// Hugging Face `config.json` by path ([`crate::configs::load`]).
    pub fn load(name_or_path: &str) -> Result<Self> {
        crate::configs::load::<Self>(name_or_path)
    }

    /// The tiny config of the design (Llama-3-8B's structure at d 256, 4 layers).
    /// Read from its preset file, `models/configs/llama-tiny.toml`.
    pub fn tiny() -> Self {
        crate::configs::built_in("tiny")
    }

    /// A small config for equivalence tests: the tiny config's structure (grouped-query heads,
    /// a wider MLP) at width 32, 3 layers, sequences of 8 tokens, every sharded dimension
    /// divisible by 8.
    pub const fn small(batch_per_device: i64) -> Self {
        LlamaConfig {
            vocab: 64,
            d_model: 32,
            layers: 3,
            heads: 4,
            kv_heads: 2,
            head_dim: 8,
            ffn: 48,
            rope_theta: 10_000.0,
            rope_scaling: None,
            seq: 8,
            batch_per_device,
            window: None,
            attention_block: None,
            tie_embeddings: false,
            norm_eps: NORM_EPS,
            context: 1,
        }
    }

    /// Llama-3-8B's published sizes (for plans and cost models; far too big to run here).
    /// Read from its preset file, `models/configs/llama3-8b.toml`.
    pub fn llama3_8b() -> Self {
        crate::configs::built_in("llama3-8b")
    }
}

/// The Llama configs kept in the repository, by the name `--config` takes.
const PRESETS: [(&str, &str); 5] = [
    ("tiny", include_str!("../../configs/llama-tiny.toml")),
    ("llama3-8b", include_str!("../../configs/llama3-8b.toml")),
    (
        "llama3.2-1b",
        include_str!("../../configs/llama3.2-1b.toml"),
    ),
    (
        "tiny-swa",
        include_str!("../../configs/llama-tiny-swa.toml"),
    ),
    ("mistral-7b", include_str!("../../configs/mistral-7b.toml")),
];

impl ConfigFile for LlamaConfig {
    const MODEL: &'static str = "llama";
    const PRESETS: &'static [(&'static str, &'static str)] = &PRESETS;
    const TABLES: &'static [&'static str] = &[];
    const HF_MODEL_TYPES: &'static [&'static str] = &["llama"];
    const HF_CLASSES: &'static [&'static str] = &["LlamaForCausalLM"];
    const HF_KEYS: &'static [(&'static str, crate::hf_config::keys::HfKey)] = hf::KEYS;

    fn from_hf(text: &str) -> Result<Self> {
        crate::hf_config::parse_as(text, hf::read)
    }
}

/// The sizes attention reads: a projection of [`LlamaConfig`], so [`Attention`] does not
/// depend on the whole model's config and serves any model that can say these.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionDims {
    /// Model width.
    pub d_model: i64,
    /// Query heads.
    pub heads: i64,
    /// Key/value heads (grouped-query attention).
    pub kv_heads: i64,
    /// Width of one head.
    pub head_dim: i64,
    /// RoPE base.
    pub rope_theta: f64,
    /// RoPE scaling ([`LlamaConfig::rope_scaling`]).
    pub rope_scaling: Option<Llama3RopeScaling>,
    /// Standard deviation of the output projection's initialiser.
    pub out_std: f64,
    /// Devices the sequence is split over ([`LlamaConfig::context`]).
    pub context: usize,
    /// Which keys a query attends to ([`LlamaConfig::window`]).
    pub mask: nn::Mask,
    /// Keys per step of blockwise attention ([`LlamaConfig::attention_block`]).
    pub block: Option<i64>,
}

impl AttentionDims {
    /// RoPE on `x: [B, T, heads, head_dim]`, scaled when the config says so.
    fn rope(&self, x: &Tensor) -> Result<Tensor> {
        let d = self.head_dim as usize;
        match &self.rope_scaling {
            None => nn::rope(x, self.rope_theta, d),
            Some(s) => nn::rope_with_frequencies(x, &s.inv_freq(self.rope_theta, d), 1.0),
        }
    }

    /// [`AttentionDims::rope`] of a piece of the sequence that starts at position `start`.
    fn rope_from(&self, x: &Tensor, start: &Tensor) -> Result<Tensor> {
        let d = self.head_dim as usize;
        match &self.rope_scaling {
            None => nn::rope_from(x, self.rope_theta, d, start),
            Some(s) => {
                nn::rope_with_frequencies_from(x, &s.inv_freq(self.rope_theta, d), 1.0, start)
            }
        }
    }
}

/// The sizes the SwiGLU MLP reads.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MlpDims {
    /// Model width.
    pub d_model: i64,
    /// Hidden width.
    pub ffn: i64,
    /// Standard deviation of the down projection's initialiser.
    pub out_std: f64,
}

impl LlamaConfig {
    /// Output projections start smaller, `0.02 / √(2·layers)` (GPT-2's residual scaling).
    pub fn out_std(&self) -> f64 {
        0.02 / (2.0 * self.layers as f64).sqrt()
    }

    /// What [`Attention`] reads.
    pub fn attention(&self) -> AttentionDims {
        AttentionDims {
            d_model: self.d_model,
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            rope_theta: self.rope_theta,
            rope_scaling: self.rope_scaling,
            out_std: self.out_std(),
            context: self.context,
            mask: self.mask(),
            block: self.attention_block,
        }
    }

    /// The attention mask: causal, or a sliding window of [`LlamaConfig::window`].
    pub fn mask(&self) -> nn::Mask {
        self.window
            .map_or(nn::Mask::Causal, nn::Mask::SlidingWindow)
    }

    /// Positions of each sequence on one device: `seq / context`.
    pub fn seq_per_device(&self) -> i64 {
        self.seq / self.context.max(1) as i64
    }

    /// This config with each sequence split over `cp` devices, checked: `cp` divides the
    /// sequence and the `devices` (the mesh is `fsdp × context`, `devices / cp` by `cp`).
    pub fn with_context_parallel(self, devices: usize, cp: usize) -> Result<Self> {
        context_split(self.seq, devices, cp)?;
        if cp > 1 && self.window.is_some() {
            return Err(no_context_window());
        }
        Ok(LlamaConfig {
            context: cp,
            ..self
        })
    }

    /// What [`SwiGlu`] reads.
    pub fn mlp(&self) -> MlpDims {
        MlpDims {
            d_model: self.d_model,
            ffn: self.ffn,
            out_std: self.out_std(),
        }
    }
}

/// Grouped-query causal self-attention with RoPE, optionally over a sliding window
/// ([`AttentionDims::mask`]).
#[derive(Debug, Module)]
#[module(config = AttentionDims)]
pub struct Attention<T> {
    /// Query projection, `[d, heads·head_dim]`.
    #[param(shape = [cfg.d_model, cfg.heads * cfg.head_dim], shard = 0)]
    pub wq: T,
    /// Key projection, `[d, kv_heads·head_dim]`.
    #[param(shape = [cfg.d_model, cfg.kv_heads * cfg.head_dim], shard = 0)]
    pub wk: T,
    /// Value projection, `[d, kv_heads·head_dim]`.
    #[param(shape = [cfg.d_model, cfg.kv_heads * cfg.head_dim], shard = 0)]
    pub wv: T,
    /// Output projection, `[heads·head_dim, d]`.
    #[param(shape = [cfg.heads * cfg.head_dim, cfg.d_model], shard = 0, init = normal(cfg.out_std))]
    pub wo: T,
}

impl Attention<Tensor> {
    /// Attention of the normalised stream `x: [B, T, d]`, projected back to `[B, T, d]`.
    ///
    /// Under context parallelism (`c.context > 1`) `x` is this device's piece of each
    /// sequence: RoPE rotates it from the piece's start, and the key/value heads of every piece
    /// are gathered (before grouped-query repetition, so the exchange moves `kv_heads`, not
    /// `heads`) for a causal mask offset by that start.
    pub fn forward(&self, c: &AttentionDims, x: &Tensor) -> Result<Tensor> {
        let (b, t) = (x.dims()[0], x.dims()[1]);
        let (nh, nkv, hd) = (c.heads, c.kv_heads, c.head_dim);
        let heads = |w: &Tensor, n: i64| x.matmul(w)?.reshape(&[b, t, n, hd]);
        let scale = 1.0 / (hd as f64).sqrt();
        if c.context > 1 {
            if c.mask != nn::Mask::Causal {
                return Err(no_context_window());
            }
            let axis = Axis::new(context::CONTEXT_AXIS, c.context);
            let start = context::sequence_start(x, t, &axis)?;
            let q = c.rope_from(&heads(&self.wq, nh)?, &start)?;
            let k = c.rope_from(&heads(&self.wk, nkv)?, &start)?;
            let k = context::gather_sequence(&k, &axis)?;
            let v = context::gather_sequence(&heads(&self.wv, nkv)?, &axis)?;
            let (k, v) = (nn::repeat_kv(&k, nh)?, nn::repeat_kv(&v, nh)?);
            let block = c.block.unwrap_or(t);
            return context::blocked_causal_attention(&q, &k, &v, scale, &start, block)?
                .matmul(&self.wo);
        }
        let (q, k, v) = self.project(c, x, |t| c.rope(t))?;
        // Grouped-query attention: each key/value head serves heads/kv_heads query heads.
        let (k, v) = (nn::repeat_kv(&k, nh)?, nn::repeat_kv(&v, nh)?);
        match c.block {
            Some(block) => {
                if c.mask != nn::Mask::Causal {
                    return Err(no_blocked_window());
                }
                let first = x.scope().from_i64s(&[0], stackscan::DType::I32, &[])?;
                context::blocked_causal_attention(&q, &k, &v, scale, &first, block)?
            }
            None => nn::masked_attention(&q, &k, &v, scale, c.mask)?,
        }
        .matmul(&self.wo)
    }

    /// The query, key and value heads of `x: [B, T, d]` (`[B, T, heads, head_dim]`, keys and
    /// values with `kv_heads`), the queries and keys rotated by `rotate` (RoPE from position
    /// 0 in training, at each row's positions in generation).
    pub(crate) fn project(
        &self,
        c: &AttentionDims,
        x: &Tensor,
        rotate: impl Fn(&Tensor) -> Result<Tensor>,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        let (b, t) = (x.dims()[0], x.dims()[1]);
        let heads = |w: &Tensor, n: i64| x.matmul(w)?.reshape(&[b, t, n, c.head_dim]);
        let q = rotate(&heads(&self.wq, c.heads)?)?;
        let k = rotate(&heads(&self.wk, c.kv_heads)?)?;
        Ok((q, k, heads(&self.wv, c.kv_heads)?))
    }
}

/// Context parallelism's blocked attention masks causally only.
fn no_context_window() -> Error {
    Error::InvalidOp {
        op: "llama",
        message: "context parallelism (`--cp`) attends causally; a sliding `window` has no \
                  context-parallel form"
            .into(),
    }
}

/// Blockwise attention's online softmax masks causally only.
fn no_blocked_window() -> Error {
    Error::InvalidOp {
        op: "llama",
        message: "`attention_block` attends causally; a sliding `window` has no blockwise form \
                  here (set one or the other)"
            .into(),
    }
}

/// The SwiGLU MLP: `(silu(x·W_gate) ⊙ x·W_up)·W_down`.
#[derive(Debug, Module)]
#[module(config = MlpDims)]
pub struct SwiGlu<T> {
    /// Gate, `[d, ffn]`.
    #[param(shape = [cfg.d_model, cfg.ffn], shard = 0)]
    pub w_gate: T,
    /// Up projection, `[d, ffn]`.
    #[param(shape = [cfg.d_model, cfg.ffn], shard = 0)]
    pub w_up: T,
    /// Down projection, `[ffn, d]`.
    #[param(shape = [cfg.ffn, cfg.d_model], shard = 0, init = normal(cfg.out_std))]
    pub w_down: T,
}

impl SwiGlu<Tensor> {
    /// The MLP of the normalised stream `x: [B, T, d]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        nn::silu(&x.matmul(&self.w_gate)?)?
            .mul(&x.matmul(&self.w_up)?)?
            .matmul(&self.w_down)
    }
}

/// The residual stream `[batch, seq, d_model]`.
#[derive(Debug)]
pub enum Residual {}

impl ActivationMarker for Residual {}

/// One decoder layer: attention and the SwiGLU MLP, each behind an RMSNorm, with residuals.
/// Its parameters are `attn_norm`, `attn.wq` … `attn.wo`, `mlp_norm`, `mlp.w_gate` …
/// `mlp.w_down`, in this order.
#[derive(Debug, SubLayer)]
#[sublayer(config = LlamaConfig, carry = Residual, name = "layer")]
pub struct Decoder<T> {
    /// RMSNorm scale before attention.
    #[param(shape = [cfg.d_model], replicated)]
    pub attn_norm: T,
    /// Self-attention.
    #[module(config = cfg.attention())]
    pub attn: Attention<T>,
    /// RMSNorm scale before the MLP.
    #[param(shape = [cfg.d_model], replicated)]
    pub mlp_norm: T,
    /// The MLP.
    #[module(config = cfg.mlp())]
    pub mlp: SwiGlu<T>,
}

impl Forward for Decoder<Tensor> {
    fn forward(&self, c: &LlamaConfig, h: &Tensor) -> Result<Tensor> {
        let x = nn::rms_norm(h, &self.attn_norm, c.norm_eps)?;
        let h = h.add(&self.attn.forward(&c.attention(), &x)?)?;
        let y = nn::rms_norm(&h, &self.mlp_norm, c.norm_eps)?;
        h.add(&self.mlp.forward(&y)?)
    }
}

/// Llama 3's RMSNorm epsilon (`rms_norm_eps` of its `config.json`), every preset's.
pub const NORM_EPS: f64 = 1e-5;

/// The Llama is the causal language model ([`CausalLm`](crate::causal_lm::CausalLm)) over a stack of [`Decoder`]s
/// ([`LlamaStack`](crate::llama::LlamaStack)).
impl LmConfig for LlamaConfig {
    fn vocab(&self) -> i64 {
        self.vocab
    }
    fn d_model(&self) -> i64 {
        self.d_model
    }
    fn batch_per_device(&self) -> i64 {
        self.batch_per_device
    }
    fn seq_per_device(&self) -> i64 {
        LlamaConfig::seq_per_device(self)
    }
    fn norm_eps(&self) -> f64 {
        self.norm_eps
    }
    fn check<S: LayerStack<Config = Self>>(&self) -> Result<()> {
        check_heads(self)
    }
}

/// Checks a context-parallel split: `cp` devices per sequence divide the `devices` and the
/// sequence's `seq` positions.
pub fn context_split(seq: i64, devices: usize, cp: usize) -> Result<()> {
    if cp == 0 || devices == 0 || !devices.is_multiple_of(cp) {
        return Err(Error::InvalidOp {
            op: "context_parallel",
            message: format!("--cp {cp} must be at least 1 and divide the {devices} devices"),
        });
    }
    if seq % cp as i64 != 0 {
        return Err(Error::InvalidOp {
            op: "context_parallel",
            message: format!("--cp {cp} must divide the sequence length {seq}"),
        });
    }
    Ok(())
}

/// The `fsdp × context` mesh of `devices` with `cp` along `context` (a split
/// [`context_split`] accepted), for a model without routed experts (`ep` must be 1).
pub fn context_mesh(devices: usize, cp: usize, ep: usize) -> Result<stackscan::Mesh> {
    if ep != 1 {
        return Err(Error::InvalidOp {
            op: "expert_parallel",
            message: format!("--ep {ep}: this model has no routed experts"),
        });
    }
    stackscan::Mesh::new(&[
        (crate::moe::FSDP_AXIS, devices / cp),
        (context::CONTEXT_AXIS, cp),
    ])
}

/// `, each sequence of S split over cp devices` for a description, or nothing when `cp` is 1.
pub fn describe_context(seq: i64, cp: usize) -> String {
    if cp > 1 {
        format!(" (each sequence of {seq} split over {cp} devices)")
    } else {
        String::new()
    }
}

/// Heads must group evenly and a head's width must be even (RoPE rotates pairs).
fn check_heads(c: &LlamaConfig) -> Result<()> {
    if c.seq % c.context.max(1) as i64 != 0 {
        return Err(Error::InvalidOp {
            op: "llama",
            message: format!("`context` {} does not divide `seq` {}", c.context, c.seq),
        });
    }
    if c.kv_heads <= 0 || c.heads % c.kv_heads != 0 || c.head_dim % 2 != 0 {
        return Err(Error::InvalidOp {
            op: "llama",
            message: format!(
                "heads ({}) must be a multiple of kv_heads ({}) and head_dim ({}) even",
                c.heads, c.kv_heads, c.head_dim
            ),
        });
    }
    if let Some(s) = &c.rope_scaling {
        s.validate().map_err(|message| Error::InvalidOp {
            op: "llama",
            message,
        })?;
    }
    if let Some(block) = c.attention_block {
        if block <= 0 || c.seq % block != 0 {
            return Err(Error::InvalidOp {
                op: "llama",
                message: format!(
                    "`attention_block` {block} must be a positive divisor of `seq` {}",
                    c.seq
                ),
            });
        }
        if c.window.is_some() {
            return Err(no_blocked_window());
        }
    }
    if let Some(window) = c.window {
        nn::Mask::SlidingWindow(window)
            .validate()
            .map_err(|_| Error::InvalidOp {
                op: "llama",
                message: format!("`window` is {window}; expected 1 or more positions"),
            })?;
    }
    Ok(())
}

/// Synthetic sequences with learnable structure: each row counts up from a random start by a
/// row-specific stride (mod vocab), so the next token follows from the previous two. Returns
/// `(tokens, labels)` for `rows` rows, labels being tokens shifted by one.
pub fn synthetic_batch(c: &LlamaConfig, rows: i64, seed: u64) -> (Vec<i32>, Vec<i32>) {
    synthetic_tokens(c.vocab, c.seq, rows, seed)
}

/// [`synthetic_batch`] for any vocabulary and sequence length.
pub fn synthetic_tokens(vocab: i64, seq: i64, rows: i64, seed: u64) -> (Vec<i32>, Vec<i32>) {
    let mut rng = Rng::new(seed);
    let mut next = || (rng.next_u64() >> 33) as i64;
    let mut tokens = Vec::new();
    let mut labels = Vec::new();
    for _ in 0..rows {
        let start = next() % vocab;
        let stride = 1 + next() % 3;
        for i in 0..seq {
            tokens.push(((start + stride * i) % vocab) as i32);
            labels.push(((start + stride * (i + 1)) % vocab) as i32);
        }
    }
    (tokens, labels)
}
