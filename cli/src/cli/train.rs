//! `train`, the main job: a tiny model on N CPU devices with the schedule options its
//! `#[layer_stack]` attribute declares (the schedule flags override them, and the job says
//! which), on synthetic batches or a token file (`--data`), with progress on stderr, the report
//! on stdout, and optionally per-step metrics, a loss plot and checkpoints.

use std::path::{Path, PathBuf};

pub(crate) mod batches;
mod run;
mod shown;

pub use run::run;

use clap::Args;
use stackscan::fsdp::{Adam, Schedule};
use stackscan::plan::PlanOptions;
use stackscan_runtime::checkpoint::Checkpoint;
use stackscan_runtime::tokens::{TokenBatches, TokenFile, TokenFormat};
use stackscan_runtime::train::{check_checkpoint, check_hf_import, stored_weights};

use super::CliError;
use super::args::{RuntimeArgs, ScheduleArgs, learning_rate};
use stackscan_models::jobs::{Job, ModelName, MoeFlags};

/// Most steps one run may ask for: far beyond any run of the tiny models, and far from the
/// data position's overflow.
pub const MAX_STEPS: u64 = 1_000_000_000;

/// Arguments of `train`.
#[derive(Clone, Debug, Args)]
pub struct TrainArgs {
    /// The model (default: the one a Hugging Face `config.json` given by `--config` or
    /// `--init-from` says it is, else the first the command line knows).
    #[arg(long, value_name = "NAME", value_parser = super::args::ModelParser)]
    pub model: Option<ModelName>,
    /// The model's config: a preset (`tiny`, or the published size's name;
    /// an unknown name lists the model's), a TOML file (fields as in `models/configs/*.toml`; `extends =
    /// "<preset>"` names the base its missing fields come from, the tiny one by default; an
    /// unknown field is an error) or a Hugging Face `config.json` of the model.
    #[arg(long, value_name = "NAME|PATH")]
    pub config: Option<String>,
    /// Sequences per step over all devices (split evenly across them), instead of the
    /// config's `batch_per_device` × devices.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub batch: Option<u32>,
    /// Tokens per sequence, instead of the config's `seq`.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub seq: Option<u32>,
    /// Gradient accumulation: each step runs K micro-batches (each the batch above) inside
    /// one program and applies one update with their mean gradient, so a step trains on K
    /// times the batch at the activation memory of one micro-batch.
    #[arg(long, default_value_t = 1, value_name = "K", value_parser = clap::value_parser!(u32).range(1..=4096), allow_negative_numbers = true)]
    pub accumulate: u32,
    /// Plugin and devices.
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    /// Schedule flags.
    #[command(flatten)]
    pub schedule: ScheduleArgs,
    /// Expert parallelism (models with routed experts): an `fsdp × expert` mesh of devices/N × N, experts
    /// split over `expert`, tokens exchanged with all_to_all. N must divide the devices, and
    /// the devices the experts.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096), value_name = "N", allow_negative_numbers = true)]
    pub ep: u32,
    /// Context parallelism (models with a context-parallel form): each sequence split over N devices of an
    /// `fsdp × context` mesh (devices/N × N; `fsdp × context × expert` with `--ep`), keys and
    /// values gathered over `context` in attention. N must divide the devices and the
    /// sequence length.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096), value_name = "N", allow_negative_numbers = true)]
    pub cp: u32,
    /// MoE dispatch (models with routed experts): gather each routed row straight from the token
    /// matrix by index instead of scattering a top-k-fold replicated copy of the tokens.
    #[arg(long)]
    pub direct_token_gather: bool,
    /// MoE dispatch (models with routed experts): the backward's input gradient of the grouped expert
    /// products contracts the expert weights in place instead of a transposed copy of them.
    #[arg(long)]
    pub dlhs_transpose_rhs: bool,
    /// Steps in all (a resumed run continues to this step).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=MAX_STEPS), value_name = "N", allow_negative_numbers = true)]
    pub steps: u64,
    /// Adam's learning rate, a finite number above 0 (default: the model's, 0.01 for llama
    /// and qwen35, 0.003 for deepseek3).
    #[arg(long, value_parser = learning_rate, value_name = "LR", allow_negative_numbers = true)]
    pub lr: Option<f64>,
    /// How the learning rate moves: `constant`, or `--warmup-steps` of linear warmup then a
    /// `cosine` or `linear` decay to `--lr-min` at the last step; on the devices, reported per
    /// step (`lr` in the metrics and the progress line).
    #[arg(
        long,
        default_value = "constant",
        value_name = "KIND",
        value_parser = clap::builder::PossibleValuesParser::new(["constant", "cosine", "linear"]),
        hide_possible_values = true
    )]
    pub lr_schedule: String,
    /// Warmup steps of `--lr-schedule cosine|linear` (0 by default).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub warmup_steps: Option<u64>,
    /// The floor `--lr-schedule cosine|linear` reaches at the last step (0 by default).
    #[arg(long, value_name = "LR", allow_negative_numbers = true)]
    pub lr_min: Option<f64>,
    /// AdamW's decoupled weight decay λ, for matrices and larger except embeddings (never
    /// norms' scales or biases); 0: plain Adam.
    #[arg(
        long,
        default_value_t = 0.0,
        value_name = "LAMBDA",
        allow_negative_numbers = true
    )]
    pub weight_decay: f64,
    /// Weights AdamW's decay leaves alone, beyond the rule: a checkpoint name as `stackscan
    /// params` lists it (`layers.attn.wq`), `*` for any run of characters (`'*norm*'`);
    /// repeatable. Needs `--weight-decay`.
    #[arg(long, value_name = "PATTERN")]
    pub no_decay: Vec<String>,
    /// Clip every step's gradients to this global norm (over every shard and device); the
    /// norm before clipping is reported per step (`grad_norm`).
    #[arg(long, value_name = "NORM", allow_negative_numbers = true)]
    pub clip_grad_norm: Option<f64>,
    /// Exit 1 unless the mean loss of the last third of the steps fell below that of the first
    /// third (the README's main job and CI use it; a run that trains is otherwise a success).
    #[arg(long)]
    pub expect_loss_fall: bool,
    /// Seed of the weights' initialisation.
    #[arg(long, default_value_t = 17)]
    pub seed: u64,
    /// Train on this token file instead of synthetic batches: little-endian u16 ids (what
    /// nanoGPT-style pipelines write as `train.bin`), u32, or a text file read as bytes
    /// (`.txt`, `.md`: byte-level tokens). Each device reads its own consecutive windows, the
    /// same on every run.
    #[arg(long, value_name = "PATH")]
    pub data: Option<PathBuf>,
    /// How `--data` stores tokens (default: `bytes` for .txt/.md/.text, else `u16`).
    #[arg(long, requires = "data", value_name = "u16|u32|bytes")]
    pub data_format: Option<TokenFormat>,
    /// A Hugging Face `tokenizer.json`: `--data` and `--eval-data` are UTF-8 text it
    /// tokenises (once: the token file, u16 or u32 by the vocabulary, is kept in the cache
    /// under both files' hash and read like any other).
    #[arg(long, value_name = "PATH", conflicts_with = "data_format")]
    pub tokenizer: Option<PathBuf>,
    /// Write one JSON line per step to FILE: step, loss, seconds, tokens, tokens/s, lr,
    /// skipped, data position (appended to when resuming).
    #[arg(long, value_name = "FILE")]
    pub metrics: Option<PathBuf>,
    /// Write the run's loss curve as SVG to FILE at the end.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// Save a checkpoint every N steps (atomically, to DIR/latest.safetensors).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..), value_name = "N", allow_negative_numbers = true)]
    pub save_every: Option<u64>,
    /// Held-out token file (formats as `--data`): every `--eval-every` steps and at the end,
    /// the loss and perplexity of the current weights on its first `--eval-batches` global
    /// batches, nothing updated (a report line and a metrics line `eval_loss`,
    /// `eval_perplexity`).
    #[arg(long, value_name = "PATH")]
    pub eval_data: Option<PathBuf>,
    /// Steps between evaluations (10 with `--eval-data`). On synthetic batches (no `--data`)
    /// it alone turns evaluation on, on synthetic batches of seeds training never reads.
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::value_parser!(u64).range(1..),
        allow_negative_numbers = true
    )]
    pub eval_every: Option<u64>,
    /// Global batches (of a step's size) each evaluation reads.
    #[arg(long, default_value_t = 2, value_name = "M", value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub eval_batches: u64,
    /// Where `--save-every` writes.
    #[arg(long, default_value = "checkpoints", value_name = "DIR")]
    pub checkpoint_dir: PathBuf,
    /// Compile the step even if the persistent compile cache holds it, and store nothing
    /// (the cache lives under the stackscan cache directory; STACKSCAN_COMPILE_CACHE=off turns
    /// it off, a path moves it).
    #[arg(long)]
    pub no_compile_cache: bool,
    /// Compile and run even when the memory the step needs at least (weights, Adam moments
    /// and, on a CPU plugin, activations) is above what this machine has free.
    #[arg(long)]
    pub no_memory_check: bool,
    /// Resume from DIR/latest.safetensors: weights, Adam moments, step and data position.
    #[arg(long, value_name = "DIR")]
    pub resume: Option<PathBuf>,
    /// Start from a Hugging Face model directory (`config.json` and `model.safetensors`, or
    /// a sharded `model.safetensors.index.json`; f32, bf16 or f16) instead of random
    /// weights: its config is the model's unless `--config` is given, and every tensor is
    /// checked against the model before any is loaded.
    #[arg(long, value_name = "DIR", conflicts_with = "resume")]
    pub init_from: Option<PathBuf>,
}

