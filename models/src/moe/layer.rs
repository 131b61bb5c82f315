//! The whole MoE sub-layer's forward: router, routed experts through the capacity-padded
//! dispatch, and shared experts that every token uses, optionally behind a per-token sigmoid
//! gate (Qwen). Everything a model varies is in [`MoeConfig`].
//!
//! Each layer also reports, as auxiliary outputs of the step ([`stackscan::auxiliary`]):
//! [`DROPPED`], the fraction of this device's (token, expert) assignments beyond their
//! expert's capacity, and [`IMBALANCE`], its busiest expert's load over the mean load (1 is
//! perfectly balanced; the capacity factor is the imbalance a layer absorbs without dropping).
//! Both are per device, the unit capacity applies to, and the step averages them over layers
//! and devices. Two rules balance the load:
//!
//! - DeepSeek-V3's auxiliary-loss-free balancing ([`MoeConfig::bias_update_speed`] γ > 0): the
//!   selection bias `b` (a replicated parameter of the layer, added to the affinities only to
//!   pick experts) moves once per step by `b_i ← b_i + γ·sign(mean load − load_i)`. The layer
//!   records the zero-valued loss term `Σ_i b_i·sg(f_i − 1/E) − sg(…)` (`f_i` the share of
//!   the assignments expert `i` received, `sg` a stop-gradient), so the bias's gradient is its
//!   load deviation; the step's `psum` over the devices makes that the global load's (under
//!   expert parallelism too: the load is counted where the tokens are routed, before any
//!   exchange), and the model gives the parameter the sign-descent rule of rate γ
//!   ([`stackscan::fsdp::Update::SignDescent`]), no Adam.
//! - A load-balancing loss ([`MoeConfig::aux_loss_coef`] α > 0), per sequence and averaged
//!   over sequences: `α·Σ_i f_i·P_i` with `P_i` the mean normalised affinity of expert `i`
//!   over the sequence's tokens and `f_i` the tokens choosing `i` scaled by `E / (k·S)` —
//!   DeepSeek-V3's sequence-wise loss for its sigmoid router — or by `E / S` for a softmax
//!   router, the Switch / Qwen-MoE loss (`router_aux_loss_coef`; per sequence here where
//!   `transformers` pools the batch, so a sharded step equals the unsharded reference).
//!
//! Both are off at 0, and the layer then computes what it did without them.

use stackscan::auxiliary::AuxRole;
use stackscan::nn::context::CONTEXT_AXIS;
use stackscan::{Axis, DType, Error, Result, Tensor, nn};

use crate::moe::dispatch::{DispatchOptions, ExpertWeights, capacity, routed_experts};
use crate::moe::parallel::ExpertMesh;
use crate::moe::router::{RouterConfig, RouterKind, Routing, route};

/// Auxiliary output: the fraction of routed (token, expert) assignments dropped for capacity.
pub const DROPPED: &str = "moe.dropped";
/// Auxiliary output: the busiest expert's load over the mean load.
pub const IMBALANCE: &str = "moe.imbalance";
/// Auxiliary loss term: the load-balancing loss (and the bias rule's zero-valued surrogate).
pub const AUX_LOSS: &str = "moe.aux_loss";

/// An MoE sub-layer's shape and options.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MoeConfig {
    /// Router: expert count, top-k, scoring rule.
    pub router: RouterConfig,
    /// Slots per expert relative to a perfectly balanced load (`C = ⌈T·k/E · factor⌉`);
    /// [`NO_DROP`](crate::moe::NO_DROP) (0): `C = T`, nothing is ever dropped.
    pub capacity_factor: f64,
    /// γ of DeepSeek-V3's selection-bias rule (see the module docs); 0: off. Only a router
    /// given a bias balances by it.
    pub bias_update_speed: f64,
    /// α of the load-balancing loss (see the module docs); 0: off.
    pub aux_loss_coef: f64,
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

