//! Several training steps against an independent reference: the [`Trainer`] (sharded step,
//! fused Adam, state donated and kept on the devices) against the unsharded single-device
//! reference program ([`reference_step`]) whose Adam runs on the host in f64 over weights and
//! moments the reference keeps itself. A one-step comparison cannot see state carried wrongly
//! from one step to the next (issue 24: a one-device step read its first LM head forever);
//! this one compares every step's loss and the weights after the last step.
//!
//! The initial weights come from the reference side ([`initial_weights`]) and are loaded into
//! the trainer as a step-0 checkpoint ([`start_from`]), so nothing of the reference is read
//! back from the trainer.
//!
//! ```no_run
//! use stackscan::fsdp::{Adam, StackModel};
//! use stackscan::plan::PlanOptions;
//! use stackscan_runtime::testing::{self, graph::Data, multi_step};
//! use stackscan_runtime::{Mesh, train::Trainer};
//!
//! /// `whole` takes the global batch of `tokens` tokens, `sharded` a device's share of it.
//! fn check(whole: &StackModel, sharded: &StackModel, tokens: usize, batches: &[Vec<Data>]) {
//!     let adam = Adam { lr: 1e-3, eps: 1e-3, ..Adam::default() };
//!     let client = testing::cpu_client(2);
//!     let w0 = multi_step::initial_weights(whole, 7);
//!     let expected = multi_step::Reference::new(&client, whole).train(&w0, batches, adam, None);
//!     let tol = multi_step::Tolerance::new(whole, tokens, adam, &expected);
//!     let mesh = Mesh::new(&client, "fsdp", 2).unwrap();
//!     let mut t = Trainer::new(&client, &mesh, sharded, PlanOptions::prefetch(), adam, 0).unwrap();
//!     multi_step::start_from(&mut t, sharded, &w0);
//!     let actual = multi_step::train(&mut t, batches, 2);
//!     multi_step::assert_follows("2 devices", &actual, &expected.trajectory, &tol);
//! }
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use stackscan::fsdp::{Adam, Init, StackModel, Update, reference_step};

use crate::Client;
use crate::checkpoint::{Checkpoint, Tensor};
use crate::train::{HostInput, Trainer, weight_names};
use stackscan::rng::Rng;

use super::fsdp::{Deviation, UNIT_ROUNDOFF, deviation, rtol_for};
use super::graph::{Arg, Compiled, Data};

/// What a run of several steps produced: each step's loss and the weights after the last.
#[derive(Clone, Debug, PartialEq)]
pub struct Trajectory {
    /// The loss of each step, in order.
    pub losses: Vec<f64>,
    /// The weights after the last step, in [`StackModel::weights`] order, natural layout.
    pub weights: Vec<Vec<f64>>,
}

/// Initial weights of `model` as its parameters declare them (normal with the declared
/// standard deviation, ones, zeros), drawn from `seed`; natural layout, in
/// [`StackModel::weights`] order.
pub fn initial_weights(model: &StackModel, seed: u64) -> Vec<Vec<f64>> {
    let mut rng = Rng::new(seed);
    model
        .weights()
        .iter()
        .map(|(spec, layers)| {
            let count = layers * spec.shape.iter().product::<i64>() as usize;
            match spec.init {
                Init::Normal(std) => (0..count).map(|_| rng.normal() * std).collect(),
                Init::Ones => vec![1.0; count],
                Init::Zeros => vec![0.0; count],
            }
        })
        .collect()
}

/// The unsharded reference program compiled on one device, for a model whose inputs hold the
/// whole global batch.
#[derive(Debug)]
pub struct Reference {
    exe: Compiled,
    arg_types: Vec<stackscan::TensorType>,
    inputs: usize,
    /// Each weight's update rule, in the step's weight order.
    updates: Vec<Update>,
    /// Whether each weight decays under AdamW: its spec's choice, else the rule
    /// ([`stackscan::fsdp::decays`]).
    decay: Vec<bool>,
}

