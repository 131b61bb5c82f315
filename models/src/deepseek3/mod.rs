//! A DeepSeek-V3-style decoder declared as nested modules: a prefix of dense-FFN layers
//! ([`Dense`], kind `D`: MLA and a SwiGLU), then MoE layers ([`MoeLayer`], kind `M`: MLA and
//! the [`Moe`] FFN); the whole model is the causal language model over that stack
//! ([`CausalLm`]: embedding, the stack, final norm, LM head and cross-entropy). [`DeepSeek3Config::tiny`] is the test and training config;
//! [`DeepSeek3Config::deepseek3`] the published model's, for plans and cost models; both are
//! data too (`models/configs/deepseek3-tiny.toml`, `deepseek3.toml`, [`DeepSeek3Config::load`]).
//!
//! ```
//! use stackscan::LayerStack;
//! use stackscan_models::deepseek3::{DeepSeek3Config, DeepSeek3Stack, model};
//!
//! assert_eq!(
//!     DeepSeek3Stack::plan_notation(&DeepSeek3Config::tiny())?.0,
//!     "[D0, D1] → [D2] → [M3 … M6] → [M7]"
//! );
//! assert_eq!(
//!     DeepSeek3Stack::plan_notation(&DeepSeek3Config::deepseek3())?.0,
//!     "[D0, D1] → [D2] → [M3 … M59] → [M60]"
//! );
//! let m = model::<DeepSeek3Stack>(&DeepSeek3Config::tiny())?;
//! assert_eq!(m.stack.len(), 8);
//! let names: Vec<String> = m.parameters().into_iter().map(|p| p.path).collect();
//! assert!(names.contains(&"layers.D.attn.q_down".to_owned()));
//! assert!(names.contains(&"layers.M.moe.experts.gate".to_owned()));
//! assert!(names.contains(&"layers.M.moe.shared.w_up".to_owned()));
//! # Ok::<(), stackscan::Error>(())
//! ```
//!
//! Each router has its selection bias (`moe.router_bias`), moved by DeepSeek-V3's
//! auxiliary-loss-free rule at `bias_update_speed` ([`crate::moe::layer`]; [`declared`] gives
//! it the sign-descent update), and an optional sequence-wise balancing loss
//! (`aux_loss_alpha`). Capacity-padded dispatch drops a token only beyond `capacity_factor`;
//! with `capacity_factor = 0` ([`crate::moe::NO_DROP`]) or `≥ experts / top_k` nothing is
//! ever dropped, so a sharded step routes exactly as the unsharded reference does (the
//! equivalence tests' [`DeepSeek3Config::small`]).

mod architecture;
mod decode;
pub mod hf;

use serde::{Deserialize, Serialize};
use stackscan::fsdp::{StackModel, Update};
use stackscan::layer::{ActivationMarker, Forward};
use stackscan::model::stack_model;
use stackscan::module::join;
use stackscan::plan::PlanOptions;
use stackscan::{Error, LayerStack, Module, Result, SubLayer, Tensor, layer_stack, nn};

use crate::causal_lm::{CausalLm, LmConfig};
use crate::configs::ConfigFile;
use crate::llama::{MlpDims, SwiGlu};
use crate::mla::{Mla, MlaConfig};
use crate::moe::{ExpertMesh, Experts, Moe, MoeConfig, MoeDims, RouterConfig, RouterKind};

