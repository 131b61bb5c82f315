//! The models the main job can train, by name: each with its macro-declared stack, the
//! schedule options that stack's `#[layer_stack]` attribute declares, a one-line description,
//! its default learning rate and its synthetic batches. One place to add a model, so the
//! binaries do not each keep their own list.
//!
//! ```
//! use stackscan_examples::jobs::{Job, ModelName, MoeFlags};
//!
//! let name: ModelName = "deepseek3".parse()?;
//! let job = Job::tiny(name)?;
//! assert!(job.options.prefetch_fsdp_weights);
//! assert_eq!(job.model.stack.len(), 8);
//!
//! // Expert parallelism 4 on 8 devices: a 2 × 4 `fsdp × expert` mesh.
//! let (_, mesh) = Job::tiny_on(name, 8, 4)?;
//! assert_eq!(mesh.describe(), "[\"fsdp\"=2, \"expert\"=4]");
//! assert!(Job::tiny_on(name, 8, 3).is_err());
//! assert!(Job::tiny_on("llama".parse()?, 8, 2).is_err());
//!
//! // The MoE dispatch options, for the models with routed experts only.
//! let on = MoeFlags { dlhs_transpose_rhs: true, ..MoeFlags::default() };
//! assert!(Job::configured(name, None, on).is_ok());
//! let e = Job::configured("llama".parse()?, None, on).unwrap_err().to_string();
//! assert!(e.contains("--dlhs-transpose-rhs"), "{e}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::str::FromStr;

use stackscan::fsdp::StackModel;
use stackscan::plan::PlanOptions;
use stackscan::{Axis, Error, Mesh, Result};

use crate::configs::{ModelConfig, Preset};
use crate::deepseek3::{self, DeepSeek3Config};
use crate::llama::{self, LlamaConfig};
use crate::llama_macro;
use crate::moe::FSDP_AXIS;
use crate::qwen35::{self, Qwen35Config};

/// A model the commands know by name (`train --model`, `plan`, `params`, `timeline`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ModelName {
    /// Llama-style decoder (tiny; published: Llama-3-8B, 32 identical layers).
    Llama,
    /// DeepSeek-V3-style: MLA, a dense prefix, then MoE layers (published: 3 dense + 58 MoE).
    #[value(name = "deepseek3")]
    DeepSeek3,
    /// Qwen3.5-style hybrid: blocks of `[GDN, GDN, GDN, attention]` (published:
    /// Qwen3.5-35B-A3B, 10 blocks).
    Qwen35,
}

impl ModelName {
    /// Every name, in the order the help text lists them.
    pub const ALL: [ModelName; 3] = [ModelName::Llama, ModelName::DeepSeek3, ModelName::Qwen35];

    /// The name as written on the command line.
    pub const fn as_str(self) -> &'static str {
        match self {
            ModelName::Llama => "llama",
            ModelName::DeepSeek3 => "deepseek3",
            ModelName::Qwen35 => "qwen35",
        }
    }
}

impl fmt::Display for ModelName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A model name that is none of [`ModelName::ALL`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownModel(pub String);

impl fmt::Display for UnknownModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = ModelName::ALL.iter().map(|n| format!("`{n}`")).collect();
        write!(
            f,
            "unknown model `{}`; expected one of {}",
            self.0,
            names.join(", ")
        )
    }
}

impl std::error::Error for UnknownModel {}

impl FromStr for ModelName {
    type Err = UnknownModel;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        ModelName::ALL
            .into_iter()
            .find(|n| n.as_str() == s)
            .ok_or_else(|| UnknownModel(s.to_owned()))
    }
}

/// Makes `(tokens, labels)` for one device's batch from a seed.
pub type Batches = Box<dyn Fn(u64) -> (Vec<i32>, Vec<i32>)>;

/// What the main job trains.
pub struct Job {
    /// The model, built from its macro-declared stack.
    pub model: StackModel,
    /// The schedule options of the stack's `#[layer_stack]` attribute.
    pub options: PlanOptions,
    /// One line saying what the model is.
    pub describe: String,
    /// The learning rate the model trains well with on its synthetic data.
    pub default_lr: f64,
    /// The synthetic batches, one per device and step.
    pub batch: Batches,
    /// The vocabulary size (token ids of `--data` must be below it).
    pub vocab: i64,
    /// Sequences per device batch.
    pub batch_per_device: i64,
    /// Tokens per sequence.
    pub seq: i64,
}

impl fmt::Debug for Job {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Job")
            .field("describe", &self.describe)
            .field("options", &self.options)
            .field("default_lr", &self.default_lr)
            .finish_non_exhaustive()
    }
}

