//! A Qwen3.5-style hybrid decoder declared with the macros: blocks of three Gated DeltaNet
//! layers and one gated attention layer (`block = [Gdn, Gdn, Gdn, Attention]`), each layer a
//! token mixer and an FFN behind RMSNorms with residuals; embedding, final norm, LM head
//! and cross-entropy outside the stack (shared with [`llama`](crate::llama)).
//!
//! The FFN is a dense SwiGLU of the width a token activates in the published MoE (top-k
//! routed experts plus the shared one); [`ffn`] is the one function the MoE will replace.
//!
//! ```
//! use stackscan::LayerStack;
//! use stackscan_examples::qwen35::{Qwen35Config, Qwen35Tiny, model};
//!
//! let m = model::<Qwen35Tiny>(&Qwen35Config::tiny())?;
//! assert_eq!(m.kinds.len(), 2);
//! assert!(model::<Qwen35Tiny>(&Qwen35Config::qwen35_35b_a3b()).is_err());
//! # Ok::<(), stackscan::Error>(())
//! ```

use stackscan::fsdp::StackModel;
use stackscan::layer::{ActivationMarker, Forward, Params};
use stackscan::{Error, LayerStack, Result, SubLayer, Tensor, layer_stack, nn};

use crate::gated_attention::{AttentionConfig, gated_attention};
use crate::gdn_layer::{GdnConfig, GdnForm, gdn_sublayer};
use crate::llama::LlamaConfig;

/// Sizes of the hybrid model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Qwen35Config {
    /// Vocabulary.
    pub vocab: i64,
    /// Model width.
    pub d_model: i64,
    /// Decoder layers (a multiple of the block's four).
    pub layers: usize,
    /// The GDN layers' mixer.
    pub gdn: GdnConfig,
    /// The attention layers' mixer.
    pub attention: AttentionConfig,
    /// Width of the dense SwiGLU FFN standing in for the MoE.
    pub ffn: i64,
    /// Sequence length.
    pub seq: i64,
    /// Sequences per device.
    pub batch_per_device: i64,
}

impl Qwen35Config {
    /// The tiny config's structure (fewer key than value heads, one kv head, 25 % rotary) at
    /// sizes that compile the 24 step variants of the equivalence tests quickly: d 32, 8
    /// layers, vocab 64, seq 8, GDN in `form`.
    pub fn small(batch_per_device: i64, form: GdnForm) -> Qwen35Config {
        Qwen35Config {
            vocab: 64,
            d_model: 32,
            layers: 8,
            gdn: GdnConfig {
                d_model: 32,
                key_heads: 2,
                value_heads: 4,
                key_dim: 8,
                value_dim: 8,
                conv_kernel: 4,
                form,
                model_layers: 8,
            },
            attention: AttentionConfig {
                d_model: 32,
                heads: 4,
                kv_heads: 1,
                head_dim: 8,
                rotary_dim: 2,
                rope_theta: 10_000.0,
                model_layers: 8,
            },
            ffn: 40,
            seq: 8,
            batch_per_device,
        }
    }

    /// The tiny config of issue 12: d 128, 8 layers, attention 8 q / 1 kv heads of 32, GDN
    /// 4 key / 8 value heads of 32, conv 4, chunk 16, vocab 512, seq 64. The FFN is
    /// `(4 routed + 1 shared) × 32 = 160` wide, what the 16-expert top-4 MoE activates.
    pub const fn tiny() -> Self {
        Qwen35Config {
            vocab: 512,
            d_model: 128,
            layers: 8,
            gdn: GdnConfig::tiny(),
            attention: AttentionConfig::tiny(),
            ffn: 160,
            seq: 64,
            batch_per_device: 2,
        }
    }

    /// Qwen3.5-35B-A3B's published sizes (for plans and cost models; far too big to run
    /// here): d 2048, 40 layers, vocab 248 320; the FFN `(8 routed + 1 shared) × 512`.
    pub const fn qwen35_35b_a3b() -> Self {
        Qwen35Config {
            vocab: 248_320,
            d_model: 2048,
            layers: 40,
            gdn: GdnConfig::qwen35_35b_a3b(),
            attention: AttentionConfig::qwen35_35b_a3b(),
            ffn: 9 * 512,
            seq: 4096,
            batch_per_device: 1,
        }
    }

    /// The fields the shared outer parts read.
    fn outer(&self) -> LlamaConfig {
        LlamaConfig {
            vocab: self.vocab,
            d_model: self.d_model,
            layers: self.layers,
            heads: self.attention.heads,
            kv_heads: self.attention.kv_heads,
            head_dim: self.attention.head_dim,
            ffn: self.ffn,
            rope_theta: self.attention.rope_theta,
            seq: self.seq,
            batch_per_device: self.batch_per_device,
        }
    }
}

