//! [`Architecture`]: what the commands need of a model, implemented once per model on its
//! config type, and the config fields they resize ([`Shape`]).

use std::any::Any;
use std::fmt;

use stackscan::cost::ActiveExperts;
use stackscan::decode::DecodeKind;
use stackscan::fsdp::{PostFn, StackModel};
use stackscan::hf_map::HfMap;
use stackscan::plan::PlanOptions;
use stackscan::{Mesh, Result};

use crate::configs::ConfigFile;
use crate::jobs::MoeFlags;

/// What every command needs of a model, implemented on its config type: the declared model,
/// and the few things the stack cannot say (a one-line description, a learning rate its
/// synthetic data trains well with, which parameters are routed experts, its Hugging Face
/// counterpart). The model is then one line of [`BUILT_IN`](super::BUILT_IN) (or of a user's
/// own registry): `ModelName::of::<MyConfig>()`.
///
/// Commands hold a config as a [`ModelConfig`](super::ModelConfig), which keeps it as a
/// `dyn Architecture`: a new hook is one method here, with a default for the models that
/// have none, which commands call through [`ModelConfig::architecture`](super::ModelConfig::architecture).
/// The functions without `self` say what the model is before any config (its help line, its
/// published preset); they are read when the model is registered.
pub trait Architecture: ConfigValue + fmt::Debug + Send + Sync + 'static {
    /// One line for help texts: what the model is, and its published size.
    fn about() -> &'static str
    where
        Self: Sized;
    /// The preset of the published size (a name of [`ConfigFile::PRESETS`]); the tiny one is
    /// the first.
    fn published() -> &'static str
    where
        Self: Sized;
    /// The learning rate the model trains well with on its synthetic data.
    fn default_lr() -> f64
    where
        Self: Sized,
    {
        1e-2
    }
    /// What `plan` prints without `--config`, when more than the published config's plan
    /// (Qwen3.5's tiny and full stacks side by side); `None`: the published plan alone.
    fn default_plans(_: PlanOptions) -> Option<Result<String>>
    where
        Self: Sized,
    {
        None
    }

    /// The declared model at this config (its stack is what `plan` prints), with the
    /// options of its stack's attribute.
    fn build(&self) -> Result<(StackModel, PlanOptions)>;
    /// One line saying what this config is (layers, widths, heads, tokens per device).
    fn describe(&self) -> String;
    /// The fields commands resize (`--batch`, `--seq`, `--layers`), borrowed.
    fn shape(&mut self) -> Shape<'_>;

    /// `(tokens, labels)` of one device's synthetic batch: by default sequences that count
    /// up from a random start by a per-sequence stride ([`crate::llama::synthetic_tokens`]).
    fn synthetic_batch(&self, seed: u64) -> (Vec<i32>, Vec<i32>) {
        let mut c = self.clone_value();
        let s = c.shape();
        crate::llama::synthetic_tokens(s.vocab, *s.seq, *s.batch_per_device, seed)
    }
    /// Routed experts per MoE layer and experts per token, for a model that has them.
    fn experts(&self) -> Option<ActiveExperts> {
        None
    }
    /// Sets the MoE dispatch options; `false` for a model without routed experts.
    fn set_moe_flags(&mut self, _: MoeFlags) -> bool {
        false
    }
    /// Splits this config over an `fsdp × expert` mesh of `devices` with `ep` along
    /// `expert`, and gives the mesh; `None` for a model without expert parallelism.
    fn split_experts(&mut self, _devices: usize, _ep: usize) -> Option<Result<Mesh>> {
        None
    }
    /// Splits each sequence over `cp` devices of `devices` (context parallelism) and, for a
    /// model with routed experts, the experts over `ep` ranks, and gives the mesh
    /// (`fsdp × context`, or `fsdp × context × expert`); `None` for a model without context
    /// parallelism.
    fn split_context(&mut self, _devices: usize, _cp: usize, _ep: usize) -> Option<Result<Mesh>> {
        None
    }
    /// Parameters a token uses, for a model whose routed experts make it fewer than all.
    fn active_parameters(&self, _: &StackModel) -> Option<u64> {
        None
    }
    /// The head that turns the stack's output into logits, for the forward program
    /// ([`stackscan::fsdp::forward_step_on`], `Trainer::logits`); `None` for a model that
    /// declares none.
    fn logits_head(&self) -> Option<PostFn> {
        None
    }
    /// Its layer kinds as generation runs them (`generate`: a KV cache, a recurrence's
    /// state), one per kind of the stack in its order; `None` for a model that cannot
    /// generate yet.
    fn decode_kinds(&self) -> Option<Vec<DecodeKind>> {
        None
    }
    /// The map between the weights and the Hugging Face checkpoint of the same model
    /// (`train --init-from`, `export`); `None` for a model without one.
    fn hf_weights(&self) -> Option<Result<HfMap>> {
        None
    }
    /// The `config.json` `transformers` reads for this config (written by `export` beside
    /// the weights); `None` for a model without a Hugging Face counterpart.
    fn hf_config_json(&self) -> Option<serde_json::Value> {
        None
    }
}

/// What a [`ModelConfig`](super::ModelConfig) does with the config it holds as a
/// `dyn Architecture`: copy it, compare it, write it as JSON. Every [`ConfigFile`] that
/// implements [`Architecture`] has it; nothing implements it by hand.
pub trait ConfigValue: Any {
    /// A copy, behind the same handle.
    fn clone_value(&self) -> Box<dyn Architecture>;
    /// Whether `other` is a config of the same type with the same fields.
    fn same_as(&self, other: &dyn Any) -> bool;
    /// The fields as JSON (what a report says it ran, what a checkpoint records).
    fn to_json(&self) -> serde_json::Value;
    /// The config as [`Any`], for reading it back as its own type.
    fn as_any(&self) -> &dyn Any;
}

impl<C: Architecture + ConfigFile + PartialEq> ConfigValue for C {
    fn clone_value(&self) -> Box<dyn Architecture> {
        Box::new(self.clone())
    }
    fn same_as(&self, other: &dyn Any) -> bool {
        other.downcast_ref::<C>() == Some(self)
    }
    fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A config's fields that commands resize, borrowed: `vocab` to read, the rest to set.
#[derive(Debug)]
pub struct Shape<'c> {
    /// Vocabulary size.
    pub vocab: i64,
    /// Tokens per sequence.
    pub seq: &'c mut i64,
    /// Sequences per device.
    pub batch_per_device: &'c mut i64,
    /// Decoder layers: the stack's depth.
    pub layers: &'c mut usize,
}
