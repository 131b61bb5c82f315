//! The MoE FFN as declared modules: [`Experts`] (the stacked routed experts), [`Moe`] (router,
//! routed experts and a shared expert, DeepSeek-V3) and [`GatedMoe`] (the same with the shared
//! expert behind a per-token sigmoid gate, Qwen3.5). A model's sub-layer holds one as a
//! `#[module(config = cfg.moe())]` field, so its parameters are named `moe.router`,
//! `moe.experts.gate`, `moe.shared.w_up`, … (`layers.moe.experts.gate` in a stack), and its
//! forward reads them by name and calls [`crate::moe::moe`].
//!
//! The variants are types, not flags: a module's parameter count is part of its type
//! (`Params::LEN`), so "with a gated shared expert" is [`GatedMoe`] rather than an optional
//! field. The selection bias of DeepSeek-V3's router is [`Moe`]'s parameter `router_bias`
//! (zeros, replicated): it picks experts and never weights them, and is moved by the
//! balancing rule of [`crate::moe::layer`] rather than by Adam (the model gives it that
//! rule); at zero it changes no choice.
//!
//! ```
//! use stackscan::{DType, Module, Scope, TensorType};
//! use stackscan_models::moe::{ExpertMesh, Moe, MoeConfig, MoeDims, RouterConfig, RouterKind};
//! let c = MoeDims {
//!     d_model: 32,
//!     expert_width: 16,
//!     shared_width: 16,
//!     out_std: 0.02,
//!     layer: MoeConfig {
//!         router: RouterConfig { experts: 8, top_k: 2, kind: RouterKind::Softmax },
//!         capacity_factor: 4.0,
//!         bias_update_speed: 0.0,
//!         aux_loss_coef: 0.0,
//!         direct_token_gather: false,
//!         dlhs_transpose_rhs: false,
//!         gated_shared: false,
//!         expert_mesh: ExpertMesh::OFF,
//!     },
//! };
//! let specs = <Moe<stackscan::Tensor> as Module>::param_specs(&c);
//! let names: Vec<_> = specs.iter().map(|p| p.name.as_str()).collect();
//! assert_eq!(
//!     names,
//!     ["router", "router_bias", "experts.gate", "experts.up", "experts.down", "shared.w_gate", "shared.w_up", "shared.w_down"]
//! );
//! assert_eq!(specs[2].shape, [8, 32, 16]);
//! let s = Scope::new("moe");
//! let w = specs.iter().map(|p| s.param(p.full_type())).collect();
//! let moe = <Moe<stackscan::Tensor> as stackscan::layer::Params<_>>::from_values(w)?;
//! let y = moe.forward(&c, &s.param(TensorType::new(DType::F32, [2, 8, 32])))?;
//! assert_eq!(y.dims(), &[2, 8, 32]);
//! # Ok::<(), stackscan::Error>(())
//! ```

use stackscan::{Error, Module, Result, Tensor};

use crate::llama::{MlpDims, SwiGlu};
use crate::moe::dispatch::ExpertWeights;
use crate::moe::layer::{MoeConfig, MoeWeights, SharedExpert, moe};
use crate::moe::router::RouterKind;

/// What an MoE module's shapes and forward read: the widths, and the layer's routing and
/// dispatch ([`MoeConfig`]). A model projects its own config onto it (`cfg.moe()`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MoeDims {
    /// Model width `d`.
    pub d_model: i64,
    /// One routed expert's hidden width (`moe_intermediate_size`).
    pub expert_width: i64,
    /// The shared expert's hidden width (all shared experts fused into one SwiGLU).
    pub shared_width: i64,
    /// Standard deviation of the down projections' initialiser.
    pub out_std: f64,
    /// Router, capacity, dispatch and expert-parallel mesh.
    pub layer: MoeConfig,
}

impl MoeDims {
    /// What [`Experts`] reads.
    pub fn experts(&self) -> ExpertDims {
        ExpertDims {
            experts: self.layer.router.experts as i64,
            d_model: self.d_model,
            width: self.expert_width,
            out_std: self.out_std,
        }
    }

    /// What the shared expert ([`SwiGlu`]) reads.
    pub fn shared(&self) -> MlpDims {
        MlpDims {
            d_model: self.d_model,
            ffn: self.shared_width,
            out_std: self.out_std,
        }
    }

    /// `E` as a dimension.
    pub fn e(&self) -> i64 {
        self.layer.router.experts as i64
    }
}

/// What [`Experts`] reads.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ExpertDims {
    /// Routed experts `E`.
    pub experts: i64,
    /// Model width `d`.
    pub d_model: i64,
    /// One expert's hidden width `f`.
    pub width: i64,
    /// Standard deviation of the down projection's initialiser.
    pub out_std: f64,
}