impl Reference {
    /// Lowers and compiles [`reference_step`] of `whole` (its inputs are the global batch).
    pub fn new(client: &Client, whole: &StackModel) -> Reference {
        let f = reference_step(whole, 1).expect("the reference step lowers");
        Reference {
            updates: whole.weights().iter().map(|(p, _)| p.update).collect(),
            decay: whole
                .weights()
                .iter()
                .map(|(p, _)| {
                    p.decay
                        .unwrap_or_else(|| stackscan::fsdp::decays(&p.name, p.shape.len()))
                })
                .collect(),
            arg_types: f.param_types(),
            exe: Compiled::new(client, &f),
            inputs: whole.inputs.len(),
        }
    }

    /// The loss and every gradient at `weights` on `batch` (the global inputs).
    pub fn step(&self, batch: &[Data], weights: &[Vec<f64>]) -> (f64, Vec<Vec<f64>>) {
        assert_eq!(batch.len(), self.inputs, "one value list per model input");
        let data = batch
            .iter()
            .cloned()
            .chain(weights.iter().cloned().map(Data::F))
            .chain(std::iter::once(Data::F(vec![1.0])));
        let args: Vec<Arg> = self
            .arg_types
            .iter()
            .cloned()
            .zip(data)
            .map(|(ty, data)| Arg { ty, data })
            .collect();
        assert_eq!(
            args.len(),
            self.arg_types.len(),
            "inputs, weights and the seed"
        );
        let mut out = self.exe.run(&args);
        let loss = out.remove(0)[0];
        (loss, out)
    }

    /// Trains from `initial` over `batches`, one Adam step each, Adam on the host in f64 with
    /// the update [`with_adam`](stackscan::fsdp::with_adam) applies. `stale`, for negative
    /// tests, names a weight whose forward and backward keep reading its initial value while
    /// its updates still go to the state (what issue 24's stale LM head did).
    pub fn train(
        &self,
        initial: &[Vec<f64>],
        batches: &[Vec<Data>],
        adam: Adam,
        stale: Option<usize>,
    ) -> ReferenceRun {
        let mut weights = initial.to_vec();
        let mut m: Vec<Vec<f64>> = initial.iter().map(|w| vec![0.0; w.len()]).collect();
        let mut v = m.clone();
        let mut losses = Vec::with_capacity(batches.len());
        let mut gradient_norms = Vec::with_capacity(batches.len());
        for (k, batch) in batches.iter().enumerate() {
            let mut seen = weights.clone();
            if let Some(j) = stale {
                seen[j].clone_from(&initial[j]);
            }
            let (loss, grads) = self.step(batch, &seen);
            assert!(
                loss.is_finite(),
                "reference loss of step {} is {loss}",
                k + 1
            );
            losses.push(loss);
            gradient_norms.push(norm(grads.iter().flatten()));
            let t = (k + 1) as f64;
            let bias1 = 1.0 - adam.beta1.powf(t);
            let bias2 = 1.0 - adam.beta2.powf(t);
            let lr = adam.schedule.at(adam.lr, (k + 1) as u64);
            // Global-norm clipping over the Adam-trained gradients.
            let trained = grads
                .iter()
                .enumerate()
                .filter(|(j, _)| !matches!(self.updates.get(*j), Some(Update::SignDescent { .. })))
                .flat_map(|(_, g)| g.iter());
            let scale = adam
                .clip_grad_norm
                .map_or(1.0, |c| (c / (norm(trained) + 1e-6)).min(1.0));
            for (j, (((w, g), m), v)) in weights
                .iter_mut()
                .zip(&grads)
                .zip(&mut m)
                .zip(&mut v)
                .enumerate()
            {
                if let Some(&Update::SignDescent { rate }) = self.updates.get(j) {
                    // XLA's `sign`: 0 for a zero gradient, whose weight stays.
                    for (wi, gi) in w.iter_mut().zip(g) {
                        *wi -= rate * if *gi == 0.0 { 0.0 } else { gi.signum() };
                    }
                    continue;
                }
                let decay = if self.decay.get(j).copied().unwrap_or(false) {
                    adam.weight_decay
                } else {
                    0.0
                };
                for i in 0..w.len() {
                    let g = g[i] * scale;
                    m[i] = adam.beta1 * m[i] + (1.0 - adam.beta1) * g;
                    v[i] = adam.beta2 * v[i] + (1.0 - adam.beta2) * g * g;
                    let update = (m[i] / bias1) / ((v[i] / bias2).sqrt() + adam.eps);
                    w[i] -= lr * (update + decay * w[i]);
                }
            }
        }
        ReferenceRun {
            trajectory: Trajectory { losses, weights },
            gradient_norms,
        }
    }
}

