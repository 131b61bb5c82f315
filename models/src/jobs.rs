//! The models the main job can train, by name: each with its macro-declared stack, the
//! schedule options that stack's `#[layer_stack]` attribute declares, a one-line description,
//! its default learning rate and its synthetic batches. One place to add a model, so the
//! binaries do not each keep their own list.
//!
//! ```
//! use stackscan_models::jobs::{Job, ModelName, MoeFlags};
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

use stackscan::fsdp::StackModel;
use stackscan::plan::PlanOptions;
use stackscan::{Axis, Error, Mesh, Result};

use crate::moe::FSDP_AXIS;
pub use crate::registry::{BUILT_IN, ModelConfig, ModelName, Preset, UnknownModel};

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
    /// The synthetic batches of whole sequences, one per `fsdp` group and step (one per device
    /// without context parallelism).
    pub batch: Batches,
    /// The vocabulary size (token ids of `--data` must be below it).
    pub vocab: i64,
    /// Sequences per device batch.
    pub batch_per_device: i64,
    /// Tokens per sequence (the whole sequence, not a device's piece of it).
    pub seq: i64,
    /// Devices each sequence is split over (`--cp`); a device's inputs are positions
    /// `c·seq/context ..` of its group's batch, `c` its coordinate on `context`.
    pub context: usize,
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

    /// Model `name` with a config by `spec` ([`ModelName::load`]: a preset, a TOML path or a
    /// Hugging Face `config.json` path), or its tiny config.
    pub fn with_config(name: ModelName, config: Option<&str>) -> Result<Job> {
        Job::configured(name, config, MoeFlags::default())
    }

    /// [`Job::with_config`] with the MoE dispatch options `moe` (an error naming the flags
    /// for a model without routed experts, unless both are off).
    pub fn configured(name: ModelName, config: Option<&str>, moe: MoeFlags) -> Result<Job> {
        Job::from_config(name.load_or(config, Preset::Tiny)?, moe)
    }

    /// The job of config `c` with the MoE dispatch options `moe`.
    pub fn from_config(c: ModelConfig, moe: MoeFlags) -> Result<Job> {
        let c = if moe == MoeFlags::default() {
            c
        } else {
            c.with_moe_flags(moe).ok_or_else(|| Error::InvalidOp {
                op: "moe",
                message: format!(
                    "{}: the model `{}` has no routed experts; the MoE options apply to {}",
                    moe.given().join(", "),
                    c.model(),
                    with_experts()
                ),
            })?
        };
        let (model, options) = c.build()?;
        let mut describe = c.describe();
        let given = moe.given();
        if !given.is_empty() {
            describe.push_str(&format!("; MoE dispatch: {}", given.join(", ")));
        }
        let tokens = c.tokens();
        let default_lr = c.model().default_lr();
        Ok(Job {
            model,
            options,
            describe,
            default_lr,
            batch: Box::new(move |seed| c.architecture().synthetic_batch(seed)),
            vocab: tokens.vocab,
            batch_per_device: tokens.batch_per_device,
            seq: tokens.seq,
            context: 1,
        })
    }
}

/// The built-in models with routed experts, as an error lists them.
fn with_experts() -> String {
    let names: Vec<String> = BUILT_IN
        .iter()
        .filter(|m| {
            m.preset(Preset::Tiny)
                .is_ok_and(|c| c.architecture().experts().is_some())
        })
        .map(|m| format!("`{m}`"))
        .collect();
    names.join(" and ")
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
        Job::on_config(name.load_or(config, Preset::Tiny)?, devices, ep, moe)
    }

    /// The job of config `c` on `devices` with expert parallelism `ep` and the MoE dispatch
    /// options `moe`, and the mesh it runs on ([`Job::tiny_on`]).
    pub fn on_config(
        c: ModelConfig,
        devices: usize,
        ep: usize,
        moe: MoeFlags,
    ) -> Result<(Job, Mesh)> {
        Job::on_layout(c, devices, ep, 1, moe)
    }

    /// [`Job::on_config`] with each sequence split over `cp` devices (context parallelism):
    /// the mesh is `fsdp × context` (`fsdp × context × expert` with `ep > 1`), and only models
    /// whose layers have a context-parallel form accept `cp > 1`.
    pub fn on_layout(
        c: ModelConfig,
        devices: usize,
        ep: usize,
        cp: usize,
        moe: MoeFlags,
    ) -> Result<(Job, Mesh)> {
        if cp != 1 {
            let (c, mesh) = c.context_parallel(devices, cp, ep)?;
            let mut job = Job::from_config(c, moe)?;
            job.context = cp;
            return Ok((job, mesh));
        }
        if ep == 1 {
            let mesh = Mesh::line(&Axis::new(FSDP_AXIS, devices))?;
            return Ok((Job::from_config(c, moe)?, mesh));
        }
        let name = c.model();
        match c.expert_parallel(devices, ep) {
            Some(split) => {
                let (c, mesh) = split?;
                Ok((Job::from_config(c, moe)?, mesh))
            }
            None => Err(Error::InvalidOp {
                op: "expert_parallel",
                message: format!(
                    "--ep {ep}: the model `{name}` has no routed experts; expert parallelism needs {}",
                    with_parallel_experts()
                ),
            }),
        }
    }
}

/// The built-in models with expert parallelism, as an error lists them.
fn with_parallel_experts() -> String {
    let names: Vec<String> = BUILT_IN
        .iter()
        .filter(|m| {
            m.preset(Preset::Tiny)
                .is_ok_and(|c| c.expert_parallel(1, 1).is_some())
        })
        .map(|m| format!("`{m}`"))
        .collect();
    names.join(" or ")
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
}