/// The routed experts' SwiGLU weights, stacked over the experts and sharded on that major-most
/// dimension, so an FSDP gather or reduce-scatter moves whole experts as contiguous slabs
/// (and expert parallelism gathers a rank's own experts only).
#[derive(Debug, Module)]
#[module(config = ExpertDims)]
pub struct Experts<T> {
    /// Gate projections `[E, d, f]`.
    #[param(shape = [cfg.experts, cfg.d_model, cfg.width], shard = 0)]
    pub gate: T,
    /// Up projections `[E, d, f]`.
    #[param(shape = [cfg.experts, cfg.d_model, cfg.width], shard = 0)]
    pub up: T,
    /// Down projections `[E, f, d]`.
    #[param(shape = [cfg.experts, cfg.width, cfg.d_model], shard = 0, init = normal(cfg.out_std))]
    pub down: T,
}

impl Experts<Tensor> {
    /// The banks as [`routed_experts`](crate::moe::routed_experts) takes them.
    pub fn weights(&self) -> ExpertWeights<'_> {
        ExpertWeights {
            gate: &self.gate,
            up: &self.up,
            down: &self.down,
        }
    }
}

/// An MoE FFN with an ungated shared expert (DeepSeek-V3): router, routed experts, and a
/// SwiGLU every token uses.
#[derive(Debug, Module)]
#[module(config = MoeDims)]
pub struct Moe<T> {
    /// Router projection `[d, E]` (`gate.weight`, transposed).
    #[param(shape = [cfg.d_model, cfg.e()], shard = 0)]
    pub router: T,
    /// The router's selection bias `[E]` (`gate.e_score_correction_bias`; used by a
    /// [`RouterKind::SigmoidGrouped`] router, at rest under another): added to the
    /// affinities to pick experts only; moved by the balancing rule, not by Adam.
    #[param(shape = [cfg.e()], replicated, init = zeros)]
    pub router_bias: T,
    /// The routed experts.
    #[module(config = cfg.experts())]
    pub experts: Experts<T>,
    /// The shared expert(s), fused.
    #[module(config = cfg.shared())]
    pub shared: SwiGlu<T>,
}

impl Moe<Tensor> {
    /// The FFN of the normalised stream `x: [..., d]` (every leading position a token, all
    /// routed together; the last leading dimension a sequence), back to `x`'s shape.
    pub fn forward(&self, c: &MoeDims, x: &Tensor) -> Result<Tensor> {
        // Only DeepSeek-V3's router selects with a bias; another leaves it at rest.
        let selects = matches!(c.layer.router.kind, RouterKind::SigmoidGrouped { .. });
        let w = MoeWeights {
            router: &self.router,
            router_bias: selects.then_some(&self.router_bias),
            experts: self.experts.weights(),
            shared: Some(shared(&self.shared, None)),
        };
        over_tokens(c, x, &w)
    }
}

/// An MoE FFN whose shared expert's output is scaled per token by `sigmoid(x · shared_gate)`
/// (Qwen3.5); [`MoeConfig::gated_shared`] must be set.
#[derive(Debug, Module)]
#[module(config = MoeDims)]
pub struct GatedMoe<T> {
    /// Router projection `[d, E]`.
    #[param(shape = [cfg.d_model, cfg.e()], shard = 0)]
    pub router: T,
    /// The routed experts.
    #[module(config = cfg.experts())]
    pub experts: Experts<T>,
    /// The shared expert.
    #[module(config = cfg.shared())]
    pub shared: SwiGlu<T>,
    /// The shared expert's gate `[d, 1]`.
    #[param(shape = [cfg.d_model, 1], shard = 0)]
    pub shared_gate: T,
}

impl GatedMoe<Tensor> {
    /// The FFN of the normalised stream `x: [..., d]`, back to `x`'s shape.
    pub fn forward(&self, c: &MoeDims, x: &Tensor) -> Result<Tensor> {
        let w = MoeWeights {
            router: &self.router,
            router_bias: None,
            experts: self.experts.weights(),
            shared: Some(shared(&self.shared, Some(&self.shared_gate))),
        };
        over_tokens(c, x, &w)
    }
}

fn shared<'a>(mlp: &'a SwiGlu<Tensor>, gate_proj: Option<&'a Tensor>) -> SharedExpert<'a> {
    SharedExpert {
        gate: &mlp.w_gate,
        up: &mlp.w_up,
        down: &mlp.w_down,
        gate_proj,
    }
}

/// [`moe`] of `x: [..., S, d]` flattened to tokens `[T, d]`, reshaped back; the leading
/// dimensions before `S` count sequences.
fn over_tokens(c: &MoeDims, x: &Tensor, w: &MoeWeights<'_>) -> Result<Tensor> {
    let dims = x.dims().to_vec();
    match dims.split_last() {
        Some((&d, lead)) if d == c.d_model && !lead.is_empty() => {
            let tokens = x.reshape(&[lead.iter().product(), d])?;
            let sequences: i64 = lead[..lead.len() - 1].iter().product();
            moe(&c.layer, &tokens, w, sequences as usize)?.reshape(&dims)
        }
        _ => Err(Error::InvalidOp {
            op: "moe",
            message: format!(
                "expected tokens [..., {}] (d_model), got {}",
                c.d_model,
                x.ty()
            ),
        }),
    }
}