/// Sizes of a DeepSeek-V3-style model; data (`models/configs/deepseek3*.toml`,
/// [`DeepSeek3Config::load`]; a file's missing fields are its base preset's). The
/// names follow the published `config.json` where one exists (`n_group` → `groups`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeepSeek3Config {
    /// Vocabulary.
    pub vocab: i64,
    /// Model width.
    pub d: i64,
    /// All layers, dense prefix included.
    pub layers: usize,
    /// Leading dense-FFN layers.
    pub dense_layers: usize,
    /// Attention (`mla.d` must be `d`).
    pub mla: MlaConfig,
    /// Hidden width of the dense layers' FFN.
    pub dense_ffn: i64,
    /// Routed experts.
    pub experts: usize,
    /// Experts per token.
    pub top_k: usize,
    /// Expert groups (`n_group`).
    pub groups: usize,
    /// Groups a token may use (`topk_group`).
    pub top_groups: usize,
    /// One expert's hidden width (`moe_intermediate_size`).
    pub expert_width: i64,
    /// Shared experts, fused into one FFN of `shared_experts · expert_width`.
    pub shared_experts: i64,
    /// `routed_scaling_factor`.
    pub scaling: f64,
    /// Expert capacity over a balanced load; 0 ([`crate::moe::NO_DROP`]): every token reaches
    /// every expert it chooses.
    pub capacity_factor: f64,
    /// γ, the selection bias's step per update (auxiliary-loss-free balancing); 0: off.
    pub bias_update_speed: f64,
    /// α of the sequence-wise balancing loss (`aux_loss_alpha`); 0: off.
    pub aux_loss_alpha: f64,
    /// See [`DispatchOptions::direct_token_gather`](crate::moe::DispatchOptions).
    pub direct_token_gather: bool,
    /// See [`DispatchOptions::dlhs_transpose_rhs`](crate::moe::DispatchOptions).
    pub dlhs_transpose_rhs: bool,
    /// Sequence length.
    pub seq: i64,
    /// Sequences per device.
    pub batch_per_device: i64,
    /// Whether the Hugging Face checkpoint stores each head's rotary query and key columns
    /// interleaved (`rope_interleave` of its `config.json`, the published layout; true by
    /// default), which import de-interleaves and export interleaves again; false for a
    /// checkpoint whose columns already rotate halves, as ours do. The model computes the
    /// same either way.
    #[serde(default = "interleaved", skip_serializing_if = "is_interleaved")]
    pub rope_interleave: bool,
    /// The expert-parallel mesh the model runs on ([`ExpertMesh::OFF`]: plain FSDP). A run
    /// setting rather than a size (`--ep`, never read from a file), but the layers' forward
    /// sees only the config.
    #[serde(skip)]
    pub expert_mesh: ExpertMesh,
    /// Devices each sequence is split over (context parallelism, `--cp`; never read from a
    /// file). MLA gathers the compressed keys and values of the other pieces.
    #[serde(skip, default = "crate::llama::one")]
    pub context: usize,
}

impl Default for DeepSeek3Config {
    fn default() -> Self {
        DeepSeek3Config::tiny()
    }
}

/// [`DeepSeek3Config::rope_interleave`]'s default: the published checkpoints' layout.
fn interleaved() -> bool {
    true
}

/// Whether `rope_interleave` is its default, which a written config leaves out.
fn is_interleaved(interleave: &bool) -> bool {
    *interleave
}

impl DeepSeek3Config {
    /// The tiny config: d 128, 3 dense + 5 MoE layers, 16 experts top-4 in 4 groups (top 2),
    /// one shared expert, expert width 64, vocab 512, seq 64; what the main job trains. Its
    /// capacity is a real one, 1.25 × a balanced load (20 slots per expert for a device's 64
    /// tokens), as the published model is priced: the experts compute 1.25 × what the routed
    /// tokens need, and a token beyond an expert's 20 is dropped (it keeps its residual and
    /// the shared expert). Tests that compare against an unsharded run use
    /// [`DeepSeek3Config::small`], whose capacity drops nothing.
    /// Read from its preset file, `models/configs/deepseek3-tiny.toml`.
    pub fn tiny() -> Self {
        crate::configs::built_in("tiny")
    }

    /// A small config for equivalence tests: every sharded dimension divisible by 8, 8
    /// experts top-2 in 4 groups (top 2 groups), sequences of 8 tokens, capacity that never
    /// drops a token; `layers` in all, the first `dense_layers` dense.
    pub const fn small(layers: usize, dense_layers: usize, batch_per_device: i64) -> Self {
        DeepSeek3Config {
            vocab: 64,
            d: 32,
            layers,
            dense_layers,
            mla: MlaConfig {
                d: 32,
                heads: 2,
                q_lora: 16,
                kv_lora: 16,
                nope: 8,
                rope: 4,
                v: 8,
                rope_theta: 10_000.0,
                eps: 1e-6,
                rope_scaling: None,
                attention_block: None,
                context: 1,
            },
            dense_ffn: 32,
            experts: 8,
            top_k: 2,
            groups: 4,
            top_groups: 2,
            expert_width: 16,
            shared_experts: 1,
            scaling: 2.5,
            capacity_factor: 8.0,
            bias_update_speed: 0.001,
            aux_loss_alpha: 0.01,
            direct_token_gather: false,
            dlhs_transpose_rhs: false,
            seq: 8,
            batch_per_device,
            rope_interleave: true,
            expert_mesh: ExpertMesh::OFF,
            context: 1,
        }
    }

