//! Routed experts without dense all-experts compute: each (token, choice) pair gets a slot
//! in a capacity-padded buffer `[E, C, d]`, the experts run as one batched dot over `E`, and
//! the results are combined back per token with the router weights.
//!
//! Slots are assigned in token order within each expert (a prefix sum over the one-hot of
//! the chosen experts), so the layout is a deterministic function of the routing. A pair
//! whose expert is full (position ≥ `C`) is dropped: it lands in one spare dump row that is
//! never computed, and contributes nothing. [`capacity`] picks `C` from a capacity factor.
//!
//! Under expert parallelism ([`ExpertMesh`]) the weights are this rank's `E / ep` experts, the
//! chosen experts are renumbered rank-major so the buffer's expert dimension is split by rank,
//! and the buffer travels to the experts' ranks and back by `all_to_all` over `expert`.

use stackscan::ir::Literal;
use stackscan::{DType, DotDims, Error, LhsCotangent, Result, Tensor, TensorType};

use crate::moe::parallel::{self, ExpertMesh};
use crate::moe::router::Routing;

/// One stacked SwiGLU expert bank: `gate`, `up: [E, d, f]`, `down: [E, f, d]`.
#[derive(Clone, Copy, Debug)]
pub struct ExpertWeights<'a> {
    /// Gate projection `[E, d, f]`.
    pub gate: &'a Tensor,
    /// Up projection `[E, d, f]`.
    pub up: &'a Tensor,
    /// Down projection `[E, f, d]`.
    pub down: &'a Tensor,
}

/// How routed rows reach the expert buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DispatchOptions {
    /// Slots per expert `C`.
    pub capacity: usize,
    /// Gather each slot's row straight from the token matrix by index, instead of building
    /// a `top_k`-fold replicated copy of the tokens and scattering it into the slots.
    pub direct_token_gather: bool,
    /// The backward's input gradient of each grouped product (`[E, C, ·] · W`, `W` an
    /// expert bank) contracts `W` in place through the dot's dimension numbers. Off, it
    /// first materialises the bank transposed (`[E, d, f] → [E, f, d]`, and back for
    /// `down`) and contracts with that copy, as a grouped-matmul kernel without the option
    /// does. Same values either way; on saves one copy of each bank per backward step.
    pub dlhs_transpose_rhs: bool,
    /// The expert-parallel mesh the layer runs on ([`ExpertMesh::OFF`] for none): with
    /// `expert > 1` the weights hold this rank's experts only.
    pub expert_mesh: ExpertMesh,
}

/// Slots per expert for `tokens · top_k` assignments spread over `experts` with headroom
/// `factor` (1.0 = perfectly balanced), at least one and at most `tokens`: a token picks
/// distinct experts, so no expert receives more than `tokens` rows and `C = tokens` never
/// drops one. `factor` [`NO_DROP`] (0) asks for exactly that: every token can reach every
/// expert it chooses, whatever the routing (dropless, as DeepSeek-V3 and Qwen train).
pub fn capacity(tokens: usize, top_k: usize, experts: usize, factor: f64) -> usize {
    if factor == NO_DROP {
        return tokens.max(1);
    }
    let balanced = (tokens * top_k) as f64 / experts.max(1) as f64;
    ((balanced * factor).ceil() as usize).clamp(1, tokens.max(1))
}

/// The capacity factor meaning "drop nothing": `C` = the tokens a device routes.
pub const NO_DROP: f64 = 0.0;

/// Checks a capacity factor read from config field `field`: a finite number, [`NO_DROP`] or
/// positive; the error names the field.
pub fn check_capacity_factor(field: &str, factor: f64) -> Result<()> {
    if factor.is_finite() && factor >= 0.0 {
        return Ok(());
    }
    Err(Error::InvalidOp {
        op: "moe",
        message: format!(
            "`{field}` is {factor}; expected a positive number (slots per expert over a \
             balanced load), or 0 for no dropping"
        ),
    })
}

const OP: &str = "moe_dispatch";

fn invalid(message: String) -> Error {
    Error::InvalidOp { op: OP, message }
}

