//! A Qwen3.5-style hybrid decoder declared with the macros as nested, named modules: blocks
//! of three Gated DeltaNet layers and one gated attention layer (`block = [Gdn, Gdn, Gdn,
//! Attention]`), each layer a token mixer ([`GatedDeltaNet`] or [`GatedAttention`]) and a
//! mixture-of-experts FFN ([`GatedMoe`]) behind RMSNorms with residuals; the whole model, the
//! causal language model over that stack ([`CausalLm`]), adds the embedding, the final norm,
//! the LM head and the cross-entropy.
//!
//! The FFN of every layer is the mixture of experts of [`crate::moe`], as in the published
//! model: softmax top-k routing renormalised over the chosen experts, and one shared expert
//! that every token uses behind a per-token sigmoid gate.
//!
//! Parameters are named by where they sit: `embed`, `layers.GDN.mixer.wq`,
//! `layers.attention.moe.shared.w_up`, `final_norm` (`stackscan params qwen35` lists them).
//!
//! ```
//! use stackscan::LayerStack;
//! use stackscan_models::qwen35::{Qwen35Config, Qwen35Stack, model};
//!
//! let m = model::<Qwen35Stack>(&Qwen35Config::tiny())?;
//! assert_eq!(m.kinds.len(), 2);
//! assert!(m.weight_names().contains(&"layers.GDN.mixer.conv".to_string()));
//! // The depth is the config's; one the block pattern cannot hold is refused, naming it.
//! let e = model::<Qwen35Stack>(&Qwen35Config { layers: 6, ..Qwen35Config::tiny() }).unwrap_err();
//! assert!(e.to_string().starts_with("`Qwen35Config.layers` is 6, which is not a positive multiple of the block's 4 sub-layers"), "{e}");
//! # Ok::<(), stackscan::Error>(())
//! ```

mod architecture;
mod decode;
pub mod hf;

use serde::{Deserialize, Serialize};
use stackscan::fsdp::StackModel;
use stackscan::layer::{ActivationMarker, Forward};
use stackscan::model::stack_model;
use stackscan::plan::PlanOptions;
use stackscan::{Error, LayerStack, Result, SubLayer, Tensor, layer_stack, nn};

use crate::causal_lm::{CausalLm, LmConfig};
use crate::configs::ConfigFile;
use crate::gated_attention::{AttentionConfig, GatedAttention, GatedAttentionDims};
use crate::gdn_layer::{GatedDeltaNet, GdnConfig, GdnDims, GdnForm};
use crate::moe::{GatedMoe, MoeConfig, MoeDims, RouterConfig, RouterKind};

/// RMSNorm epsilon of the layers' pre-norms and the final norm (`rms_norm_eps`).
pub const NORM_EPS: f64 = 1e-6;

/// Sizes of the hybrid model, data (`models/configs/qwen35-*.toml`,
/// [`Qwen35Config::load`]): the model's own sizes, the `[gdn]` and `[attention]` tables of
/// the two mixers, and the MoE FFN's. A file's missing fields, in the tables too, are its
/// base preset's ([`crate::configs`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Qwen35Config {
    /// Vocabulary.
    pub vocab: i64,
    /// Model width.
    pub d_model: i64,
    /// Decoder layers (a multiple of the block's four; the stack's depth).
    pub layers: usize,
    /// Sequence length.
    pub seq: i64,
    /// Sequences per device.
    pub batch_per_device: i64,
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
    /// Coefficient of the router's load-balancing loss (`router_aux_loss_coef`, the Switch /
    /// Qwen-MoE loss; see [`crate::moe::layer`]); 0: off. It weights the mean of the layers'
    /// losses, as `transformers` weights one loss of every layer's routing: each layer's term
    /// is `router_aux_loss_coef / layers` times its own.
    pub router_aux_loss_coef: f64,
    /// The GDN layers' mixer.
    pub gdn: GdnConfig,
    /// The attention layers' mixer.
    pub attention: AttentionConfig,
    /// See [`DispatchOptions::direct_token_gather`](crate::moe::DispatchOptions).
    pub direct_token_gather: bool,
    /// See [`DispatchOptions::dlhs_transpose_rhs`](crate::moe::DispatchOptions).
    pub dlhs_transpose_rhs: bool,
    /// The expert-parallel mesh ([`Qwen35Config::with_expert_parallel`]); not a size, so no
    /// file sets it.
    #[serde(skip)]
    pub expert_mesh: crate::moe::ExpertMesh,
}

