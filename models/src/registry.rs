//! The models the commands know, in one table. A model is a config type implementing
//! [`Architecture`] (its declared stack, how to describe it, its synthetic data) and
//! [`ConfigFile`] (its presets, its Hugging Face `config.json`); [`BUILT_IN`] lists the
//! built-in ones, and every command (`train`, `plan`, `params`, `timeline`, `bench`) reaches a
//! model only through a [`ModelName`] looked up here, with its config as a [`ModelConfig`]:
//! the model's config behind a `dyn Architecture`, so a command calls the model's own code
//! with no layer between. Adding a model is one file (the model and its `Architecture` impl)
//! and one line in [`BUILT_IN`].
//!
//! ```
//! use stackscan_models::registry::{ModelName, Preset};
//!
//! let name: ModelName = "deepseek3".parse()?;
//! let c = name.preset(Preset::Tiny)?;
//! assert_eq!((c.layers(), c.tokens().seq), (8, 64));
//! let (model, options) = c.build()?;
//! assert_eq!(model.stack.len(), 8);
//! assert!(options.prefetch_fsdp_weights);
//! assert!("gpt2".parse::<ModelName>().is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::marker::PhantomData;
use std::str::FromStr;

use stackscan::fsdp::StackModel;
use stackscan::plan::{PlanOptions, Stack};
use stackscan::{Mesh, Precision, Result};

mod architecture;
mod erased;
mod installed;

pub use architecture::{Architecture, ConfigValue, Shape};

use installed::names;
pub use installed::{default_model, install, models};

use erased::{Erased, Registered};

use crate::configs::ConfigFile;
use crate::jobs::MoeFlags;
use stackscan::decode::DecodeModel;
use stackscan::fsdp::PostFn;
use stackscan::hf_map::HfMap;

/// The token shape of a training step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tokens {
    /// Vocabulary size (token ids must be below it).
    pub vocab: i64,
    /// Tokens per sequence.
    pub seq: i64,
    /// Sequences per device.
    pub batch_per_device: i64,
}

/// Which of a model's kept configs a command uses when given no `--config`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preset {
    /// The tiny config the main job trains (the first preset).
    Tiny,
    /// The published full size ([`Architecture::published`]).
    Published,
}

/// The built-in models, in the order help texts list them.
pub static BUILT_IN: &[ModelName] = &[
    ModelName::of::<crate::llama::LlamaConfig>(),
    ModelName::of::<crate::deepseek3::DeepSeek3Config>(),
    ModelName::of::<crate::qwen35::Qwen35Config>(),
];

/// A registered model: a handle to what its config type says before any config (its name,
/// presets, config readers), compared by name.
#[derive(Clone, Copy)]
pub struct ModelName(&'static dyn Erased);

impl ModelName {
    /// The handle of the model whose config type is `C`.
    pub const fn of<C: Architecture + ConfigFile + PartialEq>() -> ModelName {
        ModelName(&Registered::<C>(PhantomData))
    }

    /// The name as written on the command line.
    pub fn as_str(self) -> &'static str {
        self.0.name()
    }

    /// One line saying what the model is.
    pub fn about(self) -> &'static str {
        self.0.about()
    }

    /// The preset names, the tiny one first.
    pub fn presets(self) -> Vec<&'static str> {
        self.0.presets()
    }

    /// The config by `spec`: a preset name, a TOML path or a `config.json` path
    /// ([`configs::load`](crate::configs::load)).
    pub fn load(self, spec: &str) -> Result<ModelConfig> {
        self.0.load(spec)
    }

    /// The `model_type` values of the Hugging Face `config.json` files the model reads
    /// ([`ConfigFile::HF_MODEL_TYPES`]); empty for a model without a reader.
    pub fn hf_model_types(self) -> &'static [&'static str] {
        self.0.hf_model_types()
    }

    /// The `architectures` class names of those files ([`ConfigFile::HF_CLASSES`]).
    pub fn hf_classes(self) -> &'static [&'static str] {
        self.0.hf_classes()
    }

    /// The config a Hugging Face `config.json`'s text describes ([`ConfigFile::from_hf`]).
    pub fn parse_hf_config(self, text: &str) -> Result<ModelConfig> {
        self.0.parse_hf_config(text)
    }

    /// The tiny or the published preset.
    pub fn preset(self, which: Preset) -> Result<ModelConfig> {
        let presets = self.presets();
        let name = match which {
            Preset::Tiny => presets.first().copied().unwrap_or("tiny"),
            Preset::Published => self.0.published(),
        };
        self.load(name)
    }

    /// [`ModelName::load`] of `spec`, or the preset `default` when none is given.
    pub fn load_or(self, spec: Option<&str>, default: Preset) -> Result<ModelConfig> {
        match spec {
            Some(spec) => self.load(spec),
            None => self.preset(default),
        }
    }

    /// The config whose fields `v` holds, as [`ModelConfig::to_json`] writes them (what a
    /// checkpoint records of the run that wrote it).
    pub fn config_from_json(self, v: serde_json::Value) -> Result<ModelConfig> {
        self.0.config_from_json(v)
    }

    /// The learning rate the model trains well with on its synthetic data.
    pub fn default_lr(self) -> f64 {
        self.0.default_lr()
    }

    /// What `plan` prints without `--config`, if more than the published plan
    /// ([`Architecture::default_plans`]).
    pub fn default_plans(self, options: PlanOptions) -> Option<Result<String>> {
        self.0.default_plans(options)
    }
}