/// The checkpoint file in `dir`.
fn latest(dir: &Path) -> PathBuf {
    dir.join("latest.safetensors")
}

/// What [`TrainArgs::check`] found and built before any plugin loads.
struct Checked {
    job: Job,
    options: PlanOptions,
    layout: stackscan::Mesh,
    /// The Hugging Face map of `--init-from`.
    hf: Option<stackscan::hf_map::HfMap>,
    /// The precision the config file declares, if it does.
    config_precision: Option<stackscan::Precision>,
    /// The step's memory per device, estimated (none with `--no-memory-check`): an
    /// accelerator's is checked once its client says how much it has.
    memory: Option<stackscan::cost::MemoryEstimate>,
    /// The config, as each checkpoint records it ([`super::recorded`]).
    config: stackscan_models::registry::ModelConfig,
}

impl TrainArgs {
    /// The model named, else the one a Hugging Face `config.json` of `--config` or
    /// `--init-from` says it is, else the one the `--resume` checkpoint records, else the
    /// first the command line knows.
    pub fn model(&self) -> ModelName {
        let chosen = self.model.is_some() || self.config.is_some() || self.init_from.is_some();
        if let (false, Some(dir)) = (chosen, &self.resume)
            && let Ok(Some(c)) = super::recorded::recorded(&latest(dir))
        {
            return c.model();
        }
        super::args::model_for(
            self.model,
            self.config.as_deref(),
            self.init_from.as_deref(),
        )
    }