/// The router loss's coefficient where a config says none: `transformers`' default
/// `router_aux_loss_coef`.
pub const ROUTER_AUX_LOSS_COEF: f64 = 0.001;

impl Default for Qwen35Config {
    fn default() -> Self {
        Qwen35Config::tiny()
    }
}

impl Qwen35Config {
    /// A config kept in the repository by name (`tiny`, `qwen35-35b-a3b`), a TOML file or a
    /// Hugging Face `config.json` by path ([`crate::configs::load`]).
    pub fn load(name_or_path: &str) -> Result<Self> {
        crate::configs::load::<Self>(name_or_path)
    }

    /// The tiny config's structure (fewer key than value heads, one kv head, rotary on a
    /// quarter of each head, 16 experts top-4 and a gated shared expert) at sizes that compile
    /// the 24 step variants of the equivalence tests quickly: d 32, 8 layers, vocab 64, seq 8,
    /// experts of width 8, GDN in `form`. Capacity never drops a token.
    pub fn small(batch_per_device: i64, form: GdnForm) -> Qwen35Config {
        Qwen35Config {
            vocab: 64,
            d_model: 32,
            layers: 8,
            seq: 8,
            batch_per_device,
            experts: 16,
            top_k: 4,
            expert_width: 8,
            shared_width: 8,
            capacity_factor: 4.0,
            router_aux_loss_coef: ROUTER_AUX_LOSS_COEF,
            gdn: GdnConfig {
                key_heads: 2,
                value_heads: 4,
                key_dim: 8,
                value_dim: 8,
                conv_kernel: 4,
                form,
            },
            attention: AttentionConfig {
                heads: 4,
                kv_heads: 1,
                head_dim: 8,
                rotary_dim: 2,
                rope_theta: 10_000.0,
            },
            direct_token_gather: false,
            dlhs_transpose_rhs: false,
            expert_mesh: crate::moe::ExpertMesh::OFF,
        }
    }

    /// The tiny config of issue 12: d 128, 8 layers, attention 8 q / 1 kv heads of 32, GDN
    /// 4 key / 8 value heads of 32, conv 4, chunk 16, 16 experts top-4 of width 32 and a
    /// shared expert of 32, vocab 512, seq 64. Capacity 2 × a balanced load (64 slots per
    /// expert for the 128 tokens of a device): the main job may drop a token of an expert
    /// that more than half the tokens choose.
    /// Read from its preset file, `models/configs/qwen35-tiny.toml`.
    pub fn tiny() -> Self {
        crate::configs::built_in("tiny")
    }

    /// Qwen3.5-35B-A3B's published sizes (for plans and cost models; far too big to run here):
    /// d 2048, 40 layers, vocab 248 320, 256 experts top-8 of width 512 and a gated shared
    /// expert of 512; capacity 1.25 × a balanced load (our choice). Checked against the model
    /// arguments a public training framework publishes for the checkpoint (also 16 query / 2
    /// key-value heads of 256, rotary on a quarter of each, base 10⁷, GDN 16 key / 32 value
    /// heads of 128, conv 4, one attention layer in four).
    /// Read from its preset file, `models/configs/qwen35-35b-a3b.toml`.
    pub fn qwen35_35b_a3b() -> Self {
        crate::configs::built_in("qwen35-35b-a3b")
    }

    /// Output projections start smaller, `0.02 / √(2·layers)` (GPT-2's residual scaling).
    pub fn out_std(&self) -> f64 {
        0.02 / (2.0 * self.layers as f64).sqrt()
    }

    /// What [`GatedDeltaNet`] reads.
    pub fn gdn_dims(&self) -> GdnDims {
        GdnDims::new(self.d_model, self.layers, self.gdn)
    }

