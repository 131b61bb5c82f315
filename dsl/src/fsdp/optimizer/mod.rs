//! Adam on the sharded slabs, fused after the gradient step so one program runs a whole
//! training step and parameters never leave the devices.

use crate::builder::{Scope, Tensor};
use crate::dtype::DType;
use crate::emit::{Alias, Program, Sharding};
use crate::error::{Error, Result};
use crate::ir::Function;
use crate::types::TensorType;

use super::model::Update;
use super::schedule::{Schedule, decays};
use super::step::TrainStep;

/// Adam's hyper-parameters, with AdamW's decoupled weight decay, a learning-rate schedule
/// and global-norm gradient clipping (each off by default, and then the program is plain
/// Adam's).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Adam {
    /// Learning rate (the peak of a [`Schedule`]).
    pub lr: f64,
    /// First-moment decay.
    pub beta1: f64,
    /// Second-moment decay.
    pub beta2: f64,
    /// Denominator guard.
    pub eps: f64,
    /// AdamW's decoupled weight decay λ: a decayed weight also moves by `−lr_t·λ·w`. Which
    /// weights decay: [`decays`], unless a weight's spec says
    /// ([`ParamSpec::decay`](crate::fsdp::ParamSpec)). 0: off.
    pub weight_decay: f64,
    /// How the learning rate moves with the step count.
    pub schedule: Schedule,
    /// Scale every gradient by `min(1, c / (‖g‖ + 10⁻⁶))`, `‖g‖` the global norm over every
    /// Adam-trained weight's gradient (all shards, all devices), before the moments see it.
    pub clip_grad_norm: Option<f64>,
}

impl Default for Adam {
    fn default() -> Self {
        Adam {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            weight_decay: 0.0,
            schedule: Schedule::Constant,
            clip_grad_norm: None,
        }
    }
}

impl Adam {
    /// Checks that the update is defined: `lr` finite and positive, both betas in `[0, 1)`,
    /// `eps` finite and positive. A NaN or zero learning rate lowers and compiles fine and
    /// then trains nothing or poisons every weight, so it is refused before anything is built.
    /// A zero `eps` is refused for the same reason: an element whose gradients have all been
    /// 0 (an embedding row no batch has used) divides 0 by 0 in the update, and the update is
    /// not checked for finiteness after it is computed ([`with_adam`] says why).
    pub fn validate(&self) -> Result<()> {
        let reject = |field, value, expected| {
            Err(Error::InvalidHyperParameter {
                optimizer: "adam",
                field,
                value,
                expected,
            })
        };
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return reject("lr", self.lr, "a finite number > 0");
        }
        for (field, beta) in [("beta1", self.beta1), ("beta2", self.beta2)] {
            // `contains` is false for NaN.
            if !(0.0..1.0).contains(&beta) {
                return reject(field, beta, "a number in [0, 1)");
            }
        }
        if !(self.eps.is_finite() && self.eps > 0.0) {
            return reject("eps", self.eps, "a finite number > 0");
        }
        if !(self.weight_decay.is_finite() && self.weight_decay >= 0.0) {
            return reject("weight_decay", self.weight_decay, "a finite number >= 0");
        }
        if let Some(c) = self.clip_grad_norm
            && !(c.is_finite() && c > 0.0)
        {
            return reject("clip_grad_norm", c, "a finite number > 0");
        }
        self.schedule.validate(self.lr)
    }
}

