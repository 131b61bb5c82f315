//! The flags more than one command takes, each defined once as a `#[derive(Args)]` struct
//! that a command flattens into its own (`#[command(flatten)]`), and the value parsers that
//! reject bad values before anything runs. A new shared flag is one field here; a flag of one
//! command goes in that command's struct.

use clap::Args;
use stackscan::Precision;
use stackscan::plan::{PlanOptions, PrefetchIssue};
use stackscan_models::memory::Devices;
use stackscan_runtime::{AcceleratorOptions, MAX_CPU_DEVICES};

/// Where the programs run.
#[derive(Clone, Debug, Args)]
pub struct RuntimeArgs {
    /// PJRT plugin: `cpu` (XLA's CPU plugin, fetched into the cache on first use),
    /// `cpu-0.115` (a newer CPU plugin), `tpu`, `cuda`, or a path to a plugin `.so`
    /// ($STACKSCAN_PJRT_PLUGIN, when set, wins over a name).
    #[arg(long, default_value = "cpu", value_name = "NAME|PATH")]
    pub plugin: String,
    /// Devices on the FSDP mesh axis: virtual devices of the CPU plugin, 1 to 4096. The
    /// model's sharded dimensions must divide by it.
    #[arg(long, default_value_t = 4, value_parser = device_count, value_name = "N", allow_negative_numbers = true)]
    pub devices: usize,
    /// On the CUDA plugin: the share of each GPU's memory it may use, in (0, 1] (its
    /// `memory_fraction`; default: the plugin's, 0.75).
    #[arg(long, value_name = "F", value_parser = memory_fraction)]
    pub gpu_memory_fraction: Option<f32>,
    /// On the CUDA plugin: whether that share is allocated when the client starts (its
    /// `preallocate`; default: the plugin's, true).
    #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set)]
    pub gpu_preallocate: Option<bool>,
}

impl RuntimeArgs {
    /// The plugin's client on these devices, taking compiled programs from the persistent
    /// compile cache unless `no_cache` (a second run of the same step compiles nothing), and
    /// the mesh of `layout` on it: what `train` and `eval` run on.
    pub fn client_and_mesh(
        &self,
        layout: &stackscan::Mesh,
        no_cache: bool,
    ) -> Result<(stackscan_runtime::Client, stackscan_runtime::Mesh), stackscan_runtime::Error>
    {
        use stackscan_runtime::{Client, CompileCache, Mesh, Plugin, plugin};
        let plugin = Plugin::load(plugin::resolve(&self.plugin)?)?;
        let cache = CompileCache::from_env().filter(|_| !no_cache);
        let client = Client::for_devices_with(&plugin, self.devices, self.accelerator())?
            .with_compile_cache(cache);
        let mesh = Mesh::for_layout(&client, layout)?;
        Ok((client, mesh))
    }

    /// Where these devices keep their buffers, for the memory check ([`devices_kind`]).
    pub fn devices_kind(&self) -> Devices {
        devices_kind(&self.plugin, self.devices)
    }

    /// The accelerator memory options these flags ask for.
    pub fn accelerator(&self) -> AcceleratorOptions {
        AcceleratorOptions {
            memory_fraction: self.gpu_memory_fraction,
            preallocate: self.gpu_preallocate,
        }
    }
}

/// Where `devices` devices of `plugin` keep their buffers, for the memory check: a CPU
/// plugin's (named `cpu…`, or a path to a file whose name says `cpu`) in this machine's
/// memory, any other plugin's on accelerators of their own. The plugin of
/// `$STACKSCAN_PJRT_PLUGIN` wins, as it does when the plugin loads.
pub fn devices_kind(plugin: &str, devices: usize) -> Devices {
    let plugin = std::env::var(stackscan_runtime::plugin::PLUGIN_ENV)
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| plugin.to_owned());
    let name = std::path::Path::new(&plugin)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or(plugin);
    if name.contains("cpu") {
        Devices::Host(devices)
    } else {
        Devices::Accelerators(devices)
    }
}

/// A share of device memory: a number in (0, 1].
pub fn memory_fraction(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(f) if f > 0.0 && f <= 1.0 => Ok(f),
        Ok(_) => Err("expected a share of memory in (0, 1]".to_owned()),
        Err(e) => Err(format!("not a number: {e}")),
    }
}