    /// What [`GatedAttention`] reads.
    pub fn attention_dims(&self) -> GatedAttentionDims {
        GatedAttentionDims::new(self.d_model, self.layers, self.attention)
    }

    /// What [`GatedMoe`] reads.
    pub fn moe_dims(&self) -> MoeDims {
        MoeDims {
            d_model: self.d_model,
            expert_width: self.expert_width,
            shared_width: self.shared_width,
            out_std: self.out_std(),
            layer: self.moe(),
        }
    }

    /// This config with its routed experts split over an `fsdp × expert` mesh of `devices`
    /// devices, `ep` along `expert` (`ep` must divide the devices, and the experts `ep`): each
    /// expert rank keeps its experts, gathered over `fsdp` only, and tokens travel to them by
    /// `all_to_all` over `expert`, as DeepSeek-V3's do.
    pub fn with_expert_parallel(self, devices: usize, ep: usize) -> Result<Self> {
        Ok(Qwen35Config {
            expert_mesh: crate::moe::ExpertMesh::new(devices, ep, self.experts)?,
            ..self
        })
    }

    /// The MoE's routing and dispatch: softmax top-k renormalised, a gated shared expert.
    pub const fn moe(&self) -> MoeConfig {
        MoeConfig {
            router: RouterConfig {
                experts: self.experts,
                top_k: self.top_k,
                kind: RouterKind::Softmax,
            },
            capacity_factor: self.capacity_factor,
            bias_update_speed: 0.0,
            // `transformers` pools every layer's router statistics into one loss weighted by
            // the coefficient: each layer's term carries its share.
            aux_loss_coef: self.router_aux_loss_coef / self.layers as f64,
            direct_token_gather: self.direct_token_gather,
            dlhs_transpose_rhs: self.dlhs_transpose_rhs,
            expert_mesh: self.expert_mesh,
            gated_shared: true,
        }
    }

    /// Checks what the shapes alone do not: the head splits, an even rotary width, the
    /// routing; each error names the config field at fault.
    pub fn check(&self) -> Result<()> {
        let invalid = |message: String| Error::InvalidOp {
            op: "qwen35",
            message,
        };
        let (a, g) = (&self.attention, &self.gdn);
        if a.kv_heads <= 0 || a.heads % a.kv_heads != 0 {
            return Err(invalid(format!(
                "`attention.heads` ({}) must be a multiple of `attention.kv_heads` ({})",
                a.heads, a.kv_heads
            )));
        }
        if a.rotary_dim < 0 || a.rotary_dim % 2 != 0 || a.rotary_dim > a.head_dim {
            return Err(invalid(format!(
                "`attention.rotary_dim` ({}) must be even and at most `attention.head_dim` ({})",
                a.rotary_dim, a.head_dim
            )));
        }
        if g.key_heads <= 0 || g.value_heads % g.key_heads != 0 {
            return Err(invalid(format!(
                "`gdn.value_heads` ({}) must be a multiple of `gdn.key_heads` ({})",
                g.value_heads, g.key_heads
            )));
        }
        crate::moe::check_capacity_factor("capacity_factor", self.capacity_factor)?;
        if !(self.router_aux_loss_coef.is_finite() && self.router_aux_loss_coef >= 0.0) {
            return Err(invalid(format!(
                "`router_aux_loss_coef` is {}; expected a finite number >= 0 (0: off)",
                self.router_aux_loss_coef
            )));
        }
        self.moe().router.validate()
    }
}

/// The residual stream `[batch, seq, d_model]`.
#[derive(Debug)]
pub enum Residual {}

impl ActivationMarker for Residual {}

/// Both layer kinds around their mixer: `h + mixer(RMSNorm(h))`, then `h + moe(RMSNorm(h))`.
fn pre_norm_layer(
    c: &Qwen35Config,
    h: &Tensor,
    (mixer_norm, mixer): (&Tensor, impl FnOnce(&Tensor) -> Result<Tensor>),
    ffn_norm: &Tensor,
    moe: &GatedMoe<Tensor>,
) -> Result<Tensor> {
    let h = h.add(&mixer(&nn::rms_norm(h, mixer_norm, NORM_EPS)?)?)?;
    let y = nn::rms_norm(&h, ffn_norm, NORM_EPS)?;
    h.add(&moe.forward(&c.moe_dims(), &y)?)
}