impl PartialEq for ModelName {
    fn eq(&self, other: &ModelName) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for ModelName {}

impl fmt::Display for ModelName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for ModelName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ModelName({})", self.as_str())
    }
}

/// A model name that is none of the registered ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownModel(pub String);

impl fmt::Display for UnknownModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown model `{}`; expected one of {}",
            self.0,
            names(models())
        )
    }
}

impl std::error::Error for UnknownModel {}

impl FromStr for ModelName {
    type Err = UnknownModel;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        models()
            .iter()
            .copied()
            .find(|n| n.as_str() == s)
            .ok_or_else(|| UnknownModel(s.to_owned()))
    }
}

/// A config of a registered model, as commands hold it: the model's own config behind a
/// `dyn Architecture` ([`ModelConfig::architecture`]), and what a config file adds to it
/// (its precision, the weights spared from decay, the Hugging Face keys written back).
pub struct ModelConfig {
    model: ModelName,
    value: Box<dyn Architecture>,
    /// The precision policy the config file declares (`precision = "bf16"`), over the
    /// stack attribute's; kept through every reshaped copy.
    precision: Option<Precision>,
    /// Weight-name patterns AdamW's decay spares (`no_decay = [...]`, [`crate::decay`]),
    /// applied by [`ModelConfig::build`]; kept through every reshaped copy.
    no_decay: Vec<String>,
    /// What a Hugging Face `config.json` said that the model leaves aside but an export
    /// writes back ([`hf_config::keys::WRITTEN_BACK`](crate::hf_config::keys::WRITTEN_BACK):
    /// the tokenizer's special tokens); empty for a preset or a TOML file.
    hf_extra: serde_json::Map<String, serde_json::Value>,
}

impl ModelConfig {
    /// `c` as a config of its model.
    pub fn new<C: Architecture + ConfigFile + PartialEq>(c: C) -> ModelConfig {
        ModelConfig {
            model: ModelName::of::<C>(),
            value: Box::new(c),
            precision: None,
            no_decay: Vec::new(),
            hf_extra: serde_json::Map::new(),
        }
    }

    /// This config declaring `precision` (`None`: the stack attribute's).
    pub fn with_precision(mut self, precision: Option<Precision>) -> ModelConfig {
        self.precision = precision;
        self
    }

    /// The precision policy the config declares over its stack attribute's, if any.
    pub fn precision(&self) -> Option<Precision> {
        self.precision
    }

    /// This config sparing the weights `patterns` name from AdamW's decay.
    pub fn with_no_decay(mut self, patterns: Vec<String>) -> ModelConfig {
        self.no_decay = patterns;
        self
    }

    /// The weight-name patterns the config spares from AdamW's decay.
    pub fn no_decay(&self) -> &[String] {
        &self.no_decay
    }

