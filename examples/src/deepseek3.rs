//! A DeepSeek-V3-style decoder declared with the macros: a prefix of dense-FFN layers (`D`),
//! then MoE layers (`M`), every layer with MLA attention; embedding, final norm, LM head and
//! cross-entropy outside the stack. [`DeepSeek3Config::tiny`] is the test and training
//! config; [`DeepSeek3Config::deepseek3`] the published model's, for plans and cost models.
//!
//! ```
//! use stackscan::LayerStack;
//! use stackscan_examples::deepseek3::{DeepSeek3, DeepSeek3Config, TinyDeepSeek3, model};
//!
//! assert_eq!(
//!     TinyDeepSeek3::plan_notation()?.0,
//!     "[D0, D1] → [D2] → [M3 … M6] → [M7]"
//! );
//! assert_eq!(
//!     DeepSeek3::plan_notation()?.0,
//!     "[D0, D1] → [D2] → [M3 … M59] → [M60]"
//! );
//! let m = model::<TinyDeepSeek3>(&DeepSeek3Config::tiny())?;
//! assert_eq!(m.stack.len(), 8);
//! # Ok::<(), stackscan::Error>(())
//! ```
//!
//! The routers take no selection bias here: DeepSeek-V3 adjusts it outside the gradient
//! (auxiliary-loss-free balancing), which the trainer does not model; the router supports one
//! ([`route`](crate::moe::route)). Capacity-padded dispatch drops tokens only beyond
//! `capacity_factor`; with `capacity_factor ≥ experts` nothing is ever dropped, so a sharded
//! step routes exactly as the unsharded reference does.

use std::rc::Rc;

use stackscan::fsdp::{InputSpec, ParamSpec, StackModel};
use stackscan::layer::{ActivationMarker, Forward};
use stackscan::{DType, Error, LayerStack, Result, SubLayer, Tensor, TensorType, layer_stack, nn};

use crate::mla::{MlaConfig, MlaWeights, mla};
use crate::moe::{
    ExpertMesh, ExpertWeights, MoeConfig, MoeWeights, RouterConfig, RouterKind, SharedExpert, moe,
};

/// Sizes of a DeepSeek-V3-style model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DeepSeek3Config {
    /// Vocabulary.
    pub vocab: i64,
    /// Model width.
    pub d: i64,
    /// All layers, dense prefix included.
    pub layers: usize,
    /// Leading dense-FFN layers.
    pub dense_layers: usize,
    /// Attention.
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
    /// Expert capacity over a balanced load.
    pub capacity_factor: f64,
    /// See [`DispatchOptions::direct_token_gather`](crate::moe::DispatchOptions).
    pub direct_token_gather: bool,
    /// See [`DispatchOptions::dlhs_transpose_rhs`](crate::moe::DispatchOptions).
    pub dlhs_transpose_rhs: bool,
    /// Sequence length.
    pub seq: i64,
    /// Sequences per device.
    pub batch_per_device: i64,
    /// The expert-parallel mesh the model runs on ([`ExpertMesh::OFF`]: plain FSDP). A run
    /// setting rather than a size, but the layers' forward sees only the config.
    pub expert_mesh: ExpertMesh,
}

