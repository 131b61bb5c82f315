//! A Qwen3.5-style hybrid decoder declared with the macros: blocks of three Gated DeltaNet
//! layers and one gated attention layer (`block = [Gdn, Gdn, Gdn, Attention]`), each layer a
//! token mixer and an FFN behind RMSNorms with residuals; embedding, final norm, LM head
//! and cross-entropy outside the stack (shared with [`llama`](crate::llama)).
//!
//! The FFN of every layer is the mixture of experts of [`crate::moe`], as in the published
//! model: softmax top-k routing renormalised over the chosen experts, and one shared expert
//! that every token uses behind a per-token sigmoid gate ([`moe_ffn`]).
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
use stackscan::layer::{ActivationMarker, Forward};
use stackscan::{Error, LayerStack, Result, SubLayer, Tensor, layer_stack, nn};

use crate::gated_attention::{AttentionConfig, gated_attention};
use crate::gdn_layer::{GdnConfig, GdnForm, gdn_sublayer};
use crate::llama::LlamaConfig;
use crate::moe::{
    ExpertWeights, MoeConfig, MoeWeights, RouterConfig, RouterKind, SharedExpert, moe,
};

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
    /// Routed experts per layer.
    pub experts: usize,
    /// Experts each token is routed to.
    pub top_k: usize,
    /// One routed expert's hidden width (`moe_intermediate_size`).
    pub expert_width: i64,
    /// The shared expert's hidden width (`shared_expert_intermediate_size`).
    pub shared_width: i64,
    /// Expert slots over a balanced load (see [`capacity`](crate::moe::capacity)); at
    /// `experts / top_k` or more no token is ever dropped, so a sharded step routes exactly
    /// like the unsharded reference.
    pub capacity_factor: f64,
    /// See [`DispatchOptions::direct_token_gather`](crate::moe::DispatchOptions).
    pub direct_token_gather: bool,
    /// See [`DispatchOptions::dlhs_transpose_rhs`](crate::moe::DispatchOptions).
    pub dlhs_transpose_rhs: bool,
    /// Sequence length.
    pub seq: i64,
    /// Sequences per device.
    pub batch_per_device: i64,
}