/// A GDN layer: the Gated DeltaNet mixer, then the MoE FFN, each behind an RMSNorm with a
/// residual.
#[derive(Debug, SubLayer)]
#[sublayer(config = Qwen35Config, carry = Residual, name = "GDN")]
pub struct Gdn<T> {
    /// RMSNorm scale before the mixer, `[d]`.
    #[param(shape = [cfg.d_model], replicated)]
    pub mixer_norm: T,
    /// The token mixer.
    #[module(config = cfg.gdn_dims())]
    pub mixer: GatedDeltaNet<T>,
    /// RMSNorm scale before the FFN, `[d]`.
    #[param(shape = [cfg.d_model], replicated)]
    pub ffn_norm: T,
    /// The FFN.
    #[module(config = cfg.moe_dims())]
    pub moe: GatedMoe<T>,
}

impl Forward for Gdn<Tensor> {
    fn forward(&self, c: &Qwen35Config, h: &Tensor) -> Result<Tensor> {
        let mixed = |x: &Tensor| self.mixer.forward(&c.gdn_dims(), x);
        pre_norm_layer(c, h, (&self.mixer_norm, mixed), &self.ffn_norm, &self.moe)
    }
}

/// A gated attention layer: the attention mixer, then the MoE FFN, each behind an RMSNorm
/// with a residual.
#[derive(Debug, SubLayer)]
#[sublayer(config = Qwen35Config, carry = Residual, name = "attention")]
pub struct Attention<T> {
    /// RMSNorm scale before the mixer, `[d]`.
    #[param(shape = [cfg.d_model], replicated)]
    pub mixer_norm: T,
    /// The token mixer.
    #[module(config = cfg.attention_dims())]
    pub mixer: GatedAttention<T>,
    /// RMSNorm scale before the FFN, `[d]`.
    #[param(shape = [cfg.d_model], replicated)]
    pub ffn_norm: T,
    /// The FFN.
    #[module(config = cfg.moe_dims())]
    pub moe: GatedMoe<T>,
}

impl Forward for Attention<Tensor> {
    fn forward(&self, c: &Qwen35Config, h: &Tensor) -> Result<Tensor> {
        let mixed = |x: &Tensor| self.mixer.forward(&c.attention_dims(), x);
        pre_norm_layer(c, h, (&self.mixer_norm, mixed), &self.ffn_norm, &self.moe)
    }
}

/// Qwen3.5's stack: blocks of `[GDN, GDN, GDN, attention]`, as many as the config's depth
/// holds (2 in the tiny config, 10 in Qwen3.5-35B-A3B's).
#[layer_stack(
    block = [Gdn, Gdn, Gdn, Attention],
    layers = cfg.layers,
    prefetch_fsdp_weights,
    defer_grad_reduce_scatter,
)]
#[derive(Debug)]
pub struct Qwen35Stack;

/// The tiny config with the attention layer first in each block, which MaxText's scan
/// cannot express and ours must.
#[layer_stack(
    block = [Attention, Gdn, Gdn, Gdn],
    layers = cfg.layers,
    prefetch_fsdp_weights,
    defer_grad_reduce_scatter,
)]
#[derive(Debug)]
pub struct Qwen35AttentionFirst;

/// The Qwen3.5 configs kept in the repository, by the name `--config` takes.
const PRESETS: [(&str, &str); 2] = [
    ("tiny", include_str!("../../configs/qwen35-tiny.toml")),
    (
        "qwen35-35b-a3b",
        include_str!("../../configs/qwen35-35b-a3b.toml"),
    ),
];

impl ConfigFile for Qwen35Config {
    const MODEL: &'static str = "qwen35";
    const PRESETS: &'static [(&'static str, &'static str)] = &PRESETS;
    const TABLES: &'static [&'static str] = &["gdn", "attention"];
    const HF_MODEL_TYPES: &'static [&'static str] = &["qwen3_5_moe", "qwen3_5_moe_text"];
    const HF_CLASSES: &'static [&'static str] = &[
        "Qwen3_5MoeForConditionalGeneration",
        "Qwen3_5MoeForCausalLM",
    ];
    const HF_KEYS: &'static [(&'static str, crate::hf_config::keys::HfKey)] = hf::KEYS;

    fn from_hf(text: &str) -> Result<Self> {
        crate::hf_config::parse_as(text, hf::read)
    }
}

