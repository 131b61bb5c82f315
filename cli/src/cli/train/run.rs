//! `train`'s run once its arguments are checked: the plugin, the trainer, the steps kept in
//! flight, checkpoints and evaluations on the way, and the summary.

use std::collections::VecDeque;
use std::io::Write;
use std::path::PathBuf;

use stackscan_runtime::checkpoint::Checkpoint;
use stackscan_runtime::tokens::TokenBatches;
use stackscan_runtime::train::{HostInput, Progress, Trainer};

use super::batches::{Batches, DEFAULT_EVAL_EVERY, Layout, step_inputs};
use super::shown::{IN_FLIGHT, InFlight, Shown, evaluate};
use super::{Checked, TrainArgs, latest};
use crate::cli::CliError;
use crate::cli::report::{learned, summarise, summarise_aux};
use crate::metrics::MetricsFile;
use crate::progress::{Display, TrainProgress};
use stackscan_models::jobs::Job;

/// Runs `train`; the report goes to `out`, progress to stderr (nothing when `quiet`).
pub fn run(a: &TrainArgs, quiet: bool, out: &mut dyn Write) -> Result<(), CliError> {
    let Checked {
        job,
        options,
        layout,
        hf,
        config_precision,
        memory,
        config,
    } = a.check()?;
    let data = a.data(&job)?;
    let eval = a.eval(&job)?;
    let resume = a.resume_from(&job)?;
    let devices = a.runtime.devices;
    let (client, mesh) = a.runtime.client_and_mesh(&layout, a.no_compile_cache)?;
    super::check_device_memory(&client, memory.as_ref(), "train")?;
    writeln!(
        out,
        "{} on {devices} {} devices",
        job.describe,
        client.platform()
    )?;
    let source = a.schedule.source(config_precision);
    writeln!(
        out,
        "prefetch_fsdp_weights={} defer_grad_reduce_scatter={} unroll={} precision={} ({source})",
        options.prefetch_fsdp_weights,
        options.defer_grad_reduce_scatter,
        options.unroll,
        options.precision
    )?;
    let batches = a.batches(data, &job, out)?;
    let adam = a.adam(&job);
    let k = a.accumulate as usize;
    let mut trainer = Trainer::accumulating(&client, &mesh, &job.model, options, adam, a.seed, k)?;
    describe_trainer(&trainer, &job, devices, out)?;
    if let (Some(dir), Some(map)) = (&a.init_from, &hf) {
        trainer.import_hf(map, dir)?;
        writeln!(out, "weights from {} (Hugging Face)", dir.display())?;
    }
    let total = usize::try_from(a.steps)?;
    let (start, position) = resumed(&mut trainer, resume, total, out)?;
    if a.save_every.is_some() {
        std::fs::create_dir_all(&a.checkpoint_dir)?;
    }
    let mut shown = a.shown(quiet, start + 1, total, adam.lr)?;
    let steps = Steps {
        batches,
        eval,
        split: Layout {
            devices: devices as u64,
            context: job.context as u64,
            seq: job.seq as usize,
        },
        accumulate: k,
        range: start..total,
        position,
        config: &config,
    };
    a.train_steps(&mut trainer, &steps, &mut shown, out)?;
    a.finish(&trainer, shown, out)
}

/// The steps a run takes and what feeds them.
struct Steps<'a> {
    batches: Batches<'a>,
    /// The held-out batches and the steps between evaluations.
    eval: Option<(Batches<'a>, u64)>,
    split: Layout,
    accumulate: usize,
    /// Step indices, from the checkpoint's (or 0) to `--steps`.
    range: std::ops::Range<usize>,
    /// The data position of the first step.
    position: u64,
    /// The config each checkpoint records ([`crate::cli::recorded`]).
    config: &'a stackscan_models::registry::ModelConfig,
}