impl Qwen35Config {
    /// The tiny config's structure (fewer key than value heads, one kv head, 25 % rotary,
    /// 16 experts top-4 and a gated shared expert) at sizes that compile the 24 step variants
    /// of the equivalence tests quickly: d 32, 8 layers, vocab 64, seq 8, experts of width 8,
    /// GDN in `form`. Capacity never drops a token.
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
            experts: 16,
            top_k: 4,
            expert_width: 8,
            shared_width: 8,
            capacity_factor: 4.0,
            direct_token_gather: false,
            dlhs_transpose_rhs: false,
            seq: 8,
            batch_per_device,
        }
    }

    /// The tiny config of issue 12: d 128, 8 layers, attention 8 q / 1 kv heads of 32, GDN
    /// 4 key / 8 value heads of 32, conv 4, chunk 16, 16 experts top-4 of width 32 and a
    /// shared expert of 32, vocab 512, seq 64. Capacity 2 × a balanced load (64 slots per
    /// expert for the 128 tokens of a device): the main job may drop a token of an expert
    /// that more than half the tokens choose.
    pub const fn tiny() -> Self {
        Qwen35Config {
            vocab: 512,
            d_model: 128,
            layers: 8,
            gdn: GdnConfig::tiny(),
            attention: AttentionConfig::tiny(),
            experts: 16,
            top_k: 4,
            expert_width: 32,
            shared_width: 32,
            capacity_factor: 2.0,
            direct_token_gather: false,
            dlhs_transpose_rhs: false,
            seq: 64,
            batch_per_device: 2,
        }
    }

    /// Qwen3.5-35B-A3B's published sizes (for plans and cost models; far too big to run
    /// here): d 2048, 40 layers, vocab 248 320, 256 experts top-8 of width 512 and a gated
    /// shared expert of 512; capacity 1.25 × a balanced load (our choice). Checked against
    /// the model arguments a public training framework publishes for the checkpoint (also
    /// 16 query / 2 key-value heads of 256, rotary on 25 %, base 10⁷, GDN 16 key / 32 value
    /// heads of 128, conv 4, one attention layer in four).
    pub const fn qwen35_35b_a3b() -> Self {
        Qwen35Config {
            vocab: 248_320,
            d_model: 2048,
            layers: 40,
            gdn: GdnConfig::qwen35_35b_a3b(),
            attention: AttentionConfig::qwen35_35b_a3b(),
            experts: 256,
            top_k: 8,
            expert_width: 512,
            shared_width: 512,
            capacity_factor: 1.25,
            direct_token_gather: false,
            dlhs_transpose_rhs: false,
            seq: 4096,
            batch_per_device: 1,
        }
    }

    /// The MoE sub-layer's config: softmax top-k renormalised, a gated shared expert.
    pub const fn moe(&self) -> MoeConfig {
        MoeConfig {
            router: RouterConfig {
                experts: self.experts,
                top_k: self.top_k,
                kind: RouterKind::Softmax,
            },
            capacity_factor: self.capacity_factor,
            direct_token_gather: self.direct_token_gather,
            dlhs_transpose_rhs: self.dlhs_transpose_rhs,
            expert_mesh: crate::moe::ExpertMesh::OFF,
            gated_shared: true,
        }
    }

    /// `experts` as a dimension.
    pub const fn e(&self) -> i64 {
        self.experts as i64
    }

    /// The fields the shared outer parts read (`ffn`, which they do not, is the width a
    /// token activates: its routed experts and the shared one).
    fn outer(&self) -> LlamaConfig {
        LlamaConfig {
            vocab: self.vocab,
            d_model: self.d_model,
            layers: self.layers,
            heads: self.attention.heads,
            kv_heads: self.attention.kv_heads,
            head_dim: self.attention.head_dim,
            ffn: self.top_k as i64 * self.expert_width + self.shared_width,
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

/// The FFN half of either layer kind, by name.
#[derive(Clone, Copy, Debug)]
pub struct FfnWeights<'a> {
    /// RMSNorm scale before the MoE, `[d]`.
    pub norm: &'a Tensor,
    /// Router projection `[d, E]`.
    pub router: &'a Tensor,
    /// Routed experts, stacked over `E`.
    pub experts: ExpertWeights<'a>,
    /// The shared expert's gate, up and down projections and its sigmoid gate `[d, 1]`.
    pub shared: SharedExpert<'a>,
}

/// The MoE FFN with its residual: `h + moe(RMSNorm(h))`, the tokens of every sequence
/// routed together.
pub fn moe_ffn(c: &Qwen35Config, h: &Tensor, w: &FfnWeights<'_>) -> Result<Tensor> {
    let dims = h.dims().to_vec();
    let [b, t, d] = dims[..] else {
        return Err(Error::InvalidOp {
            op: "moe_ffn",
            message: format!("expected h: [B, T, {}], got {}", c.d_model, h.ty()),
        });
    };
    let tokens = nn::rms_norm(h, w.norm, 1e-6)?.reshape(&[b * t, d])?;
    let weights = MoeWeights {
        router: w.router,
        router_bias: None,
        experts: w.experts,
        shared: Some(w.shared),
    };
    h.add(&moe(&c.moe(), &tokens, &weights)?.reshape(&dims)?)
}

/// The [`FfnWeights`] of a layer struct, whose MoE fields have the same names in both kinds.
macro_rules! ffn_weights {
    ($layer:expr) => {
        FfnWeights {
            norm: &$layer.ffn_norm,
            router: &$layer.router,
            experts: ExpertWeights {
                gate: &$layer.experts_gate,
                up: &$layer.experts_up,
                down: &$layer.experts_down,
            },
            shared: SharedExpert {
                gate: &$layer.shared_gate,
                up: &$layer.shared_up,
                down: &$layer.shared_down,
                gate_proj: Some(&$layer.shared_expert_gate),
            },
        }
    };
}

/// A GDN layer: the GDN mixer ([`gdn_sublayer`], weights in the order of
/// [`gdn_params`](crate::gdn_layer::gdn_params)) then the MoE FFN.
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
    /// RMSNorm scale before the MoE.
    #[param(shape = [cfg.d_model], replicated)]
    pub ffn_norm: T,
    /// Router projection.
    #[param(shape = [cfg.d_model, cfg.e()], shard = 0)]
    pub router: T,
    /// Routed experts' gates, stacked over the experts.
    #[param(shape = [cfg.e(), cfg.d_model, cfg.expert_width], shard = 0)]
    pub experts_gate: T,
    /// Routed experts' up projections.
    #[param(shape = [cfg.e(), cfg.d_model, cfg.expert_width], shard = 0)]
    pub experts_up: T,
    /// Routed experts' down projections.
    #[param(
        shape = [cfg.e(), cfg.expert_width, cfg.d_model],
        shard = 0,
        init = normal(0.02 / (2.0 * cfg.layers as f64).sqrt()),
    )]
    pub experts_down: T,
    /// Shared expert gate.
    #[param(shape = [cfg.d_model, cfg.shared_width], shard = 0)]
    pub shared_gate: T,
    /// Shared expert up projection.
    #[param(shape = [cfg.d_model, cfg.shared_width], shard = 0)]
    pub shared_up: T,
    /// Shared expert down projection.
    #[param(
        shape = [cfg.shared_width, cfg.d_model],
        shard = 0,
        init = normal(0.02 / (2.0 * cfg.layers as f64).sqrt()),
    )]
    pub shared_down: T,
    /// The shared expert's per-token sigmoid gate.
    #[param(shape = [cfg.d_model, 1], shard = 0)]
    pub shared_expert_gate: T,
}

