//! What becomes of finished steps and evaluations: the progress display, the metrics file and
//! the summary's records.

use std::io::Write;

use stackscan_runtime::train::{PendingStep, Trainer};

use super::batches::{Batches, Layout, step_inputs};
use crate::cli::CliError;
use crate::metrics::{MetricsFile, StepMetrics};
use crate::progress::{StepShown, TrainProgress};

/// Evaluates the current weights on the first `batches` global batches of `eval`: a report
/// line and, with `--metrics`, a line `{"step", "eval_loss", "eval_perplexity"}`.
pub(super) fn evaluate(
    trainer: &mut Trainer,
    eval: &Batches<'_>,
    layout: Layout,
    batches: u64,
    step: usize,
    shown: &mut Shown,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let k = trainer.micro_batches() as u64;
    let mut total = 0.0f64;
    for b in 0..batches {
        let inputs = step_inputs(|i| eval.get(i), b * layout.groups() * k, layout, k);
        total += f64::from(trainer.evaluate(&inputs)?);
    }
    let loss = total / batches as f64;
    let perplexity = loss.exp();
    writeln!(
        out,
        "eval after step {step}: loss {loss:.6}, perplexity {perplexity:.4} ({batches} batches)"
    )?;
    if let Some(f) = &mut shown.metrics {
        let line = serde_json::json!({
            "step": step,
            "eval_loss": loss,
            "eval_perplexity": perplexity,
        });
        f.write_value(&line)
            .map_err(|e| CliError::failed(format!("writing `{}`: {e}", f.path().display())))?;
    }
    Ok(())
}

/// Steps the main job keeps launched and not yet waited for (see `run`).
pub(super) const IN_FLIGHT: usize = 2;

/// A launched step and what its display and metrics line need.
pub(super) struct InFlight {
    pub(super) pending: PendingStep,
    pub(super) step: usize,
    pub(super) tokens: usize,
    /// The data position after the step.
    pub(super) position: u64,
}

/// Where finished steps go: the progress display, the metrics file, the summary.
pub(super) struct Shown {
    pub(super) progress: TrainProgress,
    pub(super) metrics: Option<MetricsFile>,
    pub(super) lr: f64,
    pub(super) losses: Vec<(usize, f32)>,
    pub(super) times: Vec<f64>,
    /// Each step's auxiliary outputs.
    pub(super) aux: Vec<Vec<(String, f32)>>,
}

impl Shown {
    /// Waits for `s`, then shows and records it.
    pub(super) fn record(&mut self, trainer: &mut Trainer, s: InFlight) -> Result<(), CliError> {
        let r = trainer.wait(s.pending)?;
        let line = StepShown {
            step: s.step,
            loss: r.loss,
            seconds: r.seconds,
            tokens: s.tokens,
            aux: r.aux.clone(),
        };
        self.progress.step(line, &mut std::io::stderr())?;
        if let Some(f) = &mut self.metrics {
            // The learning rate the devices applied (a schedule's), in its own key.
            let mut aux: std::collections::BTreeMap<String, f32> = r.aux.iter().cloned().collect();
            let lr = aux.remove("lr").map_or(self.lr, f64::from);
            let line = StepMetrics {
                step: s.step,
                loss: r.loss.is_finite().then_some(r.loss),
                seconds: r.seconds,
                tokens: s.tokens,
                tokens_per_second: s.tokens as f64 / r.seconds.max(1e-9),
                lr,
                skipped: r.skipped,
                data_position: s.position,
                aux,
            };
            f.write(&line)
                .map_err(|e| CliError::failed(format!("writing `{}`: {e}", f.path().display())))?;
        }
        self.losses.push((s.step, r.loss));
        self.aux.push(r.aux);
        self.times.push(r.seconds);
        Ok(())
    }
}