/// The residual stream `[batch, seq, d_model]`.
#[derive(Debug)]
pub enum Residual {}

impl ActivationMarker for Residual {}

/// The FFN sub-layer with its residual: `h + W_down (SiLU(x W_gate) · x W_up)`, `x =
/// RMSNorm(h)`, weights `[norm, w_gate, w_up, w_down]`. The seam where the MoE goes.
pub fn ffn(h: &Tensor, w: &[Tensor]) -> Result<Tensor> {
    let [norm, gate, up, down] = w else {
        return Err(Error::InvalidOp {
            op: "ffn",
            message: format!("expected 4 weights, got {}", w.len()),
        });
    };
    let x = nn::rms_norm(h, norm, 1e-6)?;
    h.add(
        &nn::silu(&x.matmul(gate)?)?
            .mul(&x.matmul(up)?)?
            .matmul(down)?,
    )
}

/// A GDN layer: the GDN mixer ([`gdn_sublayer`], weights in the order of
/// [`gdn_params`](crate::gdn_layer::gdn_params)) then the FFN.
#[derive(Debug, SubLayer)]
#[sublayer(config = Qwen35Config, carry = Residual, name = "GDN")]
pub struct Gdn<T> {
    /// RMSNorm scale before the mixer.
    #[param(shape = [cfg.d_model], replicated)]
    pub gdn_norm: T,
    /// Query projection.
    #[param(shape = [cfg.d_model, cfg.gdn.key_heads * cfg.gdn.key_dim], shard = 0)]
    pub wq: T,
    /// Key projection.
    #[param(shape = [cfg.d_model, cfg.gdn.key_heads * cfg.gdn.key_dim], shard = 0)]
    pub wk: T,
    /// Value projection.
    #[param(shape = [cfg.d_model, cfg.gdn.value_heads * cfg.gdn.value_dim], shard = 0)]
    pub wv: T,
    /// Output-gate projection.
    #[param(shape = [cfg.d_model, cfg.gdn.value_heads * cfg.gdn.value_dim], shard = 0)]
    pub wz: T,
    /// Decay-input projection (`a`).
    #[param(shape = [cfg.d_model, cfg.gdn.value_heads], shard = 0)]
    pub wa: T,
    /// Write-strength projection (`b`, `β = sigmoid(b)`).
    #[param(shape = [cfg.d_model, cfg.gdn.value_heads], shard = 0)]
    pub wb: T,
    /// Depthwise causal convolution on `q|k|v`.
    #[param(shape = [cfg.gdn.conv_kernel, cfg.gdn.conv_channels()], shard = 1, init = normal(0.5))]
    pub conv: T,
    /// Log decay rate per value head.
    #[param(shape = [cfg.gdn.value_heads], replicated, init = zeros)]
    pub a_log: T,
    /// Decay time-step bias per value head.
    #[param(shape = [cfg.gdn.value_heads], replicated, init = zeros)]
    pub dt_bias: T,
    /// Output RMSNorm scale (per value head, shared by the heads).
    #[param(shape = [cfg.gdn.value_dim], replicated)]
    pub o_norm: T,
    /// Output projection.
    #[param(
        shape = [cfg.gdn.value_heads * cfg.gdn.value_dim, cfg.d_model],
        shard = 0,
        init = normal(0.02 / (2.0 * cfg.layers as f64).sqrt()),
    )]
    pub wo: T,
    /// RMSNorm scale before the FFN.
    #[param(shape = [cfg.d_model], replicated)]
    pub ffn_norm: T,
    /// FFN gate.
    #[param(shape = [cfg.d_model, cfg.ffn], shard = 0)]
    pub w_gate: T,
    /// FFN up projection.
    #[param(shape = [cfg.d_model, cfg.ffn], shard = 0)]
    pub w_up: T,
    /// FFN down projection.
    #[param(
        shape = [cfg.ffn, cfg.d_model],
        shard = 0,
        init = normal(0.02 / (2.0 * cfg.layers as f64).sqrt()),
    )]
    pub w_down: T,
}

impl Forward for Gdn<Tensor> {
    fn forward(&self, c: &Qwen35Config, h: &Tensor) -> Result<Tensor> {
        let w: Vec<Tensor> = self.values().into_iter().cloned().collect();
        let (mixer, rest) = w.split_at(12);
        ffn(&gdn_sublayer(&c.gdn, h, mixer)?, rest)
    }
}

