//! The whole MoE sub-layer's forward: router, routed experts through the capacity-padded
//! dispatch, and shared experts that every token uses, optionally behind a per-token sigmoid
//! gate (Qwen). Everything a model varies is in [`MoeConfig`].

use stackscan::{Error, Result, Tensor, nn};

use crate::moe::dispatch::{DispatchOptions, ExpertWeights, capacity, routed_experts};
use crate::moe::parallel::ExpertMesh;
use crate::moe::router::{RouterConfig, route};

/// An MoE sub-layer's shape and options.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MoeConfig {
    /// Router: expert count, top-k, scoring rule.
    pub router: RouterConfig,
    /// Slots per expert relative to a perfectly balanced load (`C = ⌈T·k/E · factor⌉`).
    pub capacity_factor: f64,
    /// See [`DispatchOptions::direct_token_gather`]; off by default.
    pub direct_token_gather: bool,
    /// See [`DispatchOptions::dlhs_transpose_rhs`]; off by default.
    pub dlhs_transpose_rhs: bool,
    /// Whether the shared experts' output is scaled by `sigmoid(x · shared_gate)`.
    pub gated_shared: bool,
    /// The expert-parallel mesh; see [`DispatchOptions::expert_mesh`].
    pub expert_mesh: ExpertMesh,
}

/// The shared experts, fused into one SwiGLU of width `shared · f`.
#[derive(Clone, Copy, Debug)]
pub struct SharedExpert<'a> {
    /// `[d, f_shared]`
    pub gate: &'a Tensor,
    /// `[d, f_shared]`
    pub up: &'a Tensor,
    /// `[f_shared, d]`
    pub down: &'a Tensor,
    /// `[d, 1]`, present exactly when [`MoeConfig::gated_shared`].
    pub gate_proj: Option<&'a Tensor>,
}

/// An MoE sub-layer's weights (one layer's, already gathered).
#[derive(Clone, Copy, Debug)]
pub struct MoeWeights<'a> {
    /// Router projection `[d, E]`.
    pub router: &'a Tensor,
    /// DeepSeek-V3's selection bias `[E]` (not trained by gradient).
    pub router_bias: Option<&'a Tensor>,
    /// Routed experts, stacked over `E`.
    pub experts: ExpertWeights<'a>,
    /// Shared experts, if any.
    pub shared: Option<SharedExpert<'a>>,
}

/// `moe(x)` for tokens `x: [T, d]`.
pub fn moe(cfg: &MoeConfig, x: &Tensor, w: &MoeWeights<'_>) -> Result<Tensor> {
    let tokens = x.dims().first().copied().unwrap_or(0) as usize;
    let routing = route(&cfg.router, &x.matmul(w.router)?, w.router_bias)?;
    let opts = DispatchOptions {
        capacity: capacity(
            tokens,
            cfg.router.top_k,
            cfg.router.experts,
            cfg.capacity_factor,
        ),
        direct_token_gather: cfg.direct_token_gather,
        dlhs_transpose_rhs: cfg.dlhs_transpose_rhs,
        expert_mesh: cfg.expert_mesh,
    };
    let routed = routed_experts(x, &routing, w.experts, opts)?;
    let Some(shared) = w.shared else {
        return Ok(routed);
    };
    let y = nn::silu(&x.matmul(shared.gate)?)?
        .mul(&x.matmul(shared.up)?)?
        .matmul(shared.down)?;
    let y = match (cfg.gated_shared, shared.gate_proj) {
        (true, Some(g)) => y.mul(&x.matmul(g)?.sigmoid()?.broadcast_to(y.dims())?)?,
        (false, None) => y,
        (gated, _) => {
            return Err(Error::InvalidOp {
                op: "moe",
                message: format!(
                    "gated_shared is {gated} but the shared gate projection is {}",
                    if gated { "missing" } else { "given" }
                ),
            });
        }
    };
    routed.add(&y)
}
