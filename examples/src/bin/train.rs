//! The main job: train the macro-declared tiny Llama
//! ([`llama_macro::TinyLlama`](stackscan_examples::llama_macro::TinyLlama)), or with `--model`
//! the tiny DeepSeek-V3-style or Qwen3.5-style model, on N CPU devices,
//! with the schedule options its `#[layer_stack]` attribute declares, printing the loss per
//! step, step times and the compiled memory statistics. The schedule flags override the
//! attribute's options, and the job says which ones they changed.
//!
//! ```text
//! cargo run --release -p stackscan-examples --bin train -- [--model llama|deepseek3|qwen35]
//!     [--config tiny|llama3-8b|PATH.toml (llama)]
//!     [--devices 4] [--steps 30] [--plugin cpu|cpu-0.115|PATH] [--no-prefetch] [--no-defer]
//!     [--unroll 1|2] [--lr 0.01 (llama, qwen35), 0.003 (deepseek3)]
//!     [--save-every N --checkpoint-dir DIR] [--resume DIR]
//! ```
//!
//! `--save-every N` writes `DIR/latest.safetensors` (default `DIR` = `checkpoints`) after every
//! N-th step, atomically, so a crash mid-save leaves the previous one; `--resume DIR` restores
//! weights, Adam moments and step from `DIR/latest.safetensors` and trains on from the step
//! after it to `--steps` in all, on exactly the batches an uninterrupted run would see.

use std::path::PathBuf;
use std::process::ExitCode;

use stackscan::fsdp::Adam;
use stackscan::plan::PlanOptions;
use stackscan_examples::jobs::{Job, ModelName};
use stackscan_runtime::train::{HostInput, Progress, Trainer};
use stackscan_runtime::{Client, ClientOptions, Mesh, Plugin, plugin};

struct Args {
    model: ModelName,
    /// `--config`: a config by name or path (Llama only).
    config: Option<String>,
    devices: usize,
    steps: usize,
    plugin: String,
    /// The schedule flags given, in order; each overrides the attribute's options.
    overrides: Vec<Override>,
    /// `None`: the model's default.
    lr: Option<f64>,
    save_every: Option<usize>,
    checkpoint_dir: PathBuf,
    resume: Option<PathBuf>,
}

/// A schedule flag that overrides the options of the model's `#[layer_stack]` attribute.
#[derive(Clone, Copy)]
enum Override {
    NoPrefetch,
    NoDefer,
    Unroll(usize),
}

impl Override {
    fn apply(self, o: &mut PlanOptions) {
        match self {
            Override::NoPrefetch => {
                o.prefetch_fsdp_weights = false;
                o.defer_grad_reduce_scatter = false;
            }
            Override::NoDefer => o.defer_grad_reduce_scatter = false,
            Override::Unroll(u) => o.unroll = u,
        }
    }

    fn flag(self) -> String {
        match self {
            Override::NoPrefetch => "--no-prefetch".into(),
            Override::NoDefer => "--no-defer".into(),
            Override::Unroll(u) => format!("--unroll {u}"),
        }
    }
}

/// The checkpoint file in `dir`.
fn latest(dir: &std::path::Path) -> PathBuf {
    dir.join("latest.safetensors")
}

impl Args {
    fn adam(&self, job: &Job) -> Adam {
        Adam {
            lr: self.lr.unwrap_or(job.default_lr),
            ..Adam::default()
        }
    }

    /// The attribute's options with the flags applied in order.
    fn options(&self, job: &Job) -> PlanOptions {
        let mut o = job.options;
        for f in &self.overrides {
            f.apply(&mut o);
        }
        o
    }
}

fn parse() -> Result<(Args, Job), String> {
    let mut a = Args {
        model: ModelName::Llama,
        config: None,
        devices: 4,
        steps: 30,
        plugin: "cpu".into(),
        overrides: Vec::new(),
        lr: None,
        save_every: None,
        checkpoint_dir: PathBuf::from("checkpoints"),
        resume: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |what: &str| it.next().ok_or_else(|| format!("`{flag}` needs {what}"));
        match flag.as_str() {
            "--model" => {
                a.model = value("a model name")?
                    .parse()
                    .map_err(|e: stackscan_examples::jobs::UnknownModel| e.to_string())?
            }
            "--devices" => {
                a.devices = value("a count")?
                    .parse()
                    .map_err(|_| "`--devices` expects a positive integer")?
            }
            "--steps" => {
                a.steps = value("a count")?
                    .parse()
                    .map_err(|_| "`--steps` expects a positive integer")?
            }
            "--plugin" => a.plugin = value("a plugin name or path")?,
            "--config" => a.config = Some(value("a config name or path")?),
            "--lr" => {
                a.lr = Some(
                    value("a number")?
                        .parse()
                        .map_err(|_| "`--lr` expects a number")?,
                )
            }
            "--unroll" => a.overrides.push(Override::Unroll(
                value("1 or 2")?
                    .parse()
                    .map_err(|_| "`--unroll` expects 1 or 2")?,
            )),
            "--no-prefetch" => a.overrides.push(Override::NoPrefetch),
            "--no-defer" => a.overrides.push(Override::NoDefer),
            "--save-every" => {
                a.save_every = Some(
                    value("a count")?
                        .parse()
                        .ok()
                        .filter(|&n: &usize| n > 0)
                        .ok_or("`--save-every` expects a positive integer")?,
                )
            }
            "--checkpoint-dir" => a.checkpoint_dir = value("a directory")?.into(),
            "--resume" => a.resume = Some(value("a directory")?.into()),
            other => {
                return Err(format!(
                    "unknown argument `{other}`; expected `--model`, `--config`, `--devices`, `--steps`, `--plugin`, `--lr`, `--unroll`, `--no-prefetch`, `--no-defer`, `--save-every`, `--checkpoint-dir` or `--resume`"
                ));
            }
        }
    }
    if a.devices == 0 || a.steps == 0 {
        return Err("`--devices` and `--steps` must be at least 1".into());
    }
    // Everything that can be checked without a plugin is, so a mistake costs no plugin load
    // and its message is the only line the job prints.
    let job = Job::with_config(a.model, a.config.as_deref())
        .map_err(|e| format!("cannot build the declared model: {e}"))?;
    a.options(&job)
        .validate()
        .map_err(|e| format!("invalid schedule options: {e}"))?;
    a.adam(&job)
        .validate()
        .map_err(|e| format!("invalid `--lr`: {e}"))?;
    job.model
        .validate(a.devices)
        .map_err(|e| format!("the model does not fit {} devices: {e}", a.devices))?;
    Ok((a, job))
}