    /// DeepSeek-V3 (671B) as published.
    /// Read from its preset file, `models/configs/deepseek3.toml`.
    pub fn deepseek3() -> Self {
        crate::configs::built_in("deepseek3")
    }

    /// A config kept in the repository by name (`tiny`, `deepseek3`), a TOML file or a
    /// Hugging Face `config.json` by path ([`crate::configs::load`]).
    pub fn load(name_or_path: &str) -> Result<Self> {
        crate::configs::load::<Self>(name_or_path)
    }

    /// Checks what the shapes cannot: MLA's width is the model's, the router can pick its
    /// experts, the dense prefix fits, the widths are positive. Errors name the field.
    pub fn validate(&self) -> Result<()> {
        let invalid = |message: String| {
            Err(Error::InvalidOp {
                op: "deepseek3",
                message,
            })
        };
        if self.mla.d != self.d {
            return invalid(format!(
                "`DeepSeek3Config.mla.d` is {} but `d` is {}: attention reads the model's width",
                self.mla.d, self.d
            ));
        }
        if let Some(block) = self.mla.attention_block
            && (block <= 0 || self.seq % block != 0)
        {
            return invalid(format!(
                "`DeepSeek3Config.mla.attention_block` {block} must be a positive divisor of \
                 `seq` {}",
                self.seq
            ));
        }
        if self.dense_layers > self.layers {
            return invalid(format!(
                "`DeepSeek3Config.dense_layers` is {}, more than the {} layers",
                self.dense_layers, self.layers
            ));
        }
        for (field, value) in [
            ("d", self.d),
            ("vocab", self.vocab),
            ("dense_ffn", self.dense_ffn),
            ("expert_width", self.expert_width),
            ("shared_experts", self.shared_experts),
            ("seq", self.seq),
            ("batch_per_device", self.batch_per_device),
        ] {
            if value <= 0 {
                return invalid(format!(
                    "`DeepSeek3Config.{field}` is {value}; expected at least 1"
                ));
            }
        }
        crate::moe::check_capacity_factor("DeepSeek3Config.capacity_factor", self.capacity_factor)?;
        for (field, value) in [
            ("bias_update_speed", self.bias_update_speed),
            ("aux_loss_alpha", self.aux_loss_alpha),
        ] {
            if !(value.is_finite() && value >= 0.0) {
                return invalid(format!(
                    "`DeepSeek3Config.{field}` is {value}; expected a finite number >= 0 (0: off)"
                ));
            }
        }
        self.moe().layer.router.validate()
    }

    /// What the attention module ([`Mla`]) reads.
    pub const fn mla(&self) -> MlaConfig {
        MlaConfig {
            context: self.context,
            ..self.mla
        }
    }

    /// Positions of each sequence on one device: `seq / context`.
    pub const fn seq_per_device(&self) -> i64 {
        self.seq / self.context as i64
    }

    /// The same model with each sequence split over `cp` devices and `ep` expert ranks of
    /// `devices` (checked: `cp` divides the sequence, `cp · ep` the devices, the devices the
    /// experts); the mesh is `fsdp × context`, or `fsdp × context × expert` with `ep > 1`.
    pub fn with_context_parallel(self, devices: usize, cp: usize, ep: usize) -> Result<Self> {
        crate::llama::context_split(self.seq, devices, cp)?;
        // Without expert parallelism the mesh still records the context split: the MoE
        // layer's sequence-wise balance loss sums each sequence over its pieces.
        let expert_mesh = if ep > 1 {
            ExpertMesh::new(devices, ep, self.experts)?.with_context(cp)?
        } else {
            ExpertMesh {
                fsdp: devices / cp,
                expert: 1,
                context: cp,
            }
        };
        Ok(DeepSeek3Config {
            expert_mesh,
            context: cp,
            ..self
        })
    }