/// What the reference's run produced: its trajectory and, for [`Tolerance::new`], the norm
/// of each step's gradient (all weights as one vector).
#[derive(Clone, Debug, PartialEq)]
pub struct ReferenceRun {
    /// Losses and final weights.
    pub trajectory: Trajectory,
    /// `‖g_k‖₂` of each step.
    pub gradient_norms: Vec<f64>,
}

fn norm<'a>(values: impl Iterator<Item = &'a f64>) -> f64 {
    values.map(|x| x * x).sum::<f64>().sqrt()
}

/// Rows `d·per .. (d+1)·per` of every global input for each of `devices`: the trainer's
/// per-device batch.
pub fn split(batch: &[Data], devices: usize) -> Vec<Vec<HostInput>> {
    (0..devices)
        .map(|d| {
            batch
                .iter()
                .map(|input| match input {
                    Data::I(v) => {
                        let per = v.len() / devices;
                        HostInput::I32(v[d * per..(d + 1) * per].to_vec())
                    }
                    Data::F(v) => {
                        let per = v.len() / devices;
                        HostInput::F32(
                            v[d * per..(d + 1) * per]
                                .iter()
                                .map(|&x| x as f32)
                                .collect(),
                        )
                    }
                })
                .collect()
        })
        .collect()
}

/// Loads `weights` (natural layout, [`StackModel::weights`] order) into `trainer` as a step-0
/// checkpoint: zero moments, Adam's count at its start.
pub fn start_from(trainer: &mut Trainer, model: &StackModel, weights: &[Vec<f64>]) {
    let outer = model.outer_params.len();
    let mut tensors = Vec::with_capacity(3 * weights.len());
    for prefix in ["", "adam.m.", "adam.v."] {
        for (j, ((name, (spec, layers)), w)) in weight_names(model)
            .into_iter()
            .zip(model.weights())
            .zip(weights)
            .enumerate()
        {
            let mut shape = if j >= outer {
                vec![layers as i64]
            } else {
                Vec::new()
            };
            shape.extend_from_slice(&spec.shape);
            let data = if prefix.is_empty() {
                w.iter().map(|&x| x as f32).collect()
            } else {
                vec![0.0; w.len()]
            };
            tensors.push(Tensor {
                name: format!("{prefix}{name}"),
                shape,
                data,
            });
        }
    }
    let metadata: BTreeMap<String, String> = ["step", "data_position", "rng_state"]
        .into_iter()
        .map(|k| (k.to_owned(), "0".to_owned()))
        .collect();
    trainer
        .restore(
            &Checkpoint { tensors, metadata },
            Path::new("initial weights"),
        )
        .expect("the initial weights load");
}

/// The trainer's weights in natural layout, read through a checkpoint.
pub fn weights(trainer: &Trainer) -> Vec<Vec<f64>> {
    let ckpt = trainer
        .checkpoint(crate::train::Progress::default())
        .expect("the state reads back");
    ckpt.tensors[..trainer.num_weights()]
        .iter()
        .map(|t| t.data.iter().map(|&x| f64::from(x)).collect())
        .collect()
}

/// Runs one step of `trainer` per global batch (split over `devices`); its losses and weights
/// afterwards. Every step must apply its update.
pub fn train(trainer: &mut Trainer, batches: &[Vec<Data>], devices: usize) -> Trajectory {
    let losses = batches
        .iter()
        .map(|b| {
            let report = trainer.step(&split(b, devices)).expect("a training step");
            assert!(!report.skipped, "a step was skipped");
            f64::from(report.loss)
        })
        .collect();
    Trajectory {
        losses,
        weights: weights(trainer),
    }
}

/// The tolerances of comparing a trainer's run of several Adam steps with the reference's,
/// derived from the computation and the reference's own run (see [`Tolerance::new`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Tolerance {
    /// Bound on each step's loss, relative to the reference's.
    pub loss: Vec<f64>,
    /// Bound on the final weights, norm-wise relative to the reference's (all weights as one
    /// vector).
    pub weights: f64,
}