    /// The model's config (`--config`, else the one the `--resume` checkpoint records when
    /// neither `--model` nor `--init-from` names another, else its tiny preset) with
    /// `--batch` and `--seq`.
    fn shaped_config(&self) -> Result<stackscan_models::registry::ModelConfig, CliError> {
        let devices = (self.runtime.devices / self.cp.max(1) as usize).max(1);
        let chosen = self.model.is_some() || self.config.is_some() || self.init_from.is_some();
        if let (false, Some(dir)) = (chosen, &self.resume)
            && let Some(c) = super::recorded::recorded(&latest(dir))?
        {
            return super::args::reshaped(c, self.batch, self.seq, devices).map_err(build_error);
        }
        super::args::shaped_config(
            self.model(),
            self.config.as_deref(),
            self.init_from.as_deref(),
            self.batch,
            self.seq,
            // `--batch` is split over the groups of devices that share sequences.
            devices,
        )
        .map_err(build_error)
    }

    fn adam(&self, job: &Job) -> Adam {
        let decay = |cosine| {
            let (warmup, total) = (self.warmup_steps.unwrap_or(0), self.steps);
            let min_lr = self.lr_min.unwrap_or(0.0);
            if cosine {
                Schedule::Cosine {
                    warmup,
                    total,
                    min_lr,
                }
            } else {
                Schedule::Linear {
                    warmup,
                    total,
                    min_lr,
                }
            }
        };
        Adam {
            lr: self.lr.unwrap_or(job.default_lr),
            weight_decay: self.weight_decay,
            schedule: match self.lr_schedule.as_str() {
                "cosine" => decay(true),
                "linear" => decay(false),
                _ => Schedule::Constant,
            },
            clip_grad_norm: self.clip_grad_norm,
            ..Adam::default()
        }
    }

