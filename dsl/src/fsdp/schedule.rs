//! The learning-rate schedule and the weight-decay mask of the optimizer
//! ([`with_adam`](super::with_adam)): what moves with the step count on the devices, and
//! which weights AdamW decays.

use crate::builder::{Scope, Tensor};
use crate::dtype::DType;
use crate::error::{Error, Result};

/// How the learning rate moves with the step count `t` (1-based, the count on the devices, so
/// a schedule needs no recompile per step).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[non_exhaustive]
pub enum Schedule {
    /// `lr` at every step.
    #[default]
    Constant,
    /// `lr·t/warmup` for the first `warmup` steps, then `min_lr + (lr − min_lr)·½(1 + cos πp)`
    /// with `p = (t − warmup)/(total − warmup)` clamped to `[0, 1]`: `min_lr` from `total` on.
    Cosine {
        /// Warmup steps (0: none).
        warmup: u64,
        /// The step at which the decay reaches `min_lr`.
        total: u64,
        /// The floor.
        min_lr: f64,
    },
    /// As [`Schedule::Cosine`] with a straight decay, `lr − (lr − min_lr)·p`.
    Linear {
        /// Warmup steps (0: none).
        warmup: u64,
        /// The step at which the decay reaches `min_lr`.
        total: u64,
        /// The floor.
        min_lr: f64,
    },
}

impl Schedule {
    /// The learning rate at step `t` (1-based) for peak `lr`, in f64: what the program
    /// computes in f32 on the devices.
    pub fn at(&self, lr: f64, t: u64) -> f64 {
        let Some((warmup, total, min_lr, cosine)) = self.parts() else {
            return lr;
        };
        let t = t as f64;
        let warm = if warmup == 0 {
            1.0
        } else {
            (t / warmup as f64).min(1.0)
        };
        let span = total.saturating_sub(warmup).max(1) as f64;
        let p = ((t - warmup as f64) / span).clamp(0.0, 1.0);
        let decayed = if cosine {
            min_lr + (lr - min_lr) * 0.5 * (1.0 + (std::f64::consts::PI * p).cos())
        } else {
            lr - (lr - min_lr) * p
        };
        decayed * warm
    }

    /// `(warmup, total, min_lr, cosine)` of a decaying schedule; `None` for a constant one.
    fn parts(&self) -> Option<(u64, u64, f64, bool)> {
        match *self {
            Schedule::Constant => None,
            Schedule::Cosine {
                warmup,
                total,
                min_lr,
            } => Some((warmup, total, min_lr, true)),
            Schedule::Linear {
                warmup,
                total,
                min_lr,
            } => Some((warmup, total, min_lr, false)),
        }
    }

    /// The program's `f32[]` learning rate at the step count `t` (an `f32[]`).
    pub(super) fn on_device(&self, s: &Scope, lr: f64, t: &Tensor) -> Result<Tensor> {
        let c = |x: f64| s.scalar(x, DType::F32);
        let Some((warmup, total, min_lr, cosine)) = self.parts() else {
            return c(lr);
        };
        let warm = if warmup == 0 {
            c(1.0)?
        } else {
            t.scale(1.0 / warmup as f64)?.min(&c(1.0)?)?
        };
        let span = total.saturating_sub(warmup).max(1) as f64;
        let p = t
            .add_scalar(-(warmup as f64))?
            .scale(1.0 / span)?
            .max(&c(0.0)?)?
            .min(&c(1.0)?)?;
        let shape = if cosine {
            // ½(1 + cos πp)
            p.scale(std::f64::consts::PI)?
                .cos()?
                .add_scalar(1.0)?
                .scale(0.5)?
        } else {
            c(1.0)?.sub(&p)?
        };
        shape.scale(lr - min_lr)?.add_scalar(min_lr)?.mul(&warm)
    }

    pub(super) fn validate(&self, lr: f64) -> Result<()> {
        let Some((warmup, total, min_lr, _)) = self.parts() else {
            return Ok(());
        };
        let reject = |field, value, expected| {
            Err(Error::InvalidHyperParameter {
                optimizer: "schedule",
                field,
                value,
                expected,
            })
        };
        if !(min_lr.is_finite() && (0.0..=lr).contains(&min_lr)) {
            return reject("min_lr", min_lr, "a number from 0 to the learning rate");
        }
        if total < warmup || total == 0 {
            return reject(
                "total",
                total as f64,
                "at least 1 and at least the warmup steps",
            );
        }
        Ok(())
    }
}

/// Whether AdamW's weight decay applies to the weight `name` of rank `rank`: matrices and
/// larger, except embeddings (a path segment `embed`, `embedding`, `embed_tokens`,
/// `tok_embeddings` or `wte`); never norms' scales, biases or other vectors. What
/// MaxText, torchtitan and nanoGPT's users expect by default.
pub fn decays(name: &str, rank: usize) -> bool {
    const EMBEDDINGS: [&str; 5] = [
        "embed",
        "embedding",
        "embed_tokens",
        "tok_embeddings",
        "wte",
    ];
    rank >= 2 && !name.split('.').any(|segment| EMBEDDINGS.contains(&segment))
}