/// Records every step still in flight, oldest first.
fn drain(
    trainer: &mut Trainer,
    shown: &mut Shown,
    in_flight: &mut VecDeque<InFlight>,
) -> Result<(), CliError> {
    while let Some(oldest) = in_flight.pop_front() {
        shown.record(trainer, oldest)?;
    }
    Ok(())
}

/// The trainer's side of the report: accumulation, the plan, the compile.
fn describe_trainer(
    trainer: &Trainer,
    job: &Job,
    devices: usize,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let k = trainer.micro_batches();
    if k > 1 {
        writeln!(
            out,
            "gradient accumulation: {k} micro-batches of {} sequences a step",
            job.batch_per_device * (devices / job.context) as i64
        )?;
    }
    writeln!(out, "plan:\n{}", trainer.plan().describe(&job.model.stack))?;
    writeln!(
        out,
        "compiled in {:.2} s ({})",
        trainer.compile_seconds(),
        trainer.cache_outcome()
    )?;
    Ok(())
}

/// Restores `resume` into `trainer`: the step to start from and the data position, `(0, 0)`
/// without one; a checkpoint already at `total` is an error.
fn resumed(
    trainer: &mut Trainer,
    resume: Option<(PathBuf, Checkpoint)>,
    total: usize,
    out: &mut dyn Write,
) -> Result<(usize, u64), CliError> {
    let (mut start, mut position) = (0usize, 0u64);
    if let Some((path, ckpt)) = resume {
        let progress = trainer.restore(&ckpt, &path)?;
        start = trainer.steps();
        position = progress.data_position;
        writeln!(
            out,
            "resumed from {} at step {start}, data position {position}",
            path.display()
        )?;
    }
    if start >= total {
        return Err(CliError::failed(format!(
            "the checkpoint is already at step {start} of {total}"
        )));
    }
    Ok((start, position))
}