    /// This config with `extra`, the keys of its Hugging Face file an export writes back.
    pub fn with_hf_extra(mut self, extra: serde_json::Map<String, serde_json::Value>) -> Self {
        self.hf_extra = extra;
        self
    }

    /// The keys of its Hugging Face file an export writes back (the special tokens).
    pub fn hf_extra(&self) -> &serde_json::Map<String, serde_json::Value> {
        &self.hf_extra
    }

    /// A copy of this config whose model's config `change` changed, and what it said (the
    /// precision and the file's keys kept).
    fn changed<R>(&self, change: impl FnOnce(&mut dyn Architecture) -> R) -> (ModelConfig, R) {
        let mut c = self.clone();
        let r = change(c.value.as_mut());
        (c, r)
    }

    /// This config with some of its [`Shape`] fields set by `set`.
    fn reshaped(&self, set: impl FnOnce(Shape<'_>)) -> ModelConfig {
        self.changed(|a| set(a.shape())).0
    }

    /// The model's own config, as its [`Architecture`]: every hook a command calls.
    pub fn architecture(&self) -> &dyn Architecture {
        self.value.as_ref()
    }

    /// The model this is a config of.
    pub fn model(&self) -> ModelName {
        self.model
    }

    /// The config as `C`, if it is one.
    pub fn get<C: 'static>(&self) -> Option<&C> {
        self.value.as_any().downcast_ref()
    }

    /// The declared model, with the options of its stack's attribute (its precision the
    /// config's, when the config declares one) and the weights the config's `no_decay`
    /// spares marked so.
    pub fn build(&self) -> Result<(StackModel, PlanOptions)> {
        let (mut model, options) = self.value.build()?;
        crate::decay::spare(&mut model, &self.no_decay, |p| {
            format!("the config's `no_decay` entry `{p}`")
        })
        .map_err(|message| stackscan::Error::InvalidOp {
            op: "config",
            message,
        })?;
        Ok((model, self.options(options)))
    }

    /// The declared stack at this config's depth, with its attribute's options (its
    /// precision the config's, when the config declares one): the built model's.
    pub fn stack(&self) -> Result<(Stack, PlanOptions)> {
        let (model, options) = self.build()?;
        Ok((model.stack, options))
    }

    fn options(&self, options: PlanOptions) -> PlanOptions {
        self.precision
            .map_or(options, |p| options.with_precision(p))
    }

    /// One line saying what this config is.
    pub fn describe(&self) -> String {
        self.value.describe()
    }

    /// The token shape of a training step.
    pub fn tokens(&self) -> Tokens {
        let mut c = self.value.clone_value();
        let s = c.shape();
        Tokens {
            vocab: s.vocab,
            seq: *s.seq,
            batch_per_device: *s.batch_per_device,
        }
    }

    /// Sequences per device.
    pub fn batch_per_device(&self) -> i64 {
        self.tokens().batch_per_device
    }

    /// This config with `batch` sequences per device.
    pub fn with_batch_per_device(&self, batch: i64) -> ModelConfig {
        self.reshaped(|s| *s.batch_per_device = batch)
    }

    /// This config with sequences of `seq` tokens.
    pub fn with_seq(&self, seq: i64) -> ModelConfig {
        self.reshaped(|s| *s.seq = seq)
    }

    /// The config's fields as JSON (what a report says it ran).
    pub fn to_json(&self) -> serde_json::Value {
        self.value.to_json()
    }

    /// Decoder layers (the stack's depth).
    pub fn layers(&self) -> usize {
        *self.value.clone_value().shape().layers
    }

    /// This config with `layers` decoder layers.
    pub fn with_layers(&self, layers: usize) -> ModelConfig {
        self.reshaped(|s| *s.layers = layers)
    }

    /// This config with the MoE dispatch options; `None` for a model without routed experts.
    pub fn with_moe_flags(&self, flags: MoeFlags) -> Option<ModelConfig> {
        let (c, applied) = self.changed(|a| a.set_moe_flags(flags));
        applied.then_some(c)
    }

