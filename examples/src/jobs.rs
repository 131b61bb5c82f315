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
use stackscan::{Axis, Error, LayerStack, Mesh, Result};

use crate::deepseek3::{self, DeepSeek3Config, TinyDeepSeek3};
use crate::llama::{self, LlamaConfig};
use crate::llama_macro;
use crate::moe::FSDP_AXIS;
use crate::qwen35::{self, Qwen35Config, Qwen35Tiny};

/// A model the main job knows by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelName {
    /// The tiny Llama-style decoder.
    Llama,
    /// The tiny DeepSeek-V3-style model: MLA, a dense prefix, then MoE layers.
    DeepSeek3,
    /// The tiny Qwen3.5-style hybrid: blocks of `[GDN, GDN, GDN, attention]`.
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

    /// Model `name` with a config by name or path (`--config tiny|llama3-8b|path.toml`), or
    /// its tiny config. Only the Llama's config is data so far; another model given one is an
    /// error naming the flag.
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
        if let (Some(_), ModelName::DeepSeek3 | ModelName::Qwen35) = (config, name) {
            return Err(stackscan::Error::InvalidOp {
                op: "config",
                message: format!("`--config` is read for `--model llama` only, not `{name}`"),
            });
        }
        let mut job = match name {
            ModelName::Llama => {
                let c = match config {
                    Some(spec) => LlamaConfig::load(spec)?,
                    None => LlamaConfig::tiny(),
                };
                let (model, options) = llama_macro::for_config(&c)?;
                Job {
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
                    batch: Box::new(move |seed| {
                        llama::synthetic_batch(&c, c.batch_per_device, seed)
                    }),
                    vocab: c.vocab,
                    batch_per_device: c.batch_per_device,
                    seq: c.seq,
                }
            }
            ModelName::DeepSeek3 => deepseek3_job(moe.deepseek3(DeepSeek3Config::tiny()))?,
            ModelName::Qwen35 => {
                let c = Qwen35Config {
                    direct_token_gather: moe.direct_token_gather,
                    dlhs_transpose_rhs: moe.dlhs_transpose_rhs,
                    ..Qwen35Config::tiny()
                };
                Job {
                    model: qwen35::model::<Qwen35Tiny>(&c)?,
                    options: Qwen35Tiny::OPTIONS,
                    describe: format!(
                        "tiny Qwen3.5-style hybrid: {} layers of [GDN, GDN, GDN, attention], d {}, GDN {}/{} heads × {}, attention {}/{} heads × {}, {} experts top-{} of width {} + a gated shared expert of {}, vocab {}; {} × {} tokens per device",
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
                    batch: Box::new(move |seed| {
                        qwen35::synthetic_batch(&c, c.batch_per_device, seed)
                    }),
                    vocab: c.vocab,
                    batch_per_device: c.batch_per_device,
                    seq: c.seq,
                }
            }
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
        if config.is_some() {
            // The configs read from files are Llama's; this names that first.
            Job::configured(name, config, moe)?;
        }
        match name {
            ModelName::DeepSeek3 => {
                let c = moe
                    .deepseek3(DeepSeek3Config::tiny())
                    .with_expert_parallel(devices, ep)?;
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
}

/// The DeepSeek-V3-style job at config `c` (its stack is the tiny one).
fn deepseek3_job(c: DeepSeek3Config) -> Result<Job> {
    Ok(Job {
        model: deepseek3::model::<TinyDeepSeek3>(&c)?,
        options: TinyDeepSeek3::OPTIONS,
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
        // At 1e-2 the MoE model's loss barely falls in 30 steps (6.39 → 6.31).
        default_lr: 3e-3,
        vocab: c.vocab,
        batch_per_device: c.batch_per_device,
        seq: c.seq,
        batch: Box::new(move |seed| deepseek3::synthetic_batch(&c, c.batch_per_device, seed)),
    })
}