impl TrainArgs {
    /// The evaluation `--eval-data` / `--eval-every` ask for: its batches and how often.
    fn eval<'j>(&self, job: &'j Job) -> Result<Option<(Batches<'j>, u64)>, CliError> {
        Ok(match (&self.eval_data, self.eval_every) {
            (Some(path), every) => Some((
                Batches::File(self.token_batches(path, job)?),
                every.unwrap_or(DEFAULT_EVAL_EVERY),
            )),
            (None, Some(_)) if self.data.is_some() => {
                return Err(CliError::Usage(
                    "`--eval-every` on `--data` needs the held-out tokens: give `--eval-data`"
                        .into(),
                ));
            }
            (None, Some(every)) => Some((Batches::HeldOut(&job.batch), every)),
            (None, None) => None,
        })
    }

    /// The training batches: the token file `data` (described on `out`), else the model's
    /// synthetic ones.
    fn batches<'j>(
        &self,
        data: Option<TokenBatches>,
        job: &'j Job,
        out: &mut dyn Write,
    ) -> Result<Batches<'j>, CliError> {
        let Some(d) = data else {
            return Ok(Batches::Synthetic(&job.batch));
        };
        let source = match (&self.data, &self.tokenizer) {
            (Some(text), Some(t)) => format!("{} tokenized by {}", text.display(), t.display()),
            _ => d.file().path().display().to_string(),
        };
        writeln!(
            out,
            "data: {source} ({} {} tokens, {} sequences per pass)",
            d.file().len(),
            d.file().format(),
            d.windows()
        )?;
        Ok(Batches::File(d))
    }

    /// The progress display and the metrics file (appended to on `--resume`), from step
    /// `first` of `total`.
    fn shown(&self, quiet: bool, first: usize, total: usize, lr: f64) -> Result<Shown, CliError> {
        let metrics = match &self.metrics {
            Some(p) => Some(
                MetricsFile::create(p, self.resume.is_some())
                    .map_err(|e| CliError::Usage(format!("cannot write `{}`: {e}", p.display())))?,
            ),
            None => None,
        };
        Ok(Shown {
            progress: TrainProgress::new(Display::for_stderr(quiet), first, total),
            metrics,
            lr,
            losses: Vec::new(),
            times: Vec::new(),
            aux: Vec::new(),
        })
    }

    /// Takes `steps`, saving and evaluating where the flags say.
    ///
    /// Two steps stay in flight: step k + 2 is uploaded and launched before step k's loss is
    /// read and shown, so the devices never wait for the display, the metrics or the next
    /// batch. Two, not one, because the CPU plugins queue a read-back behind the steps
    /// already launched: reading step k's loss returns only once step k + 1 is done, and with
    /// one in flight the devices would then wait for the next launch. A checkpoint or an
    /// evaluation drains the pipeline first: it sees the state after its own step.
    fn train_steps(
        &self,
        trainer: &mut Trainer,
        steps: &Steps<'_>,
        shown: &mut Shown,
        out: &mut dyn Write,
    ) -> Result<(), CliError> {
        let (split, k) = (steps.split, steps.accumulate);
        let total = steps.range.end;
        let mut position = steps.position;
        let mut in_flight: VecDeque<InFlight> = VecDeque::with_capacity(IN_FLIGHT + 1);
        for step in steps.range.clone() {
            let inputs = step_inputs(|i| steps.batches.get(i), position, split, k as u64);
            let tokens: usize = inputs
                .iter()
                .map(|i| match &i[0] {
                    HostInput::I32(t) => t.len(),
                    _ => 0,
                })
                .sum();
            let batch = trainer.upload(&inputs)?;
            let pending = trainer.launch(batch)?;
            position += split.groups() * k as u64;
            in_flight.push_back(InFlight {
                pending,
                step: step + 1,
                tokens,
                position,
            });
            if in_flight.len() > IN_FLIGHT
                && let Some(oldest) = in_flight.pop_front()
            {
                shown.record(trainer, oldest)?;
            }
            if self
                .save_every
                .is_some_and(|n| (step as u64 + 1).is_multiple_of(n))
            {
                drain(trainer, shown, &mut in_flight)?;
                let p = Progress {
                    data_position: position,
                    rng_state: 0,
                };
                let mut ckpt = trainer.checkpoint(p)?;
                crate::cli::recorded::record(&mut ckpt, steps.config);
                ckpt.write(&latest(&self.checkpoint_dir))?;
                tracing::info!(
                    "saved {} at step {}",
                    latest(&self.checkpoint_dir).display(),
                    step + 1
                );
            }
            if let Some((eval, every)) = &steps.eval
                && ((step as u64 + 1).is_multiple_of(*every) || step + 1 == total)
            {
                drain(trainer, shown, &mut in_flight)?;
                evaluate(
                    trainer,
                    eval,
                    split,
                    self.eval_batches,
                    step + 1,
                    shown,
                    out,
                )?;
            }
        }
        drain(trainer, shown, &mut in_flight)
    }

    /// The summary, the loss plot and the loss-fall check after the last step.
    fn finish(&self, trainer: &Trainer, shown: Shown, out: &mut dyn Write) -> Result<(), CliError> {
        let Shown {
            progress,
            metrics,
            losses,
            times,
            aux,
            ..
        } = shown;
        progress.finish();
        summarise(trainer, &losses, &times, out)?;
        summarise_aux(&aux, out)?;
        if let Some(path) = &self.plot {
            let title = format!("{}: training loss", self.model());
            std::fs::write(path, crate::plot::loss_curve(&title, &losses))
                .map_err(|e| CliError::failed(format!("writing `{}`: {e}", path.display())))?;
            writeln!(out, "wrote the loss curve to {}", path.display())?;
        }
        if let Some(f) = &metrics {
            writeln!(out, "wrote per-step metrics to {}", f.path().display())?;
        }
        if self.expect_loss_fall {
            learned(&losses)
        } else {
            Ok(())
        }
    }
}