/// Qwen3.5 is the causal language model ([`CausalLm`]) over its hybrid stack
/// ([`Qwen35Stack`], [`Qwen35AttentionFirst`]).
impl LmConfig for Qwen35Config {
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
        self.seq
    }
    fn norm_eps(&self) -> f64 {
        NORM_EPS
    }
    fn check<S: LayerStack<Config = Self>>(&self) -> Result<()> {
        Qwen35Config::check(self)
    }
}

/// The run-time model of [`CausalLm`] with stack `S`: tokens and next-token labels
/// `[batch_per_device, seq]` per device. Fails with a typed error when the config's depth is
/// not the stack's, naming `Qwen35Config.layers`.
pub fn model<S: LayerStack<Config = Qwen35Config> + 'static>(
    c: &Qwen35Config,
) -> Result<StackModel> {
    declared::<S>(c).map(|(m, _)| m)
}

/// [`model`] with the options of `S`'s `#[layer_stack]` attribute.
pub fn declared<S: LayerStack<Config = Qwen35Config> + 'static>(
    c: &Qwen35Config,
) -> Result<(StackModel, PlanOptions)> {
    let (mut m, options) = stack_model::<CausalLm<Tensor, S>>(c)?;
    if c.expert_mesh.is_parallel() {
        // Each expert rank keeps its own experts: their banks are gathered over `fsdp` only.
        let fsdp = c.expert_mesh.fsdp_axis();
        let mut found = 0;
        for p in m.kinds.iter_mut().flat_map(|k| k.params.iter_mut()) {
            if p.name.starts_with(EXPERT_BANKS) {
                *p = p.clone().gathered_over(fsdp.clone());
                found += 1;
            }
        }
        if found == 0 {
            return Err(Error::InvalidOp {
                op: "qwen35",
                message: format!("expert parallelism found no expert banks `{EXPERT_BANKS}*`"),
            });
        }
    }
    Ok((m, options))
}

/// The prefix, inside a layer, of the parameters stacked over experts (`[E, …]`): the
/// [`GatedMoe`]'s `experts` module.
pub const EXPERT_BANKS: &str = "moe.experts.";

/// Synthetic next-token data as in [`llama::synthetic_batch`](crate::llama::synthetic_batch):
/// `(tokens, labels)` for `rows` sequences of the config's length.
pub fn synthetic_batch(c: &Qwen35Config, rows: i64, seed: u64) -> (Vec<i32>, Vec<i32>) {
    crate::llama::synthetic_tokens(c.vocab, c.seq, rows, seed)
}

/// Both configs' plans under `options`, for the `plan` binary: the tiny stack (2 blocks,
/// unrolled) and Qwen3.5-35B-A3B's (10 blocks: a block loop and the peeled last block), each
/// pass with its loop shapes.
pub fn describe_plans(options: PlanOptions) -> Result<String> {
    let mut out = String::new();
    for (name, stack) in [
        ("tiny", Qwen35Stack::stack(&Qwen35Config::tiny())?),
        (
            "Qwen3.5-35B-A3B",
            Qwen35Stack::stack(&Qwen35Config::qwen35_35b_a3b())?,
        ),
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

/// Parameters a token activates in `m` (the declared model of `c`): every parameter except
/// the routed experts its router does not choose, i.e. the stacked `moe.experts.*` banks
/// count `top_k / experts` of their size.
pub fn active_parameters(c: &Qwen35Config, m: &StackModel) -> u64 {
    m.parameters()
        .iter()
        .map(|p| {
            let size = p.copies as u64 * p.spec.shape.iter().product::<i64>() as u64;
            if p.path.contains(".moe.experts.") {
                size * c.top_k as u64 / c.experts.max(1) as u64
            } else {
                size
            }
        })
        .sum()
}