    /// The mesh of this config's layout: `fsdp × context` of `devices`, or the expert mesh's.
    pub fn context_mesh(&self, devices: usize) -> Result<stackscan::Mesh> {
        if self.expert_mesh.is_parallel() {
            return self.expert_mesh.mesh();
        }
        crate::llama::context_mesh(devices, self.context, 1)
    }

    /// What the dense layers' FFN ([`SwiGlu`]) reads.
    pub const fn dense_mlp(&self) -> MlpDims {
        MlpDims {
            d_model: self.d,
            ffn: self.dense_ffn,
            out_std: INIT_STD,
        }
    }

    /// What the MoE FFN ([`Moe`]) reads: DeepSeek-V3's sigmoid group-limited router and one
    /// ungated shared SwiGLU of `shared_experts · expert_width`.
    pub const fn moe(&self) -> MoeDims {
        MoeDims {
            d_model: self.d,
            expert_width: self.expert_width,
            shared_width: self.shared_width(),
            out_std: INIT_STD,
            layer: MoeConfig {
                router: RouterConfig {
                    experts: self.experts,
                    top_k: self.top_k,
                    kind: RouterKind::SigmoidGrouped {
                        groups: self.groups,
                        top_groups: self.top_groups,
                        scaling: self.scaling,
                    },
                },
                capacity_factor: self.capacity_factor,
                bias_update_speed: self.bias_update_speed,
                aux_loss_coef: self.aux_loss_alpha,
                direct_token_gather: self.direct_token_gather,
                dlhs_transpose_rhs: self.dlhs_transpose_rhs,
                gated_shared: false,
                expert_mesh: self.expert_mesh,
            },
        }
    }

    /// `experts` as a dimension.
    pub const fn e(&self) -> i64 {
        self.experts as i64
    }

    /// The same model with expert parallelism `ep` over `devices` (checked: `ep` divides the
    /// devices, the devices divide the experts); `ep = 1` is plain FSDP.
    pub fn with_expert_parallel(self, devices: usize, ep: usize) -> Result<Self> {
        Ok(DeepSeek3Config {
            expert_mesh: ExpertMesh::new(devices, ep, self.experts)?,
            ..self
        })
    }

    /// Shared experts' fused width.
    pub const fn shared_width(&self) -> i64 {
        self.shared_experts * self.expert_width
    }
}

/// Every layer weight's initialiser: `normal(0.02)`, output projections included. The
/// embedding's is `normal(1)` (see [`DeepSeek3::embed`]).
const INIT_STD: f64 = 0.02;

/// RMSNorm epsilon of every norm: the layers', the final one and MLA's latent norms
/// (`rms_norm_eps` of the published config, and RMSNorm's default there).
pub const NORM_EPS: f64 = 1e-6;

/// The residual stream `[batch, seq, d]`.
#[derive(Debug)]
pub enum Residual {}

impl ActivationMarker for Residual {}

/// A dense layer: MLA and a SwiGLU FFN, each behind an RMSNorm, with residuals. Its
/// parameters are `attn_norm`, `attn.q_down` … `attn.out`, `ffn_norm`, `mlp.w_gate` …
/// `mlp.w_down`.
#[derive(Debug, SubLayer)]
#[sublayer(config = DeepSeek3Config, carry = Residual, name = "D")]
pub struct Dense<T> {
    /// RMSNorm before attention.
    #[param(shape = [cfg.d], replicated)]
    pub attn_norm: T,
    /// Multi-head latent attention.
    #[module(config = cfg.mla())]
    pub attn: Mla<T>,
    /// RMSNorm before the FFN.
    #[param(shape = [cfg.d], replicated)]
    pub ffn_norm: T,
    /// The dense FFN.
    #[module(config = cfg.dense_mlp())]
    pub mlp: SwiGlu<T>,
}