/// The training step followed by an Adam update that is applied only when it is finite.
///
/// Parameters: `[inputs…, weights…, first moments…, second moments…, step]` where `step` is
/// the 1-based count of the update this step would apply, as an `f32[]`; results: `[loss,
/// applied, weights…, first moments…, second moments…, next step, auxiliary outputs…]`,
/// `next step` being `step + applied`, the auxiliary outputs the training step's
/// ([`TrainStep::aux`]). Moments have the weights' types and shardings. A weight whose
/// [`Update`] is [`Update::SignDescent`] moves by its own rule and keeps its moments.
///
/// The state is donated: every weight and moment parameter aliases its result
/// ([`Program::aliases`]), and so does `step` its successor, so XLA writes the new state over
/// the old and the state is held once on each device, not twice. The runtime then marks the
/// state buffers passed in as donated, and the caller keeps the results instead.
///
/// Adam's step count is state on the devices, like the moments (optax's `count`), rather than
/// a number the host sends: the next step's count depends on whether this one was applied,
/// and a host that had to read `applied` before it could launch the next step would leave the
/// devices idle between every two steps. With the count on the devices, a runtime can launch
/// step k + 1 while step k runs and read either flag whenever it likes.
///
/// `applied` is an `i32[]`, 1 when the loss and the global gradient norm are finite, else 0;
/// when it is 0 every state result is its parameter unchanged, so one bad batch cannot poison
/// the weights. The norm is the one clipping uses (the shards' sums of squares added by one
/// `psum`), so the verdict is agreed across the mesh at no extra cost. The norm is finite
/// only when every gradient element is, and infinite whenever one `g²` overflows — the case
/// in which the second moment would. The verdict is reached before the update, from values
/// the update only reads: each new state tensor is then `applied ? new : old`, one
/// elementwise pass XLA writes over the donated old state. Checking the updated state as well,
/// as this function once did, made every new tensor an input of a reduction that had to finish
/// before any select could run, so the whole new state was materialised beside the old: one
/// more copy of the weights and both moments in every step's temp memory. What that check
/// caught beyond this one needs values within a factor of ~10 of `f32::MAX` in the moments or
/// weights, or a zero `eps` (refused by [`Adam::validate`]). Sign-descent weights' gradients,
/// outside the norm, are checked on their own.
pub fn with_adam(step: &TrainStep, adam: Adam) -> Result<Program> {
    adam.validate()?;
    for update in &step.updates {
        if let &Update::SignDescent { rate } = update
            && !(rate.is_finite() && rate >= 0.0)
        {
            return Err(Error::InvalidHyperParameter {
                optimizer: "sign_descent",
                field: "rate",
                value: rate,
                expected: "a finite number >= 0",
            });
        }
    }
    let main = step.program.main();
    let shardings = step
        .program
        .param_shardings()
        .ok_or_else(|| Error::invalid("adam", "the training step has no mesh layout"))?;
    let mesh = step
        .program
        .mesh()
        .cloned()
        .ok_or_else(|| Error::invalid("adam", "the training step has no mesh"))?;
    let axis = mesh.all();
    let ni = step.inputs;
    let weight_types = main.param_types()[ni..].to_vec();
    let s = Scope::new("train_step_adam");
    let params: Vec<Tensor> = main.param_types().into_iter().map(|t| s.param(t)).collect();
    let m: Vec<Tensor> = weight_types.iter().map(|t| s.param(t.clone())).collect();
    let v: Vec<Tensor> = weight_types.iter().map(|t| s.param(t.clone())).collect();
    let t = s.param(TensorType::scalar(DType::F32));
    let mut out = s.inline(main, &params)?;
    let mut grads = out.split_off(1);
    let aux = grads.split_off(weight_types.len());
    let loss = out.remove(0);
    let replicated: Vec<bool> = shardings[ni..]
        .iter()
        .map(|sh| matches!(sh, Sharding::Replicated))
        .collect();
    let decay: Vec<bool> = (0..weight_types.len())
        .map(|j| {
            match (
                step.decay.get(j).copied().flatten(),
                step.names.get(j),
                step.ranks.get(j),
            ) {
                (Some(chosen), _, _) => chosen,
                (None, Some(name), Some(&rank)) => decays(name, rank),
                _ => false,
            }
        })
        .collect();
    let state = AdamState {
        weights: &params[ni..],
        grads: &grads,
        m: &m,
        v: &v,
        updates: &step.updates,
        replicated: &replicated,
        decay: &decay,
    };
    let mut results = vec![loss.clone()];
    let (update, report) = adam.update(&s, &loss, state, &t, &axis)?;
    results.extend(update);
    results.extend(aux);
    results.extend(report);
    let f = s.finish(&results)?;
    let weight_sh: Vec<Sharding> = shardings[ni..].to_vec();
    let mut params_sh: Vec<Sharding> = shardings.to_vec();
    params_sh.extend(weight_sh.iter().copied());
    params_sh.extend(weight_sh.iter().copied());
    params_sh.push(Sharding::Replicated);
    let mut results_sh = vec![Sharding::Replicated; 2];
    for _ in 0..3 {
        results_sh.extend(weight_sh.iter().copied());
    }
    results_sh.push(Sharding::Replicated);
    results_sh.extend(step.aux.iter().map(|_| Sharding::Replicated));
    results_sh.extend(OPTIMIZER_OUTPUTS.iter().map(|_| Sharding::Replicated));
    // The weights, both moments and the step count.
    let state = 3 * weight_sh.len() + 1;
    Program::on_device_mesh(f, mesh, params_sh, results_sh)?.with_aliases(donated_state(ni, state))
}