/// Schedule flags: each overrides one option of the model's `#[layer_stack]` attribute.
#[derive(Clone, Copy, Debug, Default, Args)]
pub struct ScheduleArgs {
    /// Gather each layer's weights when it runs, not one layer ahead (also turns off the
    /// deferred reduce-scatter, which needs prefetch).
    #[arg(long)]
    pub no_prefetch: bool,
    /// Reduce-scatter each layer's gradient at the end of its own backward step instead of
    /// overlapping it with the next one.
    #[arg(long)]
    pub no_defer: bool,
    /// Layers per loop body: 2 double-buffers the gathered weights (ping-pong), 1 keeps one
    /// buffer.
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=2), value_name = "1|2")]
    pub unroll: Option<u8>,
    /// Emit no `_scheduling_group_id` / `xla_explicit_fsdp` frontend attributes (the tags
    /// TPU's latency-hiding scheduler reads to overlap each prefetch with the step before).
    #[arg(long)]
    pub no_scheduling_tags: bool,
    /// Mixed precision: `bf16` gathers weights and computes in bf16 (norms, softmaxes,
    /// router, recurrences and loss in f32) and reduces gradients in f32;
    /// `bf16-reduce-bf16` reduces them in bf16 too; `f32` casts nothing. Master weights and
    /// Adam's moments stay f32 either way. Default: the config file's, else the
    /// `#[layer_stack]` attribute's.
    #[arg(long, value_parser = precision, value_name = "POLICY")]
    pub precision: Option<Precision>,
    /// Where each step issues the next layer's prefetch gather: `with-input` (beside the
    /// layer, where collectives are asynchronous), `after-compute` (after it: less memory
    /// where they are not) or `auto` (chosen for the plugin: after compute on the CPU
    /// plugins, with the input elsewhere; the default).
    #[arg(long, value_parser = prefetch_issue, value_name = "POINT")]
    pub prefetch_issue: Option<PrefetchIssue>,
}

/// A prefetch issue point by its name (`auto`, `with-input`, `after-compute`).
pub fn prefetch_issue(s: &str) -> Result<PrefetchIssue, String> {
    s.parse::<PrefetchIssue>().map_err(|e| e.to_string())
}

impl ScheduleArgs {
    /// `options` with these flags applied.
    pub fn apply(&self, mut options: PlanOptions) -> PlanOptions {
        if self.no_prefetch {
            options.prefetch_fsdp_weights = false;
            options.defer_grad_reduce_scatter = false;
        }
        if self.no_defer {
            options.defer_grad_reduce_scatter = false;
        }
        if let Some(u) = self.unroll {
            options.unroll = usize::from(u);
        }
        if self.no_scheduling_tags {
            options.scheduling_tags = false;
        }
        if let Some(p) = self.precision {
            options.precision = p;
        }
        if let Some(i) = self.prefetch_issue {
            options.prefetch_issue = i;
        }
        options
    }

    /// The flags given, as written on the command line (empty when none was).
    pub fn given(&self) -> Vec<String> {
        let mut flags = Vec::new();
        if self.no_prefetch {
            flags.push("--no-prefetch".to_owned());
        }
        if self.no_defer {
            flags.push("--no-defer".to_owned());
        }
        if let Some(u) = self.unroll {
            flags.push(format!("--unroll {u}"));
        }
        if self.no_scheduling_tags {
            flags.push("--no-scheduling-tags".to_owned());
        }
        if let Some(p) = self.precision {
            flags.push(format!("--precision {p}"));
        }
        if let Some(i) = self.prefetch_issue {
            flags.push(format!("--prefetch-issue {i}"));
        }
        flags
    }

    /// Where the options came from, as `train` and `plan` print it: the attribute, the
    /// precision the config file declares (`config`), and the flags that overrode them.
    pub fn source(&self, config: Option<Precision>) -> String {
        let mut source = "from the `#[layer_stack]` attribute".to_owned();
        if let (Some(p), None) = (config, self.precision) {
            source.push_str(&format!(", precision {p} from the config file"));
        }
        let flags = self.given();
        if !flags.is_empty() {
            source.push_str(&format!(", overridden by {}", flags.join(", ")));
        }
        source
    }
}

/// A precision policy by name.
pub fn precision(s: &str) -> Result<Precision, String> {
    s.parse::<Precision>().map_err(|e| e.to_string())
}