impl DeepSeek3Config {
    /// The tiny config: d 128, 3 dense + 5 MoE layers, 16 experts top-4 in 4 groups (top 2),
    /// one shared expert, expert width 64, vocab 512, seq 64. Capacity never drops a token.
    pub const fn tiny() -> Self {
        DeepSeek3Config {
            vocab: 512,
            d: 128,
            layers: 8,
            dense_layers: 3,
            mla: MlaConfig::deepseek3_tiny(),
            dense_ffn: 256,
            experts: 16,
            top_k: 4,
            groups: 4,
            top_groups: 2,
            expert_width: 64,
            shared_experts: 1,
            scaling: 2.5,
            capacity_factor: 16.0,
            direct_token_gather: false,
            dlhs_transpose_rhs: false,
            seq: 64,
            batch_per_device: 1,
            expert_mesh: ExpertMesh::OFF,
        }
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
            direct_token_gather: false,
            dlhs_transpose_rhs: false,
            seq: 8,
            batch_per_device,
            expert_mesh: ExpertMesh::OFF,
        }
    }

    /// DeepSeek-V3 (671B) as published.
    pub const fn deepseek3() -> Self {
        DeepSeek3Config {
            vocab: 129_280,
            d: 7168,
            layers: 61,
            dense_layers: 3,
            mla: MlaConfig::deepseek3(),
            dense_ffn: 18_432,
            experts: 256,
            top_k: 8,
            groups: 8,
            top_groups: 4,
            expert_width: 2048,
            shared_experts: 1,
            scaling: 2.5,
            capacity_factor: 1.25,
            direct_token_gather: false,
            dlhs_transpose_rhs: false,
            seq: 4096,
            batch_per_device: 1,
            expert_mesh: ExpertMesh::OFF,
        }
    }

    /// The MoE sub-layer's config.
    pub const fn moe(&self) -> MoeConfig {
        MoeConfig {
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
            direct_token_gather: self.direct_token_gather,
            dlhs_transpose_rhs: self.dlhs_transpose_rhs,
            gated_shared: false,
            expert_mesh: self.expert_mesh,
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

/// The residual stream `[batch, seq, d]`.
#[derive(Debug)]
pub enum Residual {}

impl ActivationMarker for Residual {}

/// A dense layer: MLA and a SwiGLU FFN, each behind an RMSNorm, with residuals.
#[derive(Debug, SubLayer)]
#[sublayer(config = DeepSeek3Config, carry = Residual, name = "D")]
pub struct Dense<T> {
    /// RMSNorm before attention.
    #[param(shape = [cfg.d], replicated)]
    pub attn_norm: T,
    /// `q_a_proj`
    #[param(shape = [cfg.d, cfg.mla.q_lora], shard = 0)]
    pub q_down: T,
    /// `q_a_layernorm`
    #[param(shape = [cfg.mla.q_lora], replicated)]
    pub q_norm: T,
    /// `q_b_proj`
    #[param(shape = [cfg.mla.q_lora, cfg.mla.heads * cfg.mla.qk_head()], shard = 0)]
    pub q_up: T,
    /// `kv_a_proj_with_mqa`
    #[param(shape = [cfg.d, cfg.mla.kv_lora + cfg.mla.rope], shard = 0)]
    pub kv_down: T,
    /// `kv_a_layernorm`
    #[param(shape = [cfg.mla.kv_lora], replicated)]
    pub kv_norm: T,
    /// `kv_b_proj`
    #[param(shape = [cfg.mla.kv_lora, cfg.mla.heads * (cfg.mla.nope + cfg.mla.v)], shard = 0)]
    pub kv_up: T,
    /// `o_proj`
    #[param(shape = [cfg.mla.heads * cfg.mla.v, cfg.d], shard = 0)]
    pub out: T,
    /// RMSNorm before the FFN.
    #[param(shape = [cfg.d], replicated)]
    pub ffn_norm: T,
    /// FFN gate.
    #[param(shape = [cfg.d, cfg.dense_ffn], shard = 0)]
    pub w_gate: T,
    /// FFN up.
    #[param(shape = [cfg.d, cfg.dense_ffn], shard = 0)]
    pub w_up: T,
    /// FFN down.
    #[param(shape = [cfg.dense_ffn, cfg.d], shard = 0)]
    pub w_down: T,
}

/// An MoE layer: MLA, then routed experts (stacked `[E, …]`, sharded over `E`) and a shared
/// expert, each behind an RMSNorm, with residuals.
#[derive(Debug, SubLayer)]
#[sublayer(config = DeepSeek3Config, carry = Residual, name = "M")]
pub struct Moe<T> {
    /// RMSNorm before attention.
    #[param(shape = [cfg.d], replicated)]
    pub attn_norm: T,
    /// `q_a_proj`
    #[param(shape = [cfg.d, cfg.mla.q_lora], shard = 0)]
    pub q_down: T,
    /// `q_a_layernorm`
    #[param(shape = [cfg.mla.q_lora], replicated)]
    pub q_norm: T,
    /// `q_b_proj`
    #[param(shape = [cfg.mla.q_lora, cfg.mla.heads * cfg.mla.qk_head()], shard = 0)]
    pub q_up: T,
    /// `kv_a_proj_with_mqa`
    #[param(shape = [cfg.d, cfg.mla.kv_lora + cfg.mla.rope], shard = 0)]
    pub kv_down: T,
    /// `kv_a_layernorm`
    #[param(shape = [cfg.mla.kv_lora], replicated)]
    pub kv_norm: T,
    /// `kv_b_proj`
    #[param(shape = [cfg.mla.kv_lora, cfg.mla.heads * (cfg.mla.nope + cfg.mla.v)], shard = 0)]
    pub kv_up: T,
    /// `o_proj`
    #[param(shape = [cfg.mla.heads * cfg.mla.v, cfg.d], shard = 0)]
    pub out: T,
    /// RMSNorm before the MoE.
    #[param(shape = [cfg.d], replicated)]
    pub ffn_norm: T,
    /// Router projection (`gate.weight`, transposed).
    #[param(shape = [cfg.d, cfg.e()], shard = 0)]
    pub router: T,
    /// Routed experts' gates.
    #[param(shape = [cfg.e(), cfg.d, cfg.expert_width], shard = 0)]
    pub experts_gate: T,
    /// Routed experts' up projections.
    #[param(shape = [cfg.e(), cfg.d, cfg.expert_width], shard = 0)]
    pub experts_up: T,
    /// Routed experts' down projections.
    #[param(shape = [cfg.e(), cfg.expert_width, cfg.d], shard = 0)]
    pub experts_down: T,
    /// Shared expert gate.
    #[param(shape = [cfg.d, cfg.shared_width()], shard = 0)]
    pub shared_gate: T,
    /// Shared expert up.
    #[param(shape = [cfg.d, cfg.shared_width()], shard = 0)]
    pub shared_up: T,
    /// Shared expert down.
    #[param(shape = [cfg.shared_width(), cfg.d], shard = 0)]
    pub shared_down: T,
}

/// `h + mla(norm(h))`.
#[expect(clippy::too_many_arguments, reason = "the MLA weights by name")]
fn attention(
    c: &DeepSeek3Config,
    h: &Tensor,
    norm: &Tensor,
    q_down: &Tensor,
    q_norm: &Tensor,
    q_up: &Tensor,
    kv_down: &Tensor,
    kv_norm: &Tensor,
    kv_up: &Tensor,
    out: &Tensor,
) -> Result<Tensor> {
    let w = MlaWeights {
        q_down,
        q_norm,
        q_up,
        kv_down,
        kv_norm,
        kv_up,
        out,
    };
    h.add(&mla(&c.mla, &nn::rms_norm(h, norm, 1e-6)?, &w)?)
}

impl Forward for Dense<Tensor> {
    fn forward(&self, c: &DeepSeek3Config, h: &Tensor) -> Result<Tensor> {
        let h = attention(
            c,
            h,
            &self.attn_norm,
            &self.q_down,
            &self.q_norm,
            &self.q_up,
            &self.kv_down,
            &self.kv_norm,
            &self.kv_up,
            &self.out,
        )?;
        let y = nn::rms_norm(&h, &self.ffn_norm, 1e-6)?;
        let ffn = nn::silu(&y.matmul(&self.w_gate)?)?
            .mul(&y.matmul(&self.w_up)?)?
            .matmul(&self.w_down)?;
        h.add(&ffn)
    }
}

impl Forward for Moe<Tensor> {
    fn forward(&self, c: &DeepSeek3Config, h: &Tensor) -> Result<Tensor> {
        let h = attention(
            c,
            h,
            &self.attn_norm,
            &self.q_down,
            &self.q_norm,
            &self.q_up,
            &self.kv_down,
            &self.kv_norm,
            &self.kv_up,
            &self.out,
        )?;
        let dims = h.dims().to_vec();
        let tokens = nn::rms_norm(&h, &self.ffn_norm, 1e-6)?.reshape(&[dims[0] * dims[1], c.d])?;
        let w = MoeWeights {
            router: &self.router,
            router_bias: None,
            experts: ExpertWeights {
                gate: &self.experts_gate,
                up: &self.experts_up,
                down: &self.experts_down,
            },
            shared: Some(SharedExpert {
                gate: &self.shared_gate,
                up: &self.shared_up,
                down: &self.shared_down,
                gate_proj: None,
            }),
        };
        h.add(&moe(&c.moe(), &tokens, &w)?.reshape(&dims)?)
    }
}

/// The tiny model's stack: 3 dense, then 5 MoE layers.
#[layer_stack(
    prefix = [Dense, Dense, Dense],
    block = [Moe],
    layers = 8,
    prefetch_fsdp_weights,
    defer_grad_reduce_scatter,
)]
#[derive(Debug)]
pub struct TinyDeepSeek3;