fn run(a: &Args, job: &Job) -> Result<bool, Box<dyn std::error::Error>> {
    let plugin = Plugin::load(plugin::resolve(&a.plugin)?)?;
    let client = Client::new(&plugin, &ClientOptions::cpu(a.devices))?;
    let mesh = Mesh::new(&client, "fsdp", a.devices)?;
    let m = &job.model;
    println!(
        "{} on {} {} devices",
        job.describe,
        a.devices,
        client.platform()
    );
    let o = a.options(job);
    let source = if a.overrides.is_empty() {
        "from the `#[layer_stack]` attribute".to_owned()
    } else {
        let flags: Vec<String> = a.overrides.iter().map(|f| f.flag()).collect();
        format!(
            "from the `#[layer_stack]` attribute, overridden by {}",
            flags.join(", ")
        )
    };
    println!(
        "prefetch_fsdp_weights={} defer_grad_reduce_scatter={} unroll={} ({source})",
        o.prefetch_fsdp_weights, o.defer_grad_reduce_scatter, o.unroll
    );
    let mut trainer = Trainer::new(&client, &mesh, m, o, a.adam(job), 17)?;
    println!("plan:\n{}", trainer.plan().describe(&m.stack));
    println!("compiled in {:.2} s", trainer.compile_seconds());
    let mut start = 0;
    if let Some(dir) = &a.resume {
        let progress = trainer.load(&latest(dir))?;
        // The synthetic batches are a function of the step alone, so the data position is
        // the next step and the generator state is not needed.
        start = usize::try_from(progress.data_position)?;
        println!("resumed from {} at step {start}", latest(dir).display());
    }
    if a.save_every.is_some() {
        std::fs::create_dir_all(&a.checkpoint_dir)?;
    }
    let mut losses = Vec::new();
    let mut times = Vec::new();
    for step in start..a.steps {
        let inputs: Vec<Vec<HostInput>> = (0..a.devices)
            .map(|d| {
                let (t, l) = (job.batch)((step * a.devices + d) as u64);
                vec![HostInput::I32(t), HostInput::I32(l)]
            })
            .collect();
        let r = trainer.step(&inputs)?;
        println!(
            "step {:>3}  loss {:.4}  {:.3} s",
            step + 1,
            r.loss,
            r.seconds
        );
        losses.push(r.loss);
        times.push(r.seconds);
        if a.save_every.is_some_and(|n| (step + 1) % n == 0) {
            let progress = Progress {
                data_position: (step + 1) as u64,
                rng_state: 0,
            };
            trainer.save(&latest(&a.checkpoint_dir), progress)?;
        }
    }
    if losses.is_empty() {
        return Err(format!("the checkpoint is already at step {start} of {}", a.steps).into());
    }
    let steady: Vec<f64> = times.iter().skip(1).copied().collect();
    let mean = if steady.is_empty() {
        times[0]
    } else {
        steady.iter().sum::<f64>() / steady.len() as f64
    };
    let s = trainer.memory_stats()?;
    println!("mean step time (after the first): {mean:.3} s");
    println!(
        "compiled memory per device: arguments {} B, outputs {} B, temp {} B, generated code {} B",
        s.arguments, s.outputs, s.temp, s.generated_code
    );
    let (first, last) = (losses[0], *losses.last().unwrap_or(&losses[0]));
    println!("loss {first:.4} -> {last:.4}");
    // Each step sees a new batch, so single losses are noisy; whether the model learned is
    // judged on the mean of the first and the last third of the run. One step has nothing to
    // compare with: it trained if it ran.
    let third = (losses.len() / 3).max(1);
    let mean = |l: &[f32]| l.iter().sum::<f32>() / l.len() as f32;
    let (early, late) = (
        mean(&losses[..third]),
        mean(&losses[losses.len() - third..]),
    );
    if losses.len() >= 2 {
        println!("mean loss of the first {third} steps {early:.4}, of the last {third} {late:.4}");
    }
    Ok(losses.len() < 2 || late < early)
}

fn main() -> ExitCode {
    let (args, job) = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&args, &job) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!(
                "error: the mean loss of the last third of the steps did not fall below that of the first"
            );
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