/// A device count: an integer from 1 to the CPU plugin's limit.
pub fn device_count(s: &str) -> Result<usize, String> {
    let max = MAX_CPU_DEVICES as usize;
    s.parse::<usize>()
        .ok()
        .filter(|n| (1..=max).contains(n))
        .ok_or_else(|| format!("expected an integer from 1 to {max}"))
}

/// A learning rate: a finite number above zero.
pub fn learning_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(lr) if lr.is_finite() && lr > 0.0 => Ok(lr),
        Ok(_) => Err("expected a finite number above 0".to_owned()),
        Err(e) => Err(format!("not a number: {e}")),
    }
}

/// `--model`'s parser: a name of the registry's models ([`registry::models`], the one list),
/// which `--help` lists. A name that is none of them is refused with
/// [`UnknownModel`]'s one line.
///
/// [`registry::models`]: stackscan_models::registry::models
/// [`UnknownModel`]: stackscan_models::registry::UnknownModel
#[derive(Clone, Copy, Debug)]
pub struct ModelParser;

impl clap::builder::TypedValueParser for ModelParser {
    type Value = stackscan_models::registry::ModelName;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Self::Value, clap::Error> {
        model_name.parse_ref(cmd, arg, value)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        let models = stackscan_models::registry::models();
        Some(Box::new(
            models
                .iter()
                .map(|m| clap::builder::PossibleValue::new(m.as_str())),
        ))
    }
}

/// A model name of the registry, refused with `UnknownModel`'s one line.
fn model_name(
    s: &str,
) -> Result<stackscan_models::registry::ModelName, stackscan_models::registry::UnknownModel> {
    s.parse()
}

/// The model a command runs: `model` (`--model`), else the registered model a Hugging Face
/// `config.json` says it is (`--config` naming a `.json` file or a model directory, else the
/// directory of `--init-from`), else the first the command line knows. A file that names no
/// registered model leaves the first, whose reading of it then says why.
pub fn model_for(
    model: Option<stackscan_models::registry::ModelName>,
    config: Option<&str>,
    init_from: Option<&std::path::Path>,
) -> stackscan_models::registry::ModelName {
    let hf_file = config
        .map(std::path::Path::new)
        .filter(|p| p.is_dir() || p.extension().is_some_and(|x| x == "json"))
        .or(init_from);
    model
        .or_else(|| hf_file.and_then(|p| stackscan_models::hf_config::model_of(p).ok()))
        .unwrap_or_else(stackscan_models::registry::default_model)
}

/// Where the weights of `eval` and `generate` come from, and the model and config they are of.
#[derive(Clone, Debug, Args)]
pub struct WeightsArgs {
    /// The model (default: the one a Hugging Face `config.json` given by `--config` or
    /// `--init-from` says it is, else the one the checkpoint records, else the first the
    /// command line knows).
    #[arg(long, value_name = "NAME", value_parser = ModelParser)]
    pub model: Option<stackscan_models::registry::ModelName>,
    /// Its config (as `train --config`); by default `--init-from`'s `config.json`, or the one
    /// the run that wrote `--checkpoint` recorded, else the tiny preset.
    #[arg(long, value_name = "NAME|PATH")]
    pub config: Option<String>,
    /// The weights: a training checkpoint (a `--save-every` directory or its file).
    #[arg(long, value_name = "PATH", required_unless_present = "init_from")]
    pub checkpoint: Option<std::path::PathBuf>,
    /// The weights: a Hugging Face model directory (as `train --init-from`).
    #[arg(long, value_name = "DIR", conflicts_with = "checkpoint")]
    pub init_from: Option<std::path::PathBuf>,
}

impl WeightsArgs {
    /// `--checkpoint`'s file: a directory's `latest.safetensors`, or the file itself.
    pub fn checkpoint_file(&self) -> Option<std::path::PathBuf> {
        self.checkpoint.as_ref().map(|p| {
            if p.is_dir() {
                p.join("latest.safetensors")
            } else {
                p.clone()
            }
        })
    }

    /// The config: `--config` (or `--init-from`'s `config.json`), else the one the
    /// checkpoint records when `--model` names no other, else the model's tiny preset; with
    /// `batch` (sequences over all `devices`) and `seq` applied.
    pub fn config(
        &self,
        batch: Option<u32>,
        seq: Option<u32>,
        devices: usize,
    ) -> Result<stackscan_models::registry::ModelConfig, super::CliError> {
        let cannot =
            |e: stackscan::Error| super::CliError::Usage(format!("cannot build the model: {e}"));
        if let (None, None, Some(path)) = (&self.config, self.model, self.checkpoint_file())
            && let Some(c) = super::recorded::recorded(&path)?
        {
            return reshaped(c, batch, seq, devices).map_err(cannot);
        }
        shaped_config(
            model_for(
                self.model,
                self.config.as_deref(),
                self.init_from.as_deref(),
            ),
            self.config.as_deref(),
            self.init_from.as_deref(),
            batch,
            seq,
            devices,
        )
        .map_err(cannot)
    }
}

