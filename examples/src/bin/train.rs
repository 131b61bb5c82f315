//! The main job: train the tiny Llama-style (or DeepSeek-V3-style) model on N CPU devices
//! with FSDP weight prefetch, printing the loss per step, step times and the compiled memory
//! statistics.
//!
//! ```text
//! cargo run --release -p stackscan-examples --bin train -- [--devices 4] [--steps 30]
//!     [--plugin cpu|cpu-0.115|PATH] [--no-prefetch] [--no-defer] [--unroll 1|2]
//!     [--model llama|deepseek3] [--lr 0.01 (llama), 0.003 (deepseek3)]
//! ```

use std::process::ExitCode;

use stackscan::fsdp::{Adam, StackModel};
use stackscan::plan::PlanOptions;
use stackscan_examples::deepseek3::{self, DeepSeek3Config};
use stackscan_examples::llama::{LlamaConfig, model, synthetic_batch};
use stackscan_runtime::train::{HostInput, Trainer};
use stackscan_runtime::{Client, ClientOptions, Mesh, Plugin, plugin};

struct Args {
    devices: usize,
    steps: usize,
    plugin: String,
    options: PlanOptions,
    /// `None`: the model's default.
    lr: Option<f64>,
    model: ModelKind,
}

#[derive(Clone, Copy)]
enum ModelKind {
    Llama,
    DeepSeek3,
}

/// Makes `(tokens, labels)` for one device's batch from a seed.
type Batches = Box<dyn Fn(u64) -> (Vec<i32>, Vec<i32>)>;

/// What the job trains: the model, a line describing it, and its data.
struct Job {
    model: StackModel,
    describe: String,
    batch: Batches,
}

fn job(kind: ModelKind) -> stackscan::Result<Job> {
    Ok(match kind {
        ModelKind::Llama => {
            let c = LlamaConfig::tiny();
            Job {
                model: model(&c)?,
                describe: format!(
                    "tiny Llama: {} layers, d {}, {}/{} heads × {}, FFN {}, vocab {}; {} × {} tokens per device",
                    c.layers,
                    c.d_model,
                    c.heads,
                    c.kv_heads,
                    c.head_dim,
                    c.ffn,
                    c.vocab,
                    c.batch_per_device,
                    c.seq
                ),
                batch: Box::new(move |seed| synthetic_batch(&c, c.batch_per_device, seed)),
            }
        }
        ModelKind::DeepSeek3 => {
            let c = DeepSeek3Config::tiny();
            Job {
                model: deepseek3::tiny_model()?,
                describe: format!(
                    "tiny DeepSeek-V3: {} layers ({} dense), d {}, MLA {} heads, {} experts top-{} in {} groups (top {}), {} shared, width {}, vocab {}; {} × {} tokens per device",
                    c.layers,
                    c.dense_layers,
                    c.d,
                    c.mla.heads,
                    c.experts,
                    c.top_k,
                    c.groups,
                    c.top_groups,
                    c.shared_experts,
                    c.expert_width,
                    c.vocab,
                    c.batch_per_device,
                    c.seq
                ),
                batch: Box::new(move |seed| {
                    deepseek3::synthetic_batch(&c, c.batch_per_device, seed)
                }),
            }
        }
    })
}

impl Args {
    fn adam(&self) -> Adam {
        Adam {
            lr: self.lr.unwrap_or(match self.model {
                ModelKind::Llama => 1e-2,
                // The routed experts' scaling (2.5) makes larger steps noisy at this size.
                ModelKind::DeepSeek3 => 3e-3,
            }),
            ..Adam::default()
        }
    }
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        devices: 4,
        steps: 30,
        plugin: "cpu".into(),
        options: PlanOptions::prefetch_deferred(),
        lr: None,
        model: ModelKind::Llama,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |what: &str| it.next().ok_or_else(|| format!("`{flag}` needs {what}"));
        match flag.as_str() {
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
            "--lr" => {
                a.lr = Some(
                    value("a number")?
                        .parse()
                        .map_err(|_| "`--lr` expects a number")?,
                )
            }
            "--unroll" => {
                a.options.unroll = value("1 or 2")?
                    .parse()
                    .map_err(|_| "`--unroll` expects 1 or 2")?
            }
            "--no-prefetch" => {
                a.options.prefetch_fsdp_weights = false;
                a.options.defer_grad_reduce_scatter = false;
            }
            "--no-defer" => a.options.defer_grad_reduce_scatter = false,
            "--model" => {
                a.model = match value("a model name")?.as_str() {
                    "llama" => ModelKind::Llama,
                    "deepseek3" => ModelKind::DeepSeek3,
                    other => {
                        return Err(format!(
                            "unknown model `{other}`; expected `llama` or `deepseek3`"
                        ));
                    }
                }
            }
            other => {
                return Err(format!(
                    "unknown argument `{other}`; expected `--devices`, `--steps`, `--plugin`, `--lr`, `--unroll`, `--no-prefetch`, `--no-defer` or `--model`"
                ));
            }
        }
    }
    if a.devices == 0 || a.steps == 0 {
        return Err("`--devices` and `--steps` must be at least 1".into());
    }
    // Everything that can be checked without a plugin is, so a mistake costs no plugin load
    // and its message is the only line the job prints.
    a.options
        .validate()
        .map_err(|e| format!("invalid schedule options: {e}"))?;
    a.adam()
        .validate()
        .map_err(|e| format!("invalid `--lr`: {e}"))?;
    job(a.model)
        .and_then(|j| j.model.validate(a.devices))
        .map_err(|e| format!("the model does not fit {} devices: {e}", a.devices))?;
    Ok(a)
}

fn run(a: &Args) -> Result<bool, Box<dyn std::error::Error>> {
    let job = job(a.model)?;
    let plugin = Plugin::load(plugin::resolve(&a.plugin)?)?;
    let client = Client::new(&plugin, &ClientOptions::cpu(a.devices))?;
    let mesh = Mesh::new(&client, "fsdp", a.devices)?;
    let m = job.model;
    println!(
        "{} on {} {} devices",
        job.describe,
        a.devices,
        client.platform()
    );
    let o = a.options;
    println!(
        "prefetch_fsdp_weights={} defer_grad_reduce_scatter={} unroll={}",
        o.prefetch_fsdp_weights, o.defer_grad_reduce_scatter, o.unroll
    );
    let mut trainer = Trainer::new(&client, &mesh, &m, o, a.adam(), 17)?;
    println!("plan:\n{}", trainer.plan().describe(&m.stack));
    println!("compiled in {:.2} s", trainer.compile_seconds());
    let mut losses = Vec::new();
    let mut times = Vec::new();
    for step in 0..a.steps {
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
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
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