/// What the update reports per step, after the training step's own auxiliary outputs: the
/// learning rate it applied and the global gradient norm before clipping (both `f32[]`,
/// replicated; a skipped step's too).
pub const OPTIMIZER_OUTPUTS: [&str; 2] = ["lr", "grad_norm"];

/// The auxiliary outputs of [`with_adam`]'s program in result order: the step's
/// ([`TrainStep::aux`]), then the optimizer's ([`OPTIMIZER_OUTPUTS`], metrics).
pub fn adam_outputs(step: &TrainStep) -> Vec<crate::auxiliary::AuxOutput> {
    let mut out = step.aux.clone();
    out.extend(
        OPTIMIZER_OUTPUTS
            .iter()
            .map(|name| crate::auxiliary::AuxOutput {
                name: (*name).to_owned(),
                role: crate::auxiliary::AuxRole::Metric,
            }),
    );
    out
}

/// One device's optimizer state and gradients, one entry per weight tensor in each list.
struct AdamState<'a> {
    weights: &'a [Tensor],
    grads: &'a [Tensor],
    m: &'a [Tensor],
    v: &'a [Tensor],
    /// Each weight's rule; a weight beyond the list is Adam's.
    updates: &'a [Update],
    /// Whether each weight is replicated (its gradient the same on every device, so counted
    /// once in the global norm); a weight beyond the list is sharded.
    replicated: &'a [bool],
    /// Whether each weight decays ([`decays`]); a weight beyond the list does not.
    decay: &'a [bool],
}

