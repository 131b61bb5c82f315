//! Token-to-expert routing: from router logits `[T, E]` to the `k` chosen experts of each
//! token and their combine weights.
//!
//! Ties are broken towards the lower expert (and group) index: the DSL's `top_k` is a stable
//! descending sort, so routing is a deterministic function of the scores, identical on every
//! device and in the unsharded reference.

use stackscan::{Error, Result, Tensor};

/// Which scoring and selection rule a router uses.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RouterKind {
    /// `softmax` over all experts, top-k, weights renormalised to sum to one (Qwen-style).
    Softmax,
    /// DeepSeek-V3: `sigmoid` scores; selection on scores plus a per-expert bias, limited to
    /// the `top_groups` groups whose two best biased scores sum highest; weights are the
    /// unbiased scores of the chosen experts, renormalised and multiplied by `scaling`.
    SigmoidGrouped {
        /// Number of expert groups (`n_group`); must divide the expert count.
        groups: usize,
        /// Groups a token may route into (`topk_group`).
        top_groups: usize,
        /// `routed_scaling_factor`.
        scaling: f64,
    },
}

/// A router's shape and rule.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RouterConfig {
    /// Routed experts `E`.
    pub experts: usize,
    /// Experts per token `k`.
    pub top_k: usize,
    /// Scoring and selection rule.
    pub kind: RouterKind,
}

/// The routing decision for `T` tokens.
#[derive(Clone, Debug)]
pub struct Routing {
    /// Combine weights `[T, k]`, in the logits' element type; differentiable.
    pub weights: Tensor,
    /// Chosen experts `[T, k]` (`i32`), best first.
    pub experts: Tensor,
    /// Every expert's affinity to each token `[T, E]`, normalised to sum to one per token
    /// (the softmax; DeepSeek-V3's sigmoid scores over their sum) and unbiased:
    /// differentiable, what a load-balancing loss weighs the load with.
    pub affinities: Tensor,
}

const OP: &str = "moe_router";

/// Groups must hold at least this many experts: a group's score is its two best.
const GROUP_SCORE_TOP: usize = 2;

impl RouterConfig {
    /// Checks that the numbers describe a router that can pick `top_k` distinct experts.
    pub fn validate(&self) -> Result<()> {
        let invalid = |message: String| Err(Error::InvalidOp { op: OP, message });
        if self.experts == 0 || self.top_k == 0 || self.top_k > self.experts {
            return invalid(format!(
                "top_k {} must be in 1..={} (the expert count)",
                self.top_k, self.experts
            ));
        }
        if let RouterKind::SigmoidGrouped {
            groups, top_groups, ..
        } = self.kind
        {
            if groups == 0 || !self.experts.is_multiple_of(groups) {
                return invalid(format!(
                    "groups {groups} must divide the expert count {}",
                    self.experts
                ));
            }
            let per_group = self.experts / groups;
            if per_group < GROUP_SCORE_TOP {
                return invalid(format!(
                    "each of the {groups} groups holds {per_group} expert(s); a group is \
                     scored by its best {GROUP_SCORE_TOP}"
                ));
            }
            if top_groups == 0 || top_groups > groups {
                return invalid(format!("top_groups {top_groups} must be in 1..={groups}"));
            }
            if self.top_k > top_groups * per_group {
                return invalid(format!(
                    "top_k {} exceeds the {} experts of the top {top_groups} groups",
                    self.top_k,
                    top_groups * per_group
                ));
            }
        }
        Ok(())
    }
}

/// Routes tokens given router `logits: [T, E]`. `bias: [E]` is the selection bias of
/// [`RouterKind::SigmoidGrouped`] (no bias when `None`); a softmax router takes none.
pub fn route(cfg: &RouterConfig, logits: &Tensor, bias: Option<&Tensor>) -> Result<Routing> {
    cfg.validate()?;
    let e = cfg.experts as i64;
    if logits.rank() != 2 || logits.dims()[1] != e || !logits.dtype().is_float() {
        return Err(Error::InvalidOp {
            op: OP,
            message: format!("expected float logits [T, {e}], got {}", logits.ty()),
        });
    }
    if let Some(b) = bias
        && (b.dims() != [e] || b.dtype() != logits.dtype())
    {
        return Err(Error::InvalidOp {
            op: OP,
            message: format!(
                "expected selection bias [{e}] of {}, got {}",
                logits.dtype(),
                b.ty()
            ),
        });
    }
    match cfg.kind {
        RouterKind::Softmax => {
            if bias.is_some() {
                return Err(Error::InvalidOp {
                    op: OP,
                    message: "a softmax router takes no selection bias".into(),
                });
            }
            let probs = stackscan::nn::softmax(logits, 1)?;
            let (top, experts) = probs.top_k(cfg.top_k)?;
            Ok(Routing {
                weights: renormalise(&top)?,
                experts,
                affinities: probs,
            })
        }
        RouterKind::SigmoidGrouped {
            groups,
            top_groups,
            scaling,
        } => {
            let scores = logits.sigmoid()?;
            let biased = match bias {
                Some(b) => scores.add(&b.broadcast_to(scores.dims())?)?,
                None => scores.clone(),
            };
            // Selection only: no gradient flows through which experts were chosen.
            let biased = biased.stop_gradient()?;
            let allowed = group_mask(&biased, groups, top_groups)?;
            let candidates = allowed.select(&biased, &biased.full_like(-1e30)?)?;
            let (_, experts) = candidates.top_k(cfg.top_k)?;
            let chosen = pick(&scores, &experts)?;
            Ok(Routing {
                weights: renormalise(&chosen)?.scale(scaling)?,
                experts,
                affinities: renormalise(&scores)?,
            })
        }
    }
}

/// `bool [T, E]`: whether each expert lies in one of the token's `top_groups` best groups.
fn group_mask(biased: &Tensor, groups: usize, top_groups: usize) -> Result<Tensor> {
    let (t, e) = (biased.dims()[0], biased.dims()[1]);
    let (g, per) = (groups as i64, e / groups as i64);
    let (best, _) = biased.reshape(&[t, g, per])?.top_k(GROUP_SCORE_TOP)?;
    let (_, top) = best.sum(&[2])?.top_k(top_groups)?;
    let hits = top.one_hot(groups, biased.dtype())?.sum(&[1])?;
    let grouped = hits.broadcast_in_dim(&[t, g, per], &[0, 1])?;
    grouped.reshape(&[t, e])?.gt(&biased.zeros_like()?)
}

/// `values[t, experts[t, j]]` as `[T, k]`, differentiable in `values`.
fn pick(values: &Tensor, experts: &Tensor) -> Result<Tensor> {
    let (t, e) = (values.dims()[0], values.dims()[1]);
    let k = experts.dims()[1];
    let hot = experts.one_hot(e as usize, values.dtype())?;
    let spread = values.broadcast_in_dim(&[t, k, e], &[0, 2])?;
    hot.mul(&spread)?.sum(&[2])
}

/// Divides each row of `w: [T, n]` by its sum.
fn renormalise(w: &Tensor) -> Result<Tensor> {
    let dims = w.dims().to_vec();
    let total = w.sum(&[1])?.broadcast_in_dim(&dims, &[0])?;
    w.div(&total)
}