    /// Everything that can be checked without a plugin, so a mistake costs no plugin load
    /// and its message is the only line the job prints.
    fn check(&self) -> Result<Checked, CliError> {
        self.check_flags()?;
        let devices = self.runtime.devices;
        let moe = MoeFlags {
            direct_token_gather: self.direct_token_gather,
            dlhs_transpose_rhs: self.dlhs_transpose_rhs,
        };
        let config = self.shaped_config()?;
        let recorded = config.clone();
        // The map `--init-from` reads through, made now so a model without one costs no
        // plugin load or compile.
        let hf =
            match &self.init_from {
                Some(dir) => Some(config.hf_weights().map_err(|e| {
                    CliError::Usage(format!("cannot import `{}`: {e}", dir.display()))
                })?),
                None => None,
            };
        let config_precision = config.precision();
        let (mut job, layout) =
            Job::on_layout(config, devices, self.ep as usize, self.cp as usize, moe).map_err(
                // A refused `--ep` or `--cp` names its flag first; other errors their op.
                |e| match e {
                    stackscan::Error::InvalidOp {
                        op: "expert_parallel" | "context_parallel",
                        message,
                    } => CliError::Usage(message),
                    e => CliError::Usage(format!("cannot build the declared model: {e}")),
                },
            )?;
        stackscan_models::decay::spare(&mut job.model, &self.no_decay, |p| {
            format!("`--no-decay {p}`")
        })
        .map_err(CliError::Usage)?;
        let options = self.schedule.apply(job.options);
        options
            .validate()
            .map_err(|e| CliError::Usage(format!("invalid schedule options: {e}")))?;
        self.adam(&job)
            .validate()
            .map_err(|e| CliError::Usage(format!("invalid optimizer flags (`--lr`, `--lr-schedule`, `--lr-min`, `--warmup-steps`, `--weight-decay`, `--clip-grad-norm`): {e}")))?;
        job.model.validate_on(&layout).map_err(|e| {
            CliError::Usage(format!("the model does not fit {devices} devices: {e}"))
        })?;
        let memory = if self.no_memory_check {
            None
        } else {
            let estimate = job
                .check_memory(
                    self.runtime.devices_kind(),
                    options,
                    self.accumulate as usize,
                )
                .map_err(too_big("train"))?;
            Some(estimate)
        };
        // Every tensor of `--init-from` checked against the model before anything compiles.
        if let (Some(dir), Some(map)) = (&self.init_from, &hf) {
            check_hf_import(map, dir, &stored_weights(&job.model))
                .map_err(|e| CliError::Usage(format!("cannot import `{}`: {e}", dir.display())))?;
        }
        Ok(Checked {
            job,
            options,
            layout,
            hf,
            config_precision,
            memory,
            config: recorded,
        })
    }

    /// Refuses flags that would do nothing in the combination given.
    fn check_flags(&self) -> Result<(), CliError> {
        if self.lr_schedule == "constant" {
            for (flag, given) in [
                ("--warmup-steps", self.warmup_steps.is_some()),
                ("--lr-min", self.lr_min.is_some()),
            ] {
                if given {
                    return Err(CliError::Usage(format!(
                        "`{flag}` shapes a decaying schedule: give `--lr-schedule cosine` or \
                         `linear` with it (the schedule is constant)"
                    )));
                }
            }
        }
        if !self.no_decay.is_empty() && self.weight_decay == 0.0 {
            return Err(CliError::Usage(
                "`--no-decay` spares weights from AdamW's decay; give `--weight-decay` above 0 \
                 with it (there is no decay to spare them from)"
                    .into(),
            ));
        }
        if self.tokenizer.is_some() && self.data.is_none() && self.eval_data.is_none() {
            return Err(CliError::Usage(
                "`--tokenizer` tokenizes the text of `--data` and `--eval-data`; give one of them"
                    .into(),
            ));
        }
        Ok(())
    }