impl Forward for Gdn<Tensor> {
    fn forward(&self, c: &Qwen35Config, h: &Tensor) -> Result<Tensor> {
        let mixer = [
            &self.gdn_norm,
            &self.wq,
            &self.wk,
            &self.wv,
            &self.wz,
            &self.wa,
            &self.wb,
            &self.conv,
            &self.a_log,
            &self.dt_bias,
            &self.o_norm,
            &self.wo,
        ]
        .map(Tensor::clone);
        let ffn = ffn_weights!(self);
        moe_ffn(c, &gdn_sublayer(&c.gdn, h, &mixer)?, &ffn)
    }
}

/// A gated attention layer: the attention mixer ([`gated_attention`], weights in the order
/// of [`attention_params`](crate::gated_attention::attention_params)) then the MoE FFN.
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
    /// RMSNorm scale before the MoE.
    #[param(shape = [cfg.d_model], replicated)]
    pub ffn_norm: T,
    /// Router projection.
    #[param(shape = [cfg.d_model, cfg.e()], shard = 0)]
    pub router: T,
    /// Routed experts' gates, stacked over the experts.
    #[param(shape = [cfg.e(), cfg.d_model, cfg.expert_width], shard = 0)]
    pub experts_gate: T,
    /// Routed experts' up projections.
    #[param(shape = [cfg.e(), cfg.d_model, cfg.expert_width], shard = 0)]
    pub experts_up: T,
    /// Routed experts' down projections.
    #[param(
        shape = [cfg.e(), cfg.expert_width, cfg.d_model],
        shard = 0,
        init = normal(0.02 / (2.0 * cfg.layers as f64).sqrt()),
    )]
    pub experts_down: T,
    /// Shared expert gate.
    #[param(shape = [cfg.d_model, cfg.shared_width], shard = 0)]
    pub shared_gate: T,
    /// Shared expert up projection.
    #[param(shape = [cfg.d_model, cfg.shared_width], shard = 0)]
    pub shared_up: T,
    /// Shared expert down projection.
    #[param(
        shape = [cfg.shared_width, cfg.d_model],
        shard = 0,
        init = normal(0.02 / (2.0 * cfg.layers as f64).sqrt()),
    )]
    pub shared_down: T,
    /// The shared expert's per-token sigmoid gate.
    #[param(shape = [cfg.d_model, 1], shard = 0)]
    pub shared_expert_gate: T,
}

impl Forward for Attention<Tensor> {
    fn forward(&self, c: &Qwen35Config, h: &Tensor) -> Result<Tensor> {
        let mixer = [
            &self.attn_norm,
            &self.wq,
            &self.wk,
            &self.wv,
            &self.q_norm,
            &self.k_norm,
            &self.wo,
        ]
        .map(Tensor::clone);
        let ffn = ffn_weights!(self);
        moe_ffn(c, &gated_attention(&c.attention, h, &mixer)?, &ffn)
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
    c.moe().router.validate()?;
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

/// Both configs' plans under `options`, for the `plan` binary: the tiny stack (2 blocks,
/// unrolled) and Qwen3.5-35B-A3B's (10 blocks: a block loop and the peeled last block), each
/// pass with its loop shapes.
pub fn describe_plans(options: stackscan::plan::PlanOptions) -> Result<String> {
    let mut out = String::new();
    for (name, stack) in [
        ("tiny", Qwen35Tiny::stack()?),
        ("Qwen3.5-35B-A3B", Qwen35Full::stack()?),
    ] {
        let plan = stackscan::plan::Plan::new(&stack, options)?;
        out.push_str(&format!(
            "qwen35 ({name}): {} layers, prefetch_fsdp_weights={}, defer_grad_reduce_scatter={}, unroll={}\n{}\n",
            stack.len(),
            options.prefetch_fsdp_weights,
            options.defer_grad_reduce_scatter,
            options.unroll,
            plan.describe(&stack)
        ));
    }
    Ok(out)
}