impl Job {
    /// The tiny config of model `name`.
    pub fn tiny(name: ModelName) -> Result<Job> {
        Job::with_config(name, None)
    }

    /// Model `name` with a config by `spec` ([`ModelConfig::load`]: a preset, `tiny|llama3-8b`
    /// for Llama, `tiny|deepseek3` for DeepSeek-V3, `tiny|qwen35-35b-a3b` for Qwen3.5, a TOML
    /// path or a Hugging Face `config.json` path), or its tiny config.
    pub fn with_config(name: ModelName, config: Option<&str>) -> Result<Job> {
        Job::configured(name, config, MoeFlags::default())
    }

    /// [`Job::with_config`] with the MoE dispatch options `moe` (an error naming the flags
    /// for a model without routed experts, unless both are off).
    pub fn configured(name: ModelName, config: Option<&str>, moe: MoeFlags) -> Result<Job> {
        if name == ModelName::Llama && moe != MoeFlags::default() {
            return Err(Error::InvalidOp {
                op: "moe",
                message: format!(
                    "{}: the model `{name}` has no routed experts; the MoE options apply to \
                     `deepseek3` and `qwen35`",
                    moe.given().join(", ")
                ),
            });
        }
        let mut job = match ModelConfig::load_or(name, config, Preset::Tiny)? {
            ModelConfig::Llama(c) => llama_job(c)?,
            ModelConfig::DeepSeek3(c) => deepseek3_job(moe.deepseek3(c))?,
            ModelConfig::Qwen35(c) => qwen35_job(moe.qwen35(c))?,
        };
        let given = moe.given();
        if !given.is_empty() {
            job.describe
                .push_str(&format!("; MoE dispatch: {}", given.join(", ")));
        }
        Ok(job)
    }
}

impl Job {
    /// The tiny config of model `name` on `devices` with expert parallelism `ep`, and the mesh
    /// it runs on: one `fsdp` axis for `ep = 1`, else `fsdp × expert` with `ep` along `expert`
    /// (only models with routed experts; `ep` must divide the devices, and the devices the
    /// experts).
    pub fn tiny_on(name: ModelName, devices: usize, ep: usize) -> Result<(Job, Mesh)> {
        Job::on(name, None, devices, ep)
    }

    /// [`Job::tiny_on`] with `config` (a name or TOML path, [`Job::with_config`]) in place of
    /// the tiny config where given.
    pub fn on(
        name: ModelName,
        config: Option<&str>,
        devices: usize,
        ep: usize,
    ) -> Result<(Job, Mesh)> {
        Job::on_with(name, config, devices, ep, MoeFlags::default())
    }

    /// [`Job::on`] with the MoE dispatch options `moe` ([`Job::configured`]).
    pub fn on_with(
        name: ModelName,
        config: Option<&str>,
        devices: usize,
        ep: usize,
        moe: MoeFlags,
    ) -> Result<(Job, Mesh)> {
        if ep == 1 {
            let mesh = Mesh::line(&Axis::new(FSDP_AXIS, devices))?;
            return Ok((Job::configured(name, config, moe)?, mesh));
        }
        match name {
            ModelName::DeepSeek3 => {
                let c = config.map_or(Ok(DeepSeek3Config::tiny()), DeepSeek3Config::load)?;
                let c = moe.deepseek3(c).with_expert_parallel(devices, ep)?;
                let mut job = deepseek3_job(c)?;
                job.describe.push_str(&format!(
                    "; expert parallel: fsdp {} × expert {}",
                    c.expert_mesh.fsdp, c.expert_mesh.expert
                ));
                Ok((job, c.expert_mesh.mesh()?))
            }
            other => Err(Error::InvalidOp {
                op: "expert_parallel",
                message: format!(
                    "--ep {ep}: the model `{other}` has no routed experts; expert parallelism needs `deepseek3`"
                ),
            }),
        }
    }
}

/// The MoE dispatch options a job may switch on (`--direct-token-gather`,
/// `--dlhs-transpose-rhs`); both off by default, like the reference flags they are named
/// after. See [`DispatchOptions`](crate::moe::DispatchOptions).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MoeFlags {
    /// [`DispatchOptions::direct_token_gather`](crate::moe::DispatchOptions).
    pub direct_token_gather: bool,
    /// [`DispatchOptions::dlhs_transpose_rhs`](crate::moe::DispatchOptions).
    pub dlhs_transpose_rhs: bool,
}