/// A gated attention layer: the attention mixer ([`gated_attention`], weights in the order
/// of [`attention_params`](crate::gated_attention::attention_params)) then the FFN.
#[derive(Debug, SubLayer)]
#[sublayer(config = Qwen35Config, carry = Residual, name = "attention")]
pub struct Attention<T> {
    /// RMSNorm scale before the mixer.
    #[param(shape = [cfg.d_model], replicated)]
    pub attn_norm: T,
    /// Query and gate projection (per head: its query, then its gate).
    #[param(shape = [cfg.d_model, 2 * cfg.attention.heads * cfg.attention.head_dim], shard = 0)]
    pub wq: T,
    /// Key projection.
    #[param(shape = [cfg.d_model, cfg.attention.kv_heads * cfg.attention.head_dim], shard = 0)]
    pub wk: T,
    /// Value projection.
    #[param(shape = [cfg.d_model, cfg.attention.kv_heads * cfg.attention.head_dim], shard = 0)]
    pub wv: T,
    /// Query RMSNorm scale (per head).
    #[param(shape = [cfg.attention.head_dim], replicated)]
    pub q_norm: T,
    /// Key RMSNorm scale (per head).
    #[param(shape = [cfg.attention.head_dim], replicated)]
    pub k_norm: T,
    /// Output projection.
    #[param(
        shape = [cfg.attention.heads * cfg.attention.head_dim, cfg.d_model],
        shard = 0,
        init = normal(0.02 / (2.0 * cfg.layers as f64).sqrt()),
    )]
    pub wo: T,
    /// RMSNorm scale before the FFN.
    #[param(shape = [cfg.d_model], replicated)]
    pub ffn_norm: T,
    /// FFN gate.
    #[param(shape = [cfg.d_model, cfg.ffn], shard = 0)]
    pub w_gate: T,
    /// FFN up projection.
    #[param(shape = [cfg.d_model, cfg.ffn], shard = 0)]
    pub w_up: T,
    /// FFN down projection.
    #[param(
        shape = [cfg.ffn, cfg.d_model],
        shard = 0,
        init = normal(0.02 / (2.0 * cfg.layers as f64).sqrt()),
    )]
    pub w_down: T,
}

impl Forward for Attention<Tensor> {
    fn forward(&self, c: &Qwen35Config, h: &Tensor) -> Result<Tensor> {
        let w: Vec<Tensor> = self.values().into_iter().cloned().collect();
        let (mixer, rest) = w.split_at(7);
        ffn(&gated_attention(&c.attention, h, mixer)?, rest)
    }
}

/// The tiny config's stack: 2 blocks of `[GDN, GDN, GDN, attention]`.
#[layer_stack(
    block = [Gdn, Gdn, Gdn, Attention],
    layers = 8,
    prefetch_fsdp_weights,
    defer_grad_reduce_scatter,
)]
#[derive(Debug)]
pub struct Qwen35Tiny;

/// The tiny config with the attention layer first in each block, which MaxText's scan
/// cannot express and ours must.
#[layer_stack(
    block = [Attention, Gdn, Gdn, Gdn],
    layers = 8,
    prefetch_fsdp_weights,
    defer_grad_reduce_scatter,
)]
#[derive(Debug)]
pub struct Qwen35AttentionFirst;

/// Qwen3.5-35B-A3B's stack: 10 blocks of `[GDN, GDN, GDN, attention]`.
#[layer_stack(
    block = [Gdn, Gdn, Gdn, Attention],
    layers = 40,
    prefetch_fsdp_weights,
    defer_grad_reduce_scatter,
)]
#[derive(Debug)]
pub struct Qwen35Full;

/// The model with stack `S`: tokens and next-token labels `[batch_per_device, seq]` per
/// device. Fails with a typed error when the config's depth is not the stack's.
pub fn model<S: LayerStack<Config = Qwen35Config>>(c: &Qwen35Config) -> Result<StackModel> {
    if c.layers != S::LAYERS {
        return Err(Error::InvalidOp {
            op: "qwen35",
            message: format!(
                "the config has {} layers for a stack of {}",
                c.layers,
                S::LAYERS
            ),
        });
    }
    let o = crate::llama::outer(&c.outer())?;
    S::stack_model(c, o.activation, o.inputs, o.params, o.pre, o.post)
}

/// Synthetic next-token data as in [`llama::synthetic_batch`](crate::llama::synthetic_batch):
/// `(tokens, labels)` for `rows` sequences of the config's length.
pub fn synthetic_batch(c: &Qwen35Config, rows: i64, seed: u64) -> (Vec<i32>, Vec<i32>) {
    crate::llama::synthetic_batch(&c.outer(), rows, seed)
}

/// The main job's model: [`Qwen35Tiny`] with [`Qwen35Config::tiny`].
pub fn tiny_model() -> Result<StackModel> {
    model::<Qwen35Tiny>(&Qwen35Config::tiny())
}