impl Adam {
    /// The update as [`with_adam`] applies it: `[applied, weights…, first moments…, second
    /// moments…]`, each state result its parameter unchanged unless `loss` and the global
    /// gradient norm over `axis` are finite (and sign descent's gradients, if any).
    fn update(
        &self,
        s: &Scope,
        loss: &Tensor,
        state: AdamState<'_>,
        t: &Tensor,
        axis: &crate::Axis,
    ) -> Result<(Vec<Tensor>, [Tensor; 2])> {
        let mut new_w = Vec::new();
        let mut new_m = Vec::new();
        let mut new_v = Vec::new();
        let AdamState {
            weights,
            grads,
            m,
            v,
            updates,
            replicated,
            decay,
        } = state;
        let sign_descent = |j: usize| matches!(updates.get(j), Some(Update::SignDescent { .. }));
        // The global norm of the Adam-trained gradients: the shards' squares summed over the
        // mesh, a replicated weight's (the same on every device) once.
        let mut sharded = s.scalar(0.0, DType::F32)?;
        let mut same = s.scalar(0.0, DType::F32)?;
        for (j, g) in grads.iter().enumerate() {
            if sign_descent(j) {
                continue;
            }
            let sq = squared_norm(&g.convert(DType::F32)?)?;
            if replicated.get(j).copied().unwrap_or(false) {
                same = same.add(&sq)?;
            } else {
                sharded = sharded.add(&sq)?;
            }
        }
        let grad_norm = sharded.psum(axis)?.add(&same)?.sqrt()?;
        let clip = match self.clip_grad_norm {
            Some(c) => Some(
                s.scalar(c, DType::F32)?
                    .div(&grad_norm.add_scalar(1e-6)?)?
                    .min(&s.scalar(1.0, DType::F32)?)?,
            ),
            None => None,
        };
        let lr_t = self.schedule.on_device(s, self.lr, t)?;
        let scheduled = !matches!(self.schedule, Schedule::Constant);
        // The verdict from what the update reads, never from what it writes (see
        // `with_adam`): the loss and the norm, and sign descent's gradients (outside the norm)
        // counted on each device and agreed by a `psum` of their own, only when there are any.
        let mut bad = non_finite_count(s, loss)?.add(&non_finite_count(s, &grad_norm)?)?;
        let signed: Vec<&Tensor> = (0..grads.len())
            .filter(|&j| sign_descent(j))
            .map(|j| &grads[j])
            .collect();
        if !signed.is_empty() {
            let mut local = s.scalar(0.0, DType::F32)?;
            for g in signed {
                local = local.add(&non_finite_count(s, g)?)?;
            }
            bad = bad.add(&local.psum(axis)?)?;
        }
        let applied = bad.eq(&s.scalar(0.0, DType::F32)?)?;
        // Each new state tensor is `old · keep − select(applied, −term, 0)`: with the step
        // applied, `keep` is the decay and the select the term, the same operations as
        // `β·old + term` bit for bit (`a − (−b)` is `a + b` in IEEE arithmetic); skipped,
        // `keep` is 1 and the select +0, and `old · 1 − 0` is `old` bit for bit (−0 too).
        // The old value is read once, by the elementwise pass that writes the new one, and
        // never after it, so XLA can write that pass over the donated buffer; a `select(new,
        // old)` read the old state after the new one existed, and XLA copied the whole state.
        let gate = |term: &Tensor| -> Result<Tensor> {
            applied
                .broadcast_to(term.dims())?
                .select(term, &term.zeros_like()?)
        };
        let decay_or_one = |beta: f64, dt: DType, dims: &[i64]| -> Result<Tensor> {
            applied
                .select(&s.scalar(beta, dt)?, &s.scalar(1.0, dt)?)?
                .broadcast_to(dims)
        };
        for (j, (((w, g), m), v)) in weights.iter().zip(grads).zip(m).zip(v).enumerate() {
            if let Some(&Update::SignDescent { rate }) = updates.get(j) {
                new_w.push(w.sub(&gate(&g.sign()?.scale(rate)?)?)?);
                new_m.push(m.clone());
                new_v.push(v.clone());
                continue;
            }
            let dt = w.dtype();
            let tt = t.convert(dt)?;
            let c = |x: f64| s.scalar(x, dt);
            let clipped;
            let g = match &clip {
                Some(scale) => {
                    clipped = g.mul(&scale.convert(dt)?.broadcast_to(g.dims())?)?;
                    &clipped
                }
                None => g,
            };
            let m2 = m
                .mul(&decay_or_one(self.beta1, dt, m.dims())?)?
                .sub(&gate(&g.scale(1.0 - self.beta1)?.neg()?)?)?;
            let v2 = v
                .mul(&decay_or_one(self.beta2, dt, v.dims())?)?
                .sub(&gate(&g.square()?.scale(1.0 - self.beta2)?.neg()?)?)?;
            // 1 − βᵗ = 1 − exp(t ln β)
            let bias =
                |beta: f64| -> Result<Tensor> { c(1.0)?.sub(&tt.mul(&c(beta.ln())?)?.exp()?) };
            let mhat = m2.div(&bias(self.beta1)?.broadcast_to(w.dims())?)?;
            let vhat = v2.div(&bias(self.beta2)?.broadcast_to(w.dims())?)?;
            let mut update = mhat.div(&vhat.sqrt()?.add_scalar(self.eps)?)?;
            if self.weight_decay > 0.0 && decay.get(j).copied().unwrap_or(false) {
                update = update.add(&w.scale(self.weight_decay)?)?;
            }
            let step = if scheduled {
                update.mul(&lr_t.convert(dt)?.broadcast_to(w.dims())?)?
            } else {
                update.scale(self.lr)?
            };
            new_w.push(w.sub(&gate(&step)?)?);
            new_m.push(m2);
            new_v.push(v2);
        }
        let mut results = vec![applied.convert(DType::I32)?];
        results.extend(new_w.into_iter().chain(new_m).chain(new_v));
        // The next step count, kept on the devices: it advances only when the step applied.
        results.push(t.add(&applied.convert(DType::F32)?)?);
        Ok((results, [lr_t, grad_norm]))
    }