impl MoeFlags {
    /// The flags that are on, as written on the command line.
    pub fn given(&self) -> Vec<&'static str> {
        [
            (self.direct_token_gather, "--direct-token-gather"),
            (self.dlhs_transpose_rhs, "--dlhs-transpose-rhs"),
        ]
        .into_iter()
        .filter_map(|(on, flag)| on.then_some(flag))
        .collect()
    }

    /// `c` with these options.
    pub fn deepseek3(&self, c: DeepSeek3Config) -> DeepSeek3Config {
        DeepSeek3Config {
            direct_token_gather: self.direct_token_gather,
            dlhs_transpose_rhs: self.dlhs_transpose_rhs,
            ..c
        }
    }

    /// `c` with these options.
    pub fn qwen35(&self, c: Qwen35Config) -> Qwen35Config {
        Qwen35Config {
            direct_token_gather: self.direct_token_gather,
            dlhs_transpose_rhs: self.dlhs_transpose_rhs,
            ..c
        }
    }
}

impl Job {
    /// Bytes the trainer keeps on the host for this model: every weight and its two Adam
    /// moments (on a CPU plugin the devices' buffers are host memory too).
    pub fn state_bytes(&self) -> u64 {
        self.model
            .parameters()
            .iter()
            .map(|p| 3 * p.elements() as u64 * p.spec.dtype.size_in_bytes() as u64)
            .sum()
    }

    /// Refuses a model whose training state cannot fit the memory this machine has free
    /// (`MemAvailable`, where the system reports it): a published-size config, a named file
    /// away from the tiny one, would otherwise be initialised until the process is killed.
    pub fn check_host_memory(&self) -> Result<()> {
        let need = self.state_bytes();
        match available_host_memory() {
            Some(free) if need > free => Err(Error::InvalidOp {
                op: "train",
                message: format!(
                    "its weights and Adam moments need {:.1} GB of host memory and {:.1} GB are \
                     available; train a smaller config (`--config tiny`), or list this one with \
                     `stackscan params`",
                    need as f64 / 1e9,
                    free as f64 / 1e9
                ),
            }),
            _ => Ok(()),
        }
    }
}

/// `MemAvailable` of `/proc/meminfo` in bytes; `None` where there is no such file.
fn available_host_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The macro-declared Llama at config `c`, with the options of its stack's attribute.
fn llama_job(c: LlamaConfig) -> Result<Job> {
    let (model, options) = llama_macro::for_config(&c)?;
    Ok(Job {
        model,
        options,
        describe: format!(
            "Llama (declared with the macros): {} layers, d {}, {}/{} heads × {}, FFN {}, vocab {}; {} × {} tokens per device",
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
        default_lr: 1e-2,
        batch: Box::new(move |seed| llama::synthetic_batch(&c, c.batch_per_device, seed)),
        vocab: c.vocab,
        batch_per_device: c.batch_per_device,
        seq: c.seq,
    })
}

/// The declared DeepSeek-V3-style model at config `c` (the stack of its depth), with the
/// options of that stack's attribute.
fn deepseek3_job(c: DeepSeek3Config) -> Result<Job> {
    let (model, options) = deepseek3::for_config(&c)?;
    Ok(Job {
        model,
        options,
        describe: format!(
            "DeepSeek-V3 (declared with the macros): {} layers ({} dense), d {}, MLA {} heads, {} experts top-{} in {} groups (top {}), {} shared, width {}, vocab {}; {} × {} tokens per device",
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
        // At 1e-2 the MoE model's loss barely falls in 30 steps (6.39 → 6.31).
        default_lr: 3e-3,
        vocab: c.vocab,
        batch_per_device: c.batch_per_device,
        seq: c.seq,
        batch: Box::new(move |seed| deepseek3::synthetic_batch(&c, c.batch_per_device, seed)),
    })
}

/// The Qwen3.5 job for `c`: the declared model with the stack of `c`'s depth and that
/// stack's options.
fn qwen35_job(c: Qwen35Config) -> Result<Job> {
    let (model, options) = qwen35::for_config(&c)?;
    Ok(Job {
        model,
        options,
        describe: format!(
            "Qwen3.5-style hybrid (declared with the macros): {} layers of [GDN, GDN, GDN, attention], d {}, GDN {}/{} heads × {}, attention {}/{} heads × {}, {} experts top-{} of width {} + a gated shared expert of {}, vocab {}; {} × {} tokens per device",
            c.layers,
            c.d_model,
            c.gdn.key_heads,
            c.gdn.value_heads,
            c.gdn.key_dim,
            c.attention.heads,
            c.attention.kv_heads,
            c.attention.head_dim,
            c.experts,
            c.top_k,
            c.expert_width,
            c.shared_width,
            c.vocab,
            c.batch_per_device,
            c.seq
        ),
        default_lr: 1e-2,
        batch: Box::new(move |seed| qwen35::synthetic_batch(&c, c.batch_per_device, seed)),
        vocab: c.vocab,
        batch_per_device: c.batch_per_device,
        seq: c.seq,
    })
}
