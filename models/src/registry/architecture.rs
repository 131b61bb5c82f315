//! [`Architecture`]: what the commands need of a model, implemented once per model, and the
//! config fields they resize ([`Shape`]).

use std::fmt;

use stackscan::cost::ActiveExperts;
use stackscan::decode::DecodeKind;
use stackscan::fsdp::{PostFn, StackModel};
use stackscan::hf_map::HfMap;
use stackscan::plan::PlanOptions;
use stackscan::{LayerStack, Mesh, Result};

use super::tokens;
use crate::configs::ConfigFile;
use crate::jobs::MoeFlags;

/// What every command needs of a model: its config type and declared stack, and the few
/// things the stack cannot say (a one-line description, a learning rate its synthetic data
/// trains well with, which parameters are routed experts). Implemented on a marker type per
/// model, next to the model; the model is then one line of [`BUILT_IN`](super::BUILT_IN) (or of a user's own
/// registry).
pub trait Architecture: 'static {
    /// The config: presets in TOML, optionally a Hugging Face `config.json` reader.
    type Config: ConfigFile + fmt::Debug + PartialEq + Send + Sync;
    /// The macro-declared stack `plan` prints.
    type Stack: LayerStack<Config = Self::Config>;
    /// The name commands take (`--model NAME`), the config's [`ConfigFile::MODEL`].
    const NAME: &'static str = <Self::Config as ConfigFile>::MODEL;
    /// One line for help texts: what the model is, and its published size.
    const ABOUT: &'static str;
    /// The preset of the published size (a name of [`ConfigFile::PRESETS`]); the tiny one is
    /// the first.
    const PUBLISHED: &'static str;
    /// The learning rate the model trains well with on its synthetic data.
    const DEFAULT_LR: f64 = 1e-2;

    /// The declared model at `c`, with the options of its stack's attribute.
    fn build(c: &Self::Config) -> Result<(StackModel, PlanOptions)>;
    /// One line saying what `c` is (layers, widths, heads, tokens per device).
    fn describe(c: &Self::Config) -> String;
    /// The fields commands resize (`--batch`, `--seq`, `--layers`), borrowed from `c`.
    fn shape(c: &mut Self::Config) -> Shape<'_>;

    /// `(tokens, labels)` of one device's synthetic batch: by default sequences that count
    /// up from a random start by a per-sequence stride ([`crate::llama::synthetic_tokens`]).
    fn synthetic_batch(c: &Self::Config, seed: u64) -> (Vec<i32>, Vec<i32>) {
        let t = tokens::<Self>(c);
        crate::llama::synthetic_tokens(t.vocab, t.seq, t.batch_per_device, seed)
    }
    /// Routed experts per MoE layer and experts per token, for a model that has them.
    fn experts(_: &Self::Config) -> Option<ActiveExperts> {
        None
    }
    /// `c` with the MoE dispatch options; `None` for a model without routed experts.
    fn with_moe_flags(_: &Self::Config, _: MoeFlags) -> Option<Self::Config> {
        None
    }
    /// `c` split over an `fsdp × expert` mesh of `devices` with `ep` along `expert`, and the
    /// mesh; `None` for a model without expert parallelism.
    fn expert_parallel(
        _: &Self::Config,
        _: usize,
        _: usize,
    ) -> Option<Result<(Self::Config, Mesh)>> {
        None
    }
    /// `c` with each sequence split over `cp` devices of `devices` (context parallelism) and,
    /// for a model with routed experts, `ep` expert ranks, and the mesh (`fsdp × context`, or
    /// `fsdp × context × expert`); `None` for a model without context parallelism.
    fn context_parallel(
        _: &Self::Config,
        _: usize,
        _: usize,
        _: usize,
    ) -> Option<Result<(Self::Config, Mesh)>> {
        None
    }
    /// What `plan` prints without `--config`, when more than the published config's plan
    /// (Qwen3.5's tiny and full stacks side by side); `None`: the published plan alone.
    fn default_plans(_: PlanOptions) -> Option<Result<String>> {
        None
    }
    /// Parameters a token uses, for a model whose routed experts make it fewer than all.
    fn active_parameters(_: &Self::Config, _: &StackModel) -> Option<u64> {
        None
    }
    /// The head that turns the stack's output into logits at `c`, for the forward program
    /// ([`stackscan::fsdp::forward_step_on`], `Trainer::logits`); `None` for a model that
    /// declares none.
    fn logits_head(_: &Self::Config) -> Option<PostFn> {
        None
    }
    /// Its layer kinds as generation runs them (`generate`: a KV cache, a recurrence's
    /// state), one per kind of the stack at `c` in its order; `None` for a model that cannot
    /// generate yet.
    fn decode_kinds(_: &Self::Config) -> Option<Vec<DecodeKind>> {
        None
    }
    /// The map between the weights at `c` and the Hugging Face checkpoint of the same model
    /// (`train --init-from`, `export`); `None` for a model without one.
    fn hf_weights(_: &Self::Config) -> Option<Result<HfMap>> {
        None
    }
    /// The `config.json` `transformers` reads for the model at `c` (written by `export`
    /// beside the weights); `None` for a model without a Hugging Face counterpart.
    fn hf_config_json(_: &Self::Config) -> Option<serde_json::Value> {
        None
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