/// DeepSeek-V3's stack: 3 dense, then 58 MoE layers.
#[layer_stack(
    prefix = [Dense, Dense, Dense],
    block = [Moe],
    layers = 61,
    prefetch_fsdp_weights,
    defer_grad_reduce_scatter,
)]
#[derive(Debug)]
pub struct DeepSeek3;

/// The model with stack `S`: tokens and next-token labels `[batch_per_device, seq]` per
/// device, embedding before the stack, final norm, LM head and cross-entropy after it.
pub fn model<S: LayerStack<Config = DeepSeek3Config>>(c: &DeepSeek3Config) -> Result<StackModel> {
    if c.layers != S::LAYERS || c.dense_layers > c.layers {
        return Err(Error::InvalidOp {
            op: "deepseek3",
            message: format!(
                "the config has {} layers ({} dense) for a stack of {}",
                c.layers,
                c.dense_layers,
                S::LAYERS
            ),
        });
    }
    c.moe().router.validate()?;
    let (vocab, f32) = (c.vocab, DType::F32);
    let tokens = TensorType::new(DType::I32, [c.batch_per_device, c.seq]);
    let input = |name: &str| InputSpec::new(name, tokens.clone()).with_values(0..vocab);
    let mut m = S::stack_model(
        c,
        TensorType::new(f32, [c.batch_per_device, c.seq, c.d]),
        vec![input("tokens"), input("labels")],
        vec![
            ParamSpec::sharded("embed", &[vocab, c.d], f32, 0),
            ParamSpec::replicated("final_norm", &[c.d], f32),
            ParamSpec::sharded("lm_head", &[c.d, vocab], f32, 0),
        ],
        Rc::new(|inputs, w| match (inputs, w) {
            ([tokens, _], [embed, ..]) => embed.take(tokens, 0),
            _ => Err(outer_arity(inputs.len(), w.len())),
        }),
        Rc::new(move |h, inputs, w| {
            let ([_, labels], [_, final_norm, lm_head]) = (inputs, w) else {
                return Err(outer_arity(inputs.len(), w.len()));
            };
            let (b, t) = (h.dims()[0], h.dims()[1]);
            let logits = nn::rms_norm(h, final_norm, 1e-6)?.matmul(lm_head)?;
            let logits = logits.reshape(&[b * t, vocab])?;
            nn::cross_entropy(&logits, &labels.reshape(&[b * t])?)
        }),
    )?;
    if c.expert_mesh.is_parallel() {
        // Expert banks are gathered over `fsdp` only: each rank keeps its own experts.
        let fsdp = c.expert_mesh.fsdp_axis();
        let mut banks = 0;
        for p in m.kinds.iter_mut().flat_map(|k| k.params.iter_mut()) {
            if EXPERT_BANKS.contains(&p.name.as_str()) {
                *p = p.clone().gathered_over(fsdp.clone());
                banks += 1;
            }
        }
        // Each MoE kind has the three banks; a renamed one would silently be gathered whole.
        let moe_kinds = m.kinds.len() - usize::from(c.dense_layers > 0);
        if banks != EXPERT_BANKS.len() * moe_kinds {
            return Err(Error::InvalidOp {
                op: "deepseek3",
                message: format!(
                    "expert parallelism found {banks} of the expert banks {EXPERT_BANKS:?}"
                ),
            });
        }
    }
    Ok(m)
}

/// The MoE layer's parameters stacked over experts, `[E, …]`.
const EXPERT_BANKS: [&str; 3] = ["experts_gate", "experts_up", "experts_down"];

/// The error of an outer function given another number of inputs or weights than declared.
fn outer_arity(inputs: usize, weights: usize) -> Error {
    Error::InvalidOp {
        op: "deepseek3",
        message: format!("the outer parts take 2 inputs and 3 weights, got {inputs} and {weights}"),
    }
}

/// The tiny model, as the main job trains it.
pub fn tiny_model() -> Result<StackModel> {
    model::<TinyDeepSeek3>(&DeepSeek3Config::tiny())
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