/// `moe(x)` for tokens `x: [T, d]`, `sequences` sequences of `T / sequences` tokens one
/// after the other (what the load-balancing loss is computed per).
pub fn moe(cfg: &MoeConfig, x: &Tensor, w: &MoeWeights<'_>, sequences: usize) -> Result<Tensor> {
    let tokens = x.dims().first().copied().unwrap_or(0) as usize;
    // The router runs in f32 under mixed precision: a bf16 score ties experts a wider one
    // tells apart, and its choice decides which weights a token sees. Only the combine
    // weights return to the layer's type.
    let logits = nn::at_least_f32(x)?.matmul(&nn::at_least_f32(w.router)?)?;
    let bias = w.router_bias.map(nn::at_least_f32).transpose()?;
    let mut routing = route(&cfg.router, &logits, bias.as_ref())?;
    routing.weights = routing.weights.convert(x.dtype())?;
    let slots = capacity(
        tokens,
        cfg.router.top_k,
        cfg.router.experts,
        cfg.capacity_factor,
    );
    balance(cfg, &routing, bias.as_ref(), slots, sequences)?;
    let opts = DispatchOptions {
        capacity: slots,
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

/// Records the layer's load metrics and, where configured, its balancing terms (see the
/// module docs) on the scope being traced.
fn balance(
    cfg: &MoeConfig,
    routing: &Routing,
    bias: Option<&Tensor>,
    slots: usize,
    sequences: usize,
) -> Result<()> {
    let (e, k) = (cfg.router.experts, cfg.router.top_k);
    let t = routing.experts.dims()[0];
    let assignments = (t as usize * k) as f64;
    // [T, E]: 1 where the token chose the expert.
    let chosen = routing.experts.one_hot(e, DType::F32)?.sum(&[1])?;
    let load = chosen.sum(&[0])?;
    let excess = load.add_scalar(-(slots as f64))?;
    let dropped = excess.max(&excess.zeros_like()?)?.sum_all()?;
    dropped
        .scale(1.0 / assignments)?
        .record_aux(DROPPED, AuxRole::Metric)?;
    load.max_over(&[0])?
        .scale(e as f64 / assignments)?
        .record_aux(IMBALANCE, AuxRole::Metric)?;
    let mut terms = Vec::new();
    if let (Some(b), true) = (bias, cfg.bias_update_speed > 0.0) {
        let deviation = load
            .scale(1.0 / assignments)?
            .add_scalar(-1.0 / e as f64)?
            .convert(b.dtype())?;
        let pull = b.mul(&deviation)?.sum_all()?;
        terms.push(pull.sub(&pull.stop_gradient()?)?);
    }
    if cfg.aux_loss_coef > 0.0 {
        let n = sequences.max(1) as i64;
        let per_seq = t / n;
        // Under context parallelism this device holds one piece of each sequence: the
        // sequence's sums are the pieces' sums over `context` (a `psum`, whose VJP sends each
        // piece its share back), over all `cp · per_seq` positions.
        let context = cfg.expert_mesh.context;
        let axis = Axis::new(CONTEXT_AXIS, context);
        let over_sequence =
            |x: Tensor| -> Result<Tensor> { if context > 1 { x.psum(&axis) } else { Ok(x) } };
        let positions = (per_seq * context as i64) as f64;
        let affinities = routing.affinities.reshape(&[n, per_seq, e as i64])?;
        let p = if context > 1 {
            over_sequence(affinities.sum(&[1])?)?.scale(1.0 / positions)?
        } else {
            affinities.mean(&[1])?
        };
        let per_choice = match cfg.router.kind {
            RouterKind::SigmoidGrouped { .. } => k as f64,
            RouterKind::Softmax => 1.0,
        };
        let f = over_sequence(chosen.reshape(&[n, per_seq, e as i64])?.sum(&[1])?)?
            .scale(e as f64 / (per_choice * positions))?
            .convert(p.dtype())?;
        terms.push(f.mul(&p)?.sum(&[1])?.mean(&[0])?.scale(cfg.aux_loss_coef)?);
    }
    if let Some((first, rest)) = terms.split_first() {
        let mut total = first.clone();
        for term in rest {
            total = total.add(term)?;
        }
        total.record_aux(AUX_LOSS, AuxRole::Loss)?;
    }
    Ok(())
}
