//! The main job: train the tiny Llama-style model (or, with `--model qwen35`, the tiny
//! Qwen3.5-style hybrid) on N CPU devices with FSDP weight prefetch, printing the loss per
//! step, step times and the compiled memory statistics.
//!
//! ```text
//! cargo run --release -p stackscan-examples --bin train -- [--model llama|qwen35] [--devices 4] [--steps 30]
//!     [--plugin cpu|cpu-0.115|PATH] [--no-prefetch] [--no-defer] [--unroll 1|2] [--lr 0.01]
//! ```

use std::process::ExitCode;

use stackscan::fsdp::{Adam, StackModel};
use stackscan::plan::PlanOptions;
use stackscan_examples::llama::{LlamaConfig, model, synthetic_batch};
use stackscan_examples::qwen35::{self, Qwen35Config};
use stackscan_runtime::train::{HostInput, Trainer};
use stackscan_runtime::{Client, ClientOptions, Mesh, Plugin, plugin};

/// The model the job trains.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Model {
    Llama,
    Qwen35,
}

impl Model {
    fn build(self) -> stackscan::Result<StackModel> {
        match self {
            Model::Llama => model(&LlamaConfig::tiny()),
            Model::Qwen35 => qwen35::tiny_model(),
        }
    }

    /// `(tokens, labels)` for one device's batch.
    fn batch(self, seed: u64) -> (Vec<i32>, Vec<i32>) {
        match self {
            Model::Llama => {
                let c = LlamaConfig::tiny();
                synthetic_batch(&c, c.batch_per_device, seed)
            }
            Model::Qwen35 => {
                let c = Qwen35Config::tiny();
                qwen35::synthetic_batch(&c, c.batch_per_device, seed)
            }
        }
    }
}

struct Args {
    model: Model,
    devices: usize,
    steps: usize,
    plugin: String,
    options: PlanOptions,
    lr: f64,
}

impl Args {
    fn adam(&self) -> Adam {
        Adam {
            lr: self.lr,
            ..Adam::default()
        }
    }
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        model: Model::Llama,
        devices: 4,
        steps: 30,
        plugin: "cpu".into(),
        options: PlanOptions::prefetch_deferred(),
        lr: 1e-2,
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
            "--model" => {
                a.model = match value("`llama` or `qwen35`")?.as_str() {
                    "llama" => Model::Llama,
                    "qwen35" => Model::Qwen35,
                    other => {
                        return Err(format!(
                            "unknown model `{other}`; expected `llama` or `qwen35`"
                        ));
                    }
                }
            }
            "--lr" => {
                a.lr = value("a number")?
                    .parse()
                    .map_err(|_| "`--lr` expects a number")?
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
            other => {
                return Err(format!(
                    "unknown argument `{other}`; expected `--model`, `--devices`, `--steps`, `--plugin`, `--lr`, `--unroll`, `--no-prefetch` or `--no-defer`"
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
    a.model
        .build()
        .and_then(|m| m.validate(a.devices))
        .map_err(|e| format!("the model does not fit {} devices: {e}", a.devices))?;
    Ok(a)
}

fn run(a: &Args) -> Result<bool, Box<dyn std::error::Error>> {
    let plugin = Plugin::load(plugin::resolve(&a.plugin)?)?;
    let client = Client::new(&plugin, &ClientOptions::cpu(a.devices))?;
    let mesh = Mesh::new(&client, "fsdp", a.devices)?;
    let m = a.model.build()?;
    if a.model == Model::Qwen35 {
        let c = Qwen35Config::tiny();
        println!(
            "tiny Qwen3.5-style hybrid: {} layers of [GDN, GDN, GDN, attention], d {}, GDN {}/{} heads × {}, attention {}/{} heads × {}, dense FFN {}, vocab {}; {} × {} tokens per device on {} {} devices",
            c.layers,
            c.d_model,
            c.gdn.key_heads,
            c.gdn.value_heads,
            c.gdn.key_dim,
            c.attention.heads,
            c.attention.kv_heads,
            c.attention.head_dim,
            c.ffn,
            c.vocab,
            c.batch_per_device,
            c.seq,
            a.devices,
            client.platform()
        );
    } else {
        let cfg = LlamaConfig::tiny();
        println!(
            "tiny Llama: {} layers, d {}, {}/{} heads × {}, FFN {}, vocab {}; {} × {} tokens per device on {} {} devices",
            cfg.layers,
            cfg.d_model,
            cfg.heads,
            cfg.kv_heads,
            cfg.head_dim,
            cfg.ffn,
            cfg.vocab,
            cfg.batch_per_device,
            cfg.seq,
            a.devices,
            client.platform()
        );
    }
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
                let (t, l) = a.model.batch((step * a.devices + d) as u64);
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