impl Forward for Dense<Tensor> {
    fn forward(&self, c: &DeepSeek3Config, h: &Tensor) -> Result<Tensor> {
        let x = nn::rms_norm(h, &self.attn_norm, NORM_EPS)?;
        let h = h.add(&self.attn.forward(&c.mla(), &x)?)?;
        let y = nn::rms_norm(&h, &self.ffn_norm, NORM_EPS)?;
        h.add(&self.mlp.forward(&y)?)
    }
}

/// An MoE layer: MLA, then the MoE FFN (routed experts stacked `[E, …]` and sharded over `E`,
/// and a shared expert), each behind an RMSNorm, with residuals. Its parameters are
/// `attn_norm`, `attn.*`, `ffn_norm`, `moe.router`, `moe.experts.{gate,up,down}`,
/// `moe.shared.{w_gate,w_up,w_down}`.
#[derive(Debug, SubLayer)]
#[sublayer(config = DeepSeek3Config, carry = Residual, name = "M")]
pub struct MoeLayer<T> {
    /// RMSNorm before attention.
    #[param(shape = [cfg.d], replicated)]
    pub attn_norm: T,
    /// Multi-head latent attention.
    #[module(config = cfg.mla())]
    pub attn: Mla<T>,
    /// RMSNorm before the MoE.
    #[param(shape = [cfg.d], replicated)]
    pub ffn_norm: T,
    /// The mixture of experts.
    #[module(config = cfg.moe())]
    pub moe: Moe<T>,
}

impl Forward for MoeLayer<Tensor> {
    fn forward(&self, c: &DeepSeek3Config, h: &Tensor) -> Result<Tensor> {
        let x = nn::rms_norm(h, &self.attn_norm, NORM_EPS)?;
        let h = h.add(&self.attn.forward(&c.mla(), &x)?)?;
        let y = nn::rms_norm(&h, &self.ffn_norm, NORM_EPS)?;
        h.add(&self.moe.forward(&c.moe(), &y)?)
    }
}

/// DeepSeek-V3's stack: 3 dense layers, then MoE layers, as deep as the config says (8 in
/// the tiny config, 61 in the published one; checked once, when the model is built).
#[layer_stack(
    prefix = [Dense, Dense, Dense],
    block = [MoeLayer],
    layers = cfg.layers,
    prefetch_fsdp_weights,
    defer_grad_reduce_scatter,
)]
#[derive(Debug)]
pub struct DeepSeek3Stack;

/// The DeepSeek-V3 configs kept in the repository, by the name `--config` takes.
const PRESETS: [(&str, &str); 2] = [
    ("tiny", include_str!("../../configs/deepseek3-tiny.toml")),
    ("deepseek3", include_str!("../../configs/deepseek3.toml")),
];

impl ConfigFile for DeepSeek3Config {
    const MODEL: &'static str = "deepseek3";
    const PRESETS: &'static [(&'static str, &'static str)] = &PRESETS;
    const TABLES: &'static [&'static str] = &["mla"];
    const HF_MODEL_TYPES: &'static [&'static str] = &["deepseek_v3"];
    const HF_CLASSES: &'static [&'static str] = &["DeepseekV3ForCausalLM"];
    const HF_KEYS: &'static [(&'static str, crate::hf_config::keys::HfKey)] = hf::KEYS;

    fn from_hf(text: &str) -> Result<Self> {
        crate::hf_config::parse_as(text, hf::read)
    }
}