    /// The token file of `--data`, checked against the model's vocabulary.
    fn data(&self, job: &Job) -> Result<Option<TokenBatches>, CliError> {
        match &self.data {
            Some(path) => self.token_batches(path, job).map(Some),
            None => Ok(None),
        }
    }

    /// The token file `path` (`--data-format`, else by its name) as the model's batches.
    fn token_batches(&self, text: &Path, job: &Job) -> Result<TokenBatches, CliError> {
        let path = text;
        let (path, format) = match &self.tokenizer {
            Some(t) => {
                let done = crate::tokenize::tokenize_text(t, path)
                    .map_err(|e| CliError::Usage(e.to_string()))?;
                tracing::info!(
                    "{} → {} tokens of a {}-token vocabulary ({}{})",
                    path.display(),
                    done.tokens,
                    done.vocab,
                    done.path.display(),
                    if done.fresh { "" } else { ", from the cache" }
                );
                (done.path, done.format)
            }
            None => (
                path.to_owned(),
                self.data_format
                    .unwrap_or_else(|| TokenFormat::for_path(path)),
            ),
        };
        // Tokens the user did not write themselves are named by the text they came from.
        let refused = |e: stackscan_runtime::Error| match &self.tokenizer {
            Some(t) => CliError::Usage(format!(
                "`{}` tokenized by `{}`: {e}",
                text.display(),
                t.display()
            )),
            None => CliError::Usage(e.to_string()),
        };
        let to_usize = |v: i64| usize::try_from(v).map_err(|e| CliError::failed(e.to_string()));
        let file = TokenFile::open(&path, format).map_err(refused)?;
        let batches = TokenBatches::new(
            file,
            to_usize(job.vocab)?,
            to_usize(job.batch_per_device)?,
            to_usize(job.seq)?,
        )
        .map_err(refused)?;
        Ok(batches)
    }

    /// The checkpoint of `--resume`, read and every tensor checked against its checksum and
    /// against `job`'s model (names, shapes, step and data position): a damaged file or one
    /// of another model is refused before the plugin loads, so the run writes nothing (no
    /// metrics, no checkpoint over the one it could not trust) and compiles nothing.
    fn resume_from(&self, job: &Job) -> Result<Option<(PathBuf, Checkpoint)>, CliError> {
        let Some(dir) = &self.resume else {
            return Ok(None);
        };
        let path = latest(dir);
        super::recorded::check_model(&path, self.model())?;
        let cannot = |e: stackscan_runtime::Error| CliError::Usage(format!("cannot resume: {e}"));
        let ckpt = Checkpoint::read(&path).map_err(cannot)?;
        check_checkpoint(&ckpt, &path, &job.model).map_err(cannot)?;
        Ok(Some((path, ckpt)))
    }
}

/// Refuses a step whose `estimate` does not fit the memory each of `client`'s devices may
/// allocate, where the plugin reports it (an accelerator; a CPU plugin's devices were checked
/// against the host's memory before it loaded). Nothing has compiled yet.
pub(crate) fn check_device_memory(
    client: &stackscan_runtime::Client,
    estimate: Option<&stackscan::cost::MemoryEstimate>,
    run: &'static str,
) -> Result<(), CliError> {
    match (estimate, client.device_memory_limit()) {
        (Some(e), Some(limit)) => {
            stackscan_models::memory::check_device_memory(e, limit).map_err(too_big(run))
        }
        _ => Ok(()),
    }
}

/// A refused memory check of a command that would `run` the model (`train`, `evaluate`),
/// as a usage error whose message is the reason.
pub(crate) fn too_big(run: &'static str) -> impl Fn(stackscan::Error) -> CliError {
    move |e| {
        let why = stackscan_models::memory::reason(e);
        CliError::Usage(format!("cannot {run} this model here: {why}"))
    }
}

/// A config that cannot be built, as a usage error.
fn build_error(e: stackscan::Error) -> CliError {
    CliError::Usage(format!("cannot build the declared model: {e}"))
}