impl Tolerance {
    /// The tolerance of comparing the trainer's run with `reference`'s, both training `model`
    /// (the reference's, whose inputs are the global batch of `tokens` tokens) with `adam`.
    ///
    /// One step's loss and gradients agree to ρ = [`rtol_for`] (norm-wise). Over several
    /// steps the question is what Adam does with the gradients' deviation. Its step
    /// `u = m̂ / (√v̂ + ε)` normalises each element by its own history, so an element whose
    /// gradient is within rounding of zero can have its step flipped from −1 to +1: one
    /// rounding error becomes a change of 2·lr in a weight, and no bound relative to the
    /// gradients holds. ε caps that amplification. For one element, with `s = √v̂`:
    /// `u − u' = Δm̂/(s + ε) − m̂'·Δs/((s + ε)(s' + ε))`; m̂ is an average of the element's
    /// gradients so far (weights summing to 1) and s their weighted RMS, so a deviation `e_j`
    /// in step j's gradient gives `|Δm̂|, |Δs| ≤ max_j |e_j|`, and `|m̂'| ≤ c_k·s'` by
    /// Cauchy–Schwarz, `c_k² = Σ_j a_j²/b_j` over the two averages' weights ([`moment_ratio`],
    /// 1 at step 1, below 1.17 for β₁ 0.9, β₂ 0.95). Hence `|Δu| ≤ (1 + c_k)·max_j|e_j|/ε`
    /// exactly, and norm-wise, with `e_j = ρ·‖g_j‖` the step-j gradient's bound:
    ///
    /// - `‖Δu_k‖ ≤ ((1 + c_k)/ε)·√(Σ_{j≤k} e_j²)`;
    /// - `‖Δw_k‖ ≤ B_k = lr·Σ_{i≤k} ‖Δu_i‖`, the weights' deviation after k steps (both runs
    ///   start from the same weights);
    /// - the loss of step k sees those weights: `|ΔL_k| ≤ ρ·|L_k| + ‖g_k‖·B_{k−1}` (first
    ///   order in the deviation);
    /// - the trainer keeps its weights and runs Adam in f32, the reference in f64: each step
    ///   adds at most a few roundings of each weight, `2·u` relative per step.
    ///
    /// So the weights' bound is `B_K / ‖w_K‖ + 2·K·u` and step k's loss bound is
    /// `ρ + ‖g_k‖·B_{k−1} / |L_k|`, every quantity taken from the reference's run. It
    /// neglects that a weight deviation feeds back into the next steps' gradients (its
    /// curvature term, ‖H‖·B_k): with a modest lr, B_k stays orders of magnitude below the
    /// gradients' own rounding. It also assumes no discrete choice (an MoE router's top-k)
    /// flips on a deviation of that size; one that did would fail loudly, not pass wrongly.
    ///
    /// The bound is useful only when ε is not negligible against the gradients: with lr
    /// 10⁻³, ε 10⁻³ (a tenth of a typical gradient element here, so Adam still normalises
    /// most of them), ‖g‖ ≈ 1 and ‖w‖ ≈ 15, five steps give about 1.5·ρ on the weights. With
    /// Adam's usual ε of 10⁻⁸ it would be vacuous, and rightly so: there one unlucky element
    /// moves the final weights by 2·lr, about what a stale LM head does to them in a step.
    pub fn new(
        model: &StackModel,
        tokens: usize,
        adam: Adam,
        reference: &ReferenceRun,
    ) -> Tolerance {
        let rho = rtol_for(model, tokens);
        let run = &reference.trajectory;
        let mut errors2 = 0.0;
        let mut drift = 0.0;
        let mut loss = Vec::with_capacity(run.losses.len());
        for (k, (l, g)) in run.losses.iter().zip(&reference.gradient_norms).enumerate() {
            loss.push(rho + g * drift / l.abs());
            errors2 += (rho * g).powi(2);
            drift += adam.lr * (1.0 + moment_ratio(adam, k + 1)) / adam.eps * errors2.sqrt();
        }
        let steps = run.losses.len() as f64;
        let weights = drift / norm(run.weights.iter().flatten()) + 2.0 * steps * UNIT_ROUNDOFF;
        Tolerance { loss, weights }
    }
}