/// `Σ_j weights[t, j] · expert_{experts[t, j]}(x[t])` for `x: [T, d]`, each expert a SwiGLU
/// `down(silu(x·gate) ⊙ x·up)`.
pub fn routed_experts(
    x: &Tensor,
    routing: &Routing,
    w: ExpertWeights<'_>,
    opts: DispatchOptions,
) -> Result<Tensor> {
    let (local_experts, d) = check(x, routing, w, opts)?;
    let em = opts.expert_mesh;
    let e = local_experts * em.ranks() as i64;
    let (t, k) = (x.dims()[0], routing.experts.dims()[1]);
    let (n, c) = (t * k, opts.capacity as i64);
    let s = x.scope();
    // Slot of each assignment: expert · C + its rank among that expert's assignments.
    let mut chosen = routing.experts.reshape(&[n])?;
    if em.is_parallel() {
        let order = s.constant(
            Literal::Int(em.rank_major(e as usize)),
            TensorType::new(DType::I32, [e]),
        )?;
        chosen = order.take(&chosen, 0)?;
    }
    let hot = chosen.one_hot(e as usize, DType::F32)?;
    let rank = hot
        .cumsum(0, false)?
        .mul(&hot)?
        .sum(&[1])?
        .add_scalar(-1.0)?;
    let start = chosen.convert(DType::F32)?.scale(c as f64)?;
    let kept = rank.lt(&rank.full_like(c as f64)?)?;
    let dump = rank.full_like((e * c) as f64)?;
    let slot = kept
        .select(&start.add(&rank)?, &dump)?
        .convert(DType::I32)?;
    // Token of each assignment: row-major over [T, k].
    let token = s
        .iota(TensorType::new(DType::I32, [t, k]), 0)?
        .reshape(&[n])?;
    let rows = (e * c + 1) as usize;
    let buffer = if opts.direct_token_gather {
        // Invert slot → token (empty slots read token 0 and are masked to zero).
        let filled = s
            .full(0.0, TensorType::new(DType::F32, [rows as i64]))?
            .scatter_add(&slot, &token.full_like(1.0)?.convert(DType::F32)?, 0)?;
        let source = s
            .full(0.0, TensorType::new(DType::F32, [rows as i64]))?
            .scatter_add(&slot, &token.convert(DType::F32)?, 0)?
            .convert(DType::I32)?;
        let gathered = x.take(&source, 0)?;
        let mask = filled
            .convert(x.dtype())?
            .broadcast_in_dim(&[rows as i64, d], &[0])?;
        gathered.mul(&mask)?
    } else {
        let replicated = x.broadcast_in_dim(&[t, k, d], &[0, 2])?.reshape(&[n, d])?;
        s.full(0.0, TensorType::new(x.dtype(), [rows as i64, d]))?
            .scatter_add(&slot, &replicated, 0)?
    };
    let mut slots = buffer.slice_axis(0, 0, e * c)?.reshape(&[e, c, d])?;
    if em.is_parallel() {
        slots = parallel::dispatch(&slots, &em)?;
    }
    let grad = if opts.dlhs_transpose_rhs {
        LhsCotangent::InPlace
    } else {
        LhsCotangent::TransposedRhs
    };
    let hidden = stackscan::nn::silu(&slots.matmul_with(w.gate, grad)?)?
        .mul(&slots.matmul_with(w.up, grad)?)?;
    let mut out = hidden.matmul_with(w.down, grad)?;
    if em.is_parallel() {
        out = parallel::combine(&out, &em)?;
    }
    let out = out.reshape(&[e * c, d])?;
    let zero_row = s.full(0.0, TensorType::new(x.dtype(), [1, d]))?;
    let out = stackscan::concatenate(&[&out, &zero_row], 0)?;
    let per_choice = out.take(&slot, 0)?.reshape(&[t, k, d])?;
    // A contraction over the choices rather than broadcast-multiply-sum: its backward is a
    // dot as well, so no `[T, k, d]` broadcast of the cotangent appears either.
    routing.weights.dot_general(
        &per_choice,
        DotDims {
            lhs_batch: vec![0],
            rhs_batch: vec![0],
            lhs_contract: vec![1],
            rhs_contract: vec![1],
        },
    )
}

/// Checks the operands' shapes; returns `(E, d)`.
fn check(
    x: &Tensor,
    routing: &Routing,
    w: ExpertWeights<'_>,
    opts: DispatchOptions,
) -> Result<(i64, i64)> {
    if x.rank() != 2 {
        return Err(invalid(format!("expected tokens [T, d], got {}", x.ty())));
    }
    let (t, d) = (x.dims()[0], x.dims()[1]);
    let [e, gd, f] = w.gate.dims() else {
        return Err(invalid(format!(
            "expected gate [E, d, f], got {}",
            w.gate.ty()
        )));
    };
    let (e, f) = (*e, *f);
    if *gd != d || w.up.dims() != w.gate.dims() || w.down.dims() != [e, f, d] {
        return Err(invalid(format!(
            "expert weights must be gate, up [E, {d}, f] and down [E, f, {d}]; got {}, {}, {}",
            w.gate.ty(),
            w.up.ty(),
            w.down.ty()
        )));
    }
    let k = routing.experts.dims().get(1).copied().unwrap_or(0);
    if routing.experts.dims() != [t, k] || routing.weights.dims() != [t, k] {
        return Err(invalid(format!(
            "routing must be [{t}, k] for {t} tokens; got experts {} and weights {}",
            routing.experts.ty(),
            routing.weights.ty()
        )));
    }
    if opts.capacity == 0 {
        return Err(invalid("capacity must be at least 1".into()));
    }
    Ok((e, d))
}