    /// The optimizer alone on one device of `axis`, for costing: parameters `[loss, weights…,
    /// gradients…, first moments…, second moments…, step]` of `weights`' per-device types,
    /// results as [`with_adam`]'s after the loss. It is the graph `with_adam` appends to the
    /// training step, so a cost model prices the update XLA is given rather than a formula.
    pub fn update_function(&self, weights: &[TensorType], axis: &crate::Axis) -> Result<Function> {
        self.validate()?;
        let s = Scope::new("adam");
        let loss = s.param(TensorType::scalar(DType::F32));
        let mut lists: Vec<Vec<Tensor>> = Vec::new();
        for _ in 0..4 {
            lists.push(weights.iter().map(|t| s.param(t.clone())).collect());
        }
        let t = s.param(TensorType::scalar(DType::F32));
        let state = AdamState {
            weights: &lists[0],
            grads: &lists[1],
            m: &lists[2],
            v: &lists[3],
            updates: &[],
            replicated: &[],
            decay: &[],
        };
        let (mut results, report) = self.update(&s, &loss, state, &t, axis)?;
        results.extend(report);
        s.finish(&results)
    }
}

/// Parameter `first_param + k` aliases result `2 + k` for each of the `count` state tensors
/// (the results begin with the loss and the `applied` flag; the state parameters, weights,
/// moments and step count, are the last and in the results' order).
fn donated_state(first_param: usize, count: usize) -> Vec<Alias> {
    (0..count)
        .map(|k| Alias {
            param: first_param + k,
            result: 2 + k,
        })
        .collect()
}

/// How many of `x`'s elements are NaN or ±∞, as an `f32[]` on this device. `|x| < ∞` is false
/// exactly for those (every comparison with NaN is false). Counted in f32 so that the sum of
/// counts can only saturate, never wrap back to 0.
fn non_finite_count(s: &Scope, x: &Tensor) -> Result<Tensor> {
    let finite = x.abs()?.lt(&x.full_like(f64::INFINITY)?)?;
    let counts = TensorType::new(DType::F32, x.dims().to_vec());
    let bad = finite.select(&s.full(0.0, counts.clone())?, &s.full(1.0, counts)?)?;
    if x.rank() == 0 {
        Ok(bad)
    } else {
        bad.sum_all()
    }
}

/// `Σ g²` of a gradient, in f32, summed in two levels: each row (the last dimension) as
/// one dot of the row with itself, then the rows' sums.
///
/// Two levels, because a single running f32 sum over a stacked gradient (10⁶ squares at the
/// tiny preset) loses the small squares once it is large: each is below half a unit in the
/// last place of the sum and rounds away, so the norm came out visibly low on one device, and
/// less on more devices (each sums a shard), a different number for the same step on each
/// mesh. A row holds at most a few thousand squares, and a gradient at most a few thousand
/// rows, so neither sum is long enough to swamp its terms. Dots rather than `sum(g²)`:
/// XLA's CPU compiler fuses no producer into a reduction, so `g²` would be written to temp
/// first, one gradient's worth per weight at the end of the step.
fn squared_norm(g: &Tensor) -> Result<Tensor> {
    let dims = g.dims().to_vec();
    let Some(&cols) = dims.last() else {
        return g.square();
    };
    let rows: i64 = dims[..dims.len() - 1].iter().product();
    let dot = |x: &Tensor, batch: Vec<usize>, contract: Vec<usize>| {
        x.dot_general(
            x,
            crate::ir::DotDims {
                lhs_batch: batch.clone(),
                rhs_batch: batch,
                lhs_contract: contract.clone(),
                rhs_contract: contract,
            },
        )
    };
    if rows <= 1 {
        return dot(g, vec![], (0..dims.len()).collect());
    }
    let per_row = dot(&g.reshape(&[rows, cols])?, vec![0], vec![1])?;
    per_row.sum(&[0])
}

#[cfg(test)]
mod tests;