    /// This config over an `fsdp × expert` mesh, and the mesh; `None` for a model without
    /// expert parallelism.
    pub fn expert_parallel(
        &self,
        devices: usize,
        ep: usize,
    ) -> Option<Result<(ModelConfig, Mesh)>> {
        let (c, split) = self.changed(|a| a.split_experts(devices, ep));
        split.map(|mesh| mesh.map(|mesh| (c, mesh)))
    }

    /// This config with each sequence split over `cp` devices (and `ep` expert ranks), and
    /// its mesh ([`Architecture::split_context`]); an error naming the model, and the
    /// models that have one, for a model without a context-parallel form.
    pub fn context_parallel(
        &self,
        devices: usize,
        cp: usize,
        ep: usize,
    ) -> Result<(ModelConfig, Mesh)> {
        let (c, split) = self.changed(|a| a.split_context(devices, cp, ep));
        match split {
            Some(mesh) => mesh.map(|mesh| (c, mesh)),
            None => Err(stackscan::Error::InvalidOp {
                op: "context_parallel",
                message: format!(
                    "--cp {cp}: the model `{}` has no context-parallel form; `--cp` needs {}",
                    self.model(),
                    with_context_parallel()
                ),
            }),
        }
    }

    /// The model's logits head ([`Architecture::logits_head`]): an error naming the model
    /// when it declares none.
    pub fn logits_head(&self) -> Result<PostFn> {
        self.value
            .logits_head()
            .ok_or_else(|| stackscan::Error::InvalidOp {
                op: "logits",
                message: format!("the model `{}` declares no logits", self.model()),
            })
    }

    /// The model as generation runs it ([`Architecture::decode_kinds`] with its stack model
    /// and logits head), in f32 with its sequence whole on one device: an error naming the
    /// model when it cannot generate.
    pub fn decode_model(&self) -> Result<DecodeModel> {
        let kinds = self
            .value
            .decode_kinds()
            .ok_or_else(|| stackscan::Error::InvalidOp {
                op: "generate",
                message: format!(
                    "the model `{}` cannot generate yet (no KV-cache decoding for its layers)",
                    self.model()
                ),
            })?;
        let (model, _) = self.build()?;
        DecodeModel::new(model, kinds, self.logits_head()?)
    }

    /// The map to the model's Hugging Face checkpoint ([`Architecture::hf_weights`]): an
    /// error naming the model when it has none.
    pub fn hf_weights(&self) -> Result<HfMap> {
        self.value.hf_weights().unwrap_or_else(|| {
            Err(stackscan::Error::InvalidOp {
                op: "hf weights",
                message: format!(
                    "the model `{}` has no Hugging Face counterpart to import or export",
                    self.model()
                ),
            })
        })
    }

    /// The model's `config.json` for `transformers` ([`Architecture::hf_config_json`]), with
    /// the keys of the file it was read from that an export writes back.
    pub fn hf_config_json(&self) -> Option<serde_json::Value> {
        let mut json = self.value.hf_config_json()?;
        if let Some(map) = json.as_object_mut() {
            for (k, v) in &self.hf_extra {
                map.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
        Some(json)
    }
}

impl Clone for ModelConfig {
    fn clone(&self) -> ModelConfig {
        ModelConfig {
            model: self.model,
            value: self.value.clone_value(),
            precision: self.precision,
            no_decay: self.no_decay.clone(),
            hf_extra: self.hf_extra.clone(),
        }
    }
}

impl PartialEq for ModelConfig {
    fn eq(&self, other: &ModelConfig) -> bool {
        self.model == other.model
            && self.precision == other.precision
            && self.no_decay == other.no_decay
            && self.value.same_as(other.value.as_any())
    }
}

impl fmt::Debug for ModelConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.value, f)
    }
}

/// The models with a context-parallel form, as an error lists them.
fn with_context_parallel() -> String {
    let names: Vec<String> = models()
        .iter()
        .filter(|m| {
            m.preset(Preset::Tiny).is_ok_and(|c| {
                c.value
                    .clone_value()
                    .split_context(1, 1, 1)
                    .is_some_and(|r| r.is_ok())
            })
        })
        .map(|m| format!("`{m}`"))
        .collect();
    names.join(" or ")
}