/// The config commands train or evaluate: `config` (a preset, TOML or `config.json`), else the
/// `config.json` of the Hugging Face directory `init_from`, else the model's tiny preset;
/// with `--batch` (sequences over all `devices`, which must split them) and `--seq` applied.
pub fn shaped_config(
    model: stackscan_models::jobs::ModelName,
    config: Option<&str>,
    init_from: Option<&std::path::Path>,
    batch: Option<u32>,
    seq: Option<u32>,
    devices: usize,
) -> stackscan::Result<stackscan_models::registry::ModelConfig> {
    let from_dir = init_from.map(|d| d.join("config.json").to_string_lossy().into_owned());
    let c = model.load_or(
        config.or(from_dir.as_deref()),
        stackscan_models::registry::Preset::Tiny,
    )?;
    reshaped(c, batch, seq, devices)
}

/// `c` with `--batch` (sequences over all `devices`, which must split them) and `--seq`
/// applied.
pub fn reshaped(
    mut c: stackscan_models::registry::ModelConfig,
    batch: Option<u32>,
    seq: Option<u32>,
    devices: usize,
) -> stackscan::Result<stackscan_models::registry::ModelConfig> {
    if let Some(batch) = batch {
        let devices = u32::try_from(devices).unwrap_or(u32::MAX);
        if !batch.is_multiple_of(devices) {
            return Err(stackscan::Error::InvalidOp {
                op: "train",
                message: format!(
                    "`--batch {batch}` does not split over `--devices {devices}`: give a \
                     multiple of {devices}"
                ),
            });
        }
        c = c.with_batch_per_device(i64::from(batch / devices));
    }
    if let Some(seq) = seq {
        c = c.with_seq(i64::from(seq));
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_out_of_range_are_refused() {
        assert_eq!(device_count("4"), Ok(4));
        for bad in ["0", "-1", "4097", "x", ""] {
            assert!(device_count(bad).is_err(), "{bad}");
        }
        assert_eq!(learning_rate("3e-3"), Ok(3e-3));
        for bad in ["0", "-1", "nan", "inf", "-inf", "x"] {
            assert!(learning_rate(bad).is_err(), "{bad}");
        }
        assert_eq!(memory_fraction("0.5"), Ok(0.5));
        for bad in ["0", "1.5", "-0.1", "nan", "x"] {
            assert!(memory_fraction(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn schedule_flags_apply_in_one_order() {
        let s = ScheduleArgs {
            no_prefetch: false,
            no_defer: true,
            unroll: Some(1),
            no_scheduling_tags: true,
            precision: Some(Precision::BF16),
            prefetch_issue: Some(PrefetchIssue::WithInput),
        };
        let o = s.apply(PlanOptions::prefetch_deferred());
        assert!(o.prefetch_fsdp_weights && !o.defer_grad_reduce_scatter);
        assert_eq!(o.unroll, 1);
        assert!(!o.scheduling_tags);
        assert_eq!(o.precision, Precision::BF16);
        assert_eq!(o.prefetch_issue, PrefetchIssue::WithInput);
        assert_eq!(
            s.given(),
            [
                "--no-defer",
                "--unroll 1",
                "--no-scheduling-tags",
                "--precision bf16",
                "--prefetch-issue with-input"
            ]
        );
        assert_eq!(
            precision("bf16-reduce-bf16"),
            Ok(Precision::BF16_REDUCE_BF16)
        );
        assert!(precision("fp8").unwrap_err().contains("`fp8`"));
        assert_eq!(
            prefetch_issue("after-compute"),
            Ok(PrefetchIssue::AfterCompute)
        );
        assert!(prefetch_issue("late").unwrap_err().contains("`late`"));
        let off = ScheduleArgs {
            no_prefetch: true,
            ..ScheduleArgs::default()
        };
        let o = off.apply(PlanOptions::prefetch_deferred());
        assert!(!o.prefetch_fsdp_weights && !o.defer_grad_reduce_scatter);
    }
}