/// `c_k = √(Σ_j a_j²/b_j)`, the bound on `|m̂|/√v̂` after `k` steps: `a_j` and `b_j` are the
/// weights Adam's bias-corrected first and second moments give step j's gradient (each set
/// sums to 1).
pub fn moment_ratio(adam: Adam, k: usize) -> f64 {
    let (b1, b2) = (adam.beta1, adam.beta2);
    let (n1, n2) = (1.0 - b1.powi(k as i32), 1.0 - b2.powi(k as i32));
    (0..k as i32)
        .map(|age| {
            let a = (1.0 - b1) * b1.powi(age) / n1;
            let b = (1.0 - b2) * b2.powi(age) / n2;
            a * a / b
        })
        .sum::<f64>()
        .sqrt()
}

/// How far a trajectory lies from the reference.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TrajectoryDeviation {
    /// Each step's `|loss_k − reference_k| / |reference_k|`.
    pub losses: Vec<f64>,
    /// The final weights' [`Deviation`], all tensors as one vector.
    pub weights: Deviation,
}

impl TrajectoryDeviation {
    /// The worst step's loss deviation.
    pub fn loss(&self) -> f64 {
        self.losses.iter().copied().fold(0.0, f64::max)
    }

    /// The worst step's loss deviation as a fraction of its tolerance, and the weights'.
    pub fn of_tolerance(&self, tol: &Tolerance) -> (f64, f64) {
        let loss = self
            .losses
            .iter()
            .zip(&tol.loss)
            .map(|(d, t)| d / t)
            .fold(0.0, f64::max);
        (loss, self.weights.normwise / tol.weights)
    }
}

/// The deviation of `actual` from `expected`.
pub fn trajectory_deviation(actual: &Trajectory, expected: &Trajectory) -> TrajectoryDeviation {
    assert_eq!(actual.losses.len(), expected.losses.len(), "step counts");
    let losses = actual
        .losses
        .iter()
        .zip(&expected.losses)
        .map(|(a, e)| {
            let d = (a - e).abs() / e.abs();
            // A NaN loss must fail every comparison.
            if d.is_nan() { f64::INFINITY } else { d }
        })
        .collect();
    TrajectoryDeviation {
        losses,
        weights: deviation(&actual.weights.concat(), &expected.weights.concat()),
    }
}

/// Asserts `actual` follows `expected` within `tol`: every step's loss within its bound and
/// the final weights norm-wise; returns the deviation.
pub fn assert_follows(
    what: &str,
    actual: &Trajectory,
    expected: &Trajectory,
    tol: &Tolerance,
) -> TrajectoryDeviation {
    let d = trajectory_deviation(actual, expected);
    for (k, (dev, bound)) in d.losses.iter().zip(&tol.loss).enumerate() {
        assert!(
            dev <= bound,
            "{what}: the loss of step {} deviates by {dev:.3e} > {bound:.3e}: losses {:?}, \
             reference {:?}",
            k + 1,
            actual.losses,
            expected.losses
        );
    }
    assert!(
        d.weights.normwise <= tol.weights,
        "{what}: the final weights deviate by {:.3e} > {:.3e} norm-wise (worst element {:.3e} \
         of the scale)",
        d.weights.normwise,
        tol.weights,
        d.weights.elementwise
    );
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `|m̂| ≤ c_k·√v̂`: exactly 1 at the first step (both moments hold one gradient), and for
    /// β₁ 0.9, β₂ 0.95 at most √(0.2/(1 − 0.81/0.95)) ≈ 1.165 however long the run.
    #[test]
    fn the_moment_ratio_starts_at_one_and_stays_below_its_limit() {
        let adam = Adam::default();
        assert!((moment_ratio(adam, 1) - 1.0).abs() < 1e-12);
        let limit = f64::sqrt(0.01 / 0.05 / (1.0 - 0.81 / 0.95));
        let mut last = 1.0;
        for k in [2, 5, 50, 5000] {
            let c = moment_ratio(adam, k);
            assert!(last <= c && c < limit, "step {k}: {c} (limit {limit})");
            last = c;
        }
        assert!(limit - last < 1e-6, "{last} does not approach {limit}");
    }
}