/// DeepSeek-V3 is the causal language model ([`CausalLm`]) over [`DeepSeek3Stack`]: its dense
/// prefix, then MoE layers.
impl LmConfig for DeepSeek3Config {
    fn vocab(&self) -> i64 {
        self.vocab
    }
    fn d_model(&self) -> i64 {
        self.d
    }
    fn batch_per_device(&self) -> i64 {
        self.batch_per_device
    }
    fn seq_per_device(&self) -> i64 {
        DeepSeek3Config::seq_per_device(self)
    }
    fn norm_eps(&self) -> f64 {
        NORM_EPS
    }
    /// The embedding starts at `normal(1)`, not the layers' `normal(0.02)`: at 0.02 the
    /// residual stream of a small model is dominated by the attention's averages over each
    /// sequence's prefix, so the routers see nearly one input per sequence and route a
    /// sequence's tokens as a herd. On the tiny preset (4 devices, one sequence each, capacity
    /// 1.25), at 0.02 a large share of the assignments is dropped, from the first step on and
    /// more over a run; at 1 only a small share, and the loss after 200 steps is far lower.
    /// The first RMSNorm makes the scale no larger downstream.
    fn embed_std(&self) -> f64 {
        1.0
    }
    /// The config's own checks, and its `dense_layers` against the stack's dense prefix.
    fn check<S: LayerStack<Config = Self>>(&self) -> Result<()> {
        self.validate()?;
        let prefix = S::stack(self)?.prefix_len();
        if self.dense_layers != prefix {
            return Err(Error::InvalidOp {
                op: "deepseek3",
                message: format!(
                    "`DeepSeek3Config.dense_layers` is {}, but the stack `{}` declares a dense prefix of {prefix}",
                    self.dense_layers,
                    core::any::type_name::<S>()
                        .rsplit("::")
                        .next()
                        .unwrap_or_default()
                ),
            });
        }
        Ok(())
    }
}

/// The declared model with stack `S` lowered to the run-time model, with the options of the
/// stack's attribute. Under expert parallelism the expert banks are gathered over `fsdp`
/// only, so each `expert` rank keeps its own experts.
pub fn declared<S: LayerStack<Config = DeepSeek3Config>>(
    c: &DeepSeek3Config,
) -> Result<(StackModel, PlanOptions)> {
    let (mut m, options) = stack_model::<CausalLm<Tensor, S>>(c)?;
    // The selection bias moves by the balancing rule's sign steps, never by Adam.
    let rule = Update::SignDescent {
        rate: c.bias_update_speed,
    };
    for p in m.kinds.iter_mut().flat_map(|k| k.params.iter_mut()) {
        if p.name == ROUTER_BIAS {
            p.update = rule;
        }
    }
    if c.expert_mesh.is_parallel() {
        let fsdp = c.expert_mesh.fsdp_axis();
        let banks = expert_banks(c);
        let mut found = 0;
        for p in m.kinds.iter_mut().flat_map(|k| k.params.iter_mut()) {
            if banks.contains(&p.name) {
                *p = p.clone().gathered_over(fsdp.clone());
                found += 1;
            }
        }
        // Each MoE kind has every bank; a renamed one would silently be gathered whole.
        let moe_kinds = m.kinds.len() - usize::from(c.dense_layers > 0);
        if found != banks.len() * moe_kinds {
            return Err(Error::InvalidOp {
                op: "deepseek3",
                message: format!(
                    "expert parallelism found {found} of the expert banks {banks:?} in {moe_kinds} MoE kind(s)"
                ),
            });
        }
    }
    Ok((m, options))
}

/// The declared model with stack `S`, as the run-time API's [`StackModel`].
pub fn model<S: LayerStack<Config = DeepSeek3Config>>(c: &DeepSeek3Config) -> Result<StackModel> {
    Ok(declared::<S>(c)?.0)
}

/// The name, inside an MoE layer, of the router's selection bias.
pub const ROUTER_BIAS: &str = "moe.router_bias";

/// The names, inside an MoE layer, of its parameters stacked over experts (`[E, …]`):
/// the [`Experts`] module's, under the fields `moe.experts`.
pub fn expert_banks(c: &DeepSeek3Config) -> Vec<String> {
    <Experts<Tensor> as Module>::param_specs(&c.moe().experts())
        .into_iter()
        .map(|p| join("moe.experts", &p.name))
        .collect()
}

/// The Llama example's synthetic sequences ([`crate::llama::synthetic_batch`]) at this
/// config's vocabulary and sequence length: `(tokens, labels)` for `rows` rows.
pub fn synthetic_batch(c: &DeepSeek3Config, rows: i64, seed: u64) -> (Vec<i32>, Vec<i32>) {
    let shape = crate::llama::LlamaConfig {
        vocab: c.vocab,
        seq: c.seq,
        ..crate::llama::LlamaConfig::tiny()
    };
    crate::llama::synthetic_batch(&shape, rows, seed)
}
