//! [`Architecture`] behind a handle: each registered model's operations as one trait object,
//! so a [`ModelName`] and a [`ModelConfig`] work for every model alike.

use std::fmt;
use std::marker::PhantomData;

use stackscan::cost::ActiveExperts;
use stackscan::decode::DecodeKind;
use stackscan::fsdp::{PostFn, StackModel};
use stackscan::hf_map::HfMap;
use stackscan::plan::{PlanOptions, Stack};
use stackscan::{LayerStack, Mesh, Result};

use super::{Architecture, ModelConfig, ModelName, Tokens, reshaped, tokens};
use crate::configs::{self, ConfigFile};
use crate::jobs::MoeFlags;

/// [`Architecture`] behind a handle: the same operations on a [`ModelConfig`].
pub(super) trait Erased: Sync {
    fn name(&self) -> &'static str;
    fn about(&self) -> &'static str;
    fn published(&self) -> &'static str;
    fn presets(&self) -> Vec<&'static str>;
    fn default_lr(&self) -> f64;
    fn default_plans(&self, options: PlanOptions) -> Option<Result<String>>;
    fn load(&self, me: ModelName, spec: &str) -> Result<ModelConfig>;
    fn hf_model_types(&self) -> &'static [&'static str];
    fn hf_classes(&self) -> &'static [&'static str];
    fn parse_hf_config(&self, text: &str) -> Result<ModelConfig>;
    fn build(&self, c: &ModelConfig) -> Result<(StackModel, PlanOptions)>;
    fn stack(&self, c: &ModelConfig) -> Result<(Stack, PlanOptions)>;
    fn describe(&self, c: &ModelConfig) -> String;
    fn tokens(&self, c: &ModelConfig) -> Tokens;
    fn with_batch_per_device(&self, c: &ModelConfig, batch: i64) -> ModelConfig;
    fn with_seq(&self, c: &ModelConfig, seq: i64) -> ModelConfig;
    fn to_json(&self, c: &ModelConfig) -> serde_json::Value;
    fn config_from_json(&self, v: serde_json::Value) -> Result<ModelConfig>;
    fn layers(&self, c: &ModelConfig) -> usize;
    fn with_layers(&self, c: &ModelConfig, layers: usize) -> ModelConfig;
    fn synthetic_batch(&self, c: &ModelConfig, seed: u64) -> (Vec<i32>, Vec<i32>);
    fn experts(&self, c: &ModelConfig) -> Option<ActiveExperts>;
    fn with_moe_flags(&self, c: &ModelConfig, flags: MoeFlags) -> Option<ModelConfig>;
    fn expert_parallel(
        &self,
        c: &ModelConfig,
        devices: usize,
        ep: usize,
    ) -> Option<Result<(ModelConfig, Mesh)>>;
    fn context_parallel(
        &self,
        c: &ModelConfig,
        devices: usize,
        cp: usize,
        ep: usize,
    ) -> Option<Result<(ModelConfig, Mesh)>>;
    fn active_parameters(&self, c: &ModelConfig, m: &StackModel) -> Option<u64>;
    fn logits_head(&self, c: &ModelConfig) -> Option<PostFn>;
    fn decode_kinds(&self, c: &ModelConfig) -> Option<Vec<DecodeKind>>;
    fn hf_weights(&self, c: &ModelConfig) -> Option<Result<HfMap>>;
    fn hf_config_json(&self, c: &ModelConfig) -> Option<serde_json::Value>;
    fn clone_config(&self, c: &ModelConfig) -> ModelConfig;
    fn eq_config(&self, a: &ModelConfig, b: &ModelConfig) -> bool;
    fn debug_config(&self, c: &ModelConfig, f: &mut fmt::Formatter<'_>) -> fmt::Result;
}

pub(super) struct Registered<A>(pub(super) PhantomData<fn() -> A>);

impl<A: Architecture> Registered<A> {
    /// `c`'s value: a `ModelConfig` is built only by [`ModelConfig::new`] with its model's
    /// config, and reaches only that model's handle.
    fn of<'c>(&self, c: &'c ModelConfig) -> &'c A::Config {
        #[allow(
            clippy::expect_used,
            reason = "a ModelConfig holds its own model's config"
        )]
        c.get::<A::Config>()
            .expect("a ModelConfig reaches only its own model")
    }
}

impl<A: Architecture> Erased for Registered<A> {
    fn name(&self) -> &'static str {
        A::NAME
    }
    fn about(&self) -> &'static str {
        A::ABOUT
    }
    fn published(&self) -> &'static str {
        A::PUBLISHED
    }
    fn presets(&self) -> Vec<&'static str> {
        A::Config::preset_names()
    }
    fn default_lr(&self) -> f64 {
        A::DEFAULT_LR
    }
    fn default_plans(&self, options: PlanOptions) -> Option<Result<String>> {
        A::default_plans(options)
    }
    fn load(&self, _: ModelName, spec: &str) -> Result<ModelConfig> {
        let c = configs::load_with_keys::<A::Config>(spec).map(|(c, keys)| {
            ModelConfig::new::<A>(c)
                .with_precision(keys.precision)
                .with_no_decay(keys.no_decay)
        })?;
        // A Hugging Face file's special tokens, for `export` to write back.
        Ok(match configs::hf_file(spec) {
            Some(path) => match std::fs::read_to_string(path) {
                Ok(text) => c.with_hf_extra(crate::hf_config::keys::written_back(&text)),
                Err(_) => c,
            },
            None => c,
        })
    }
    fn hf_model_types(&self) -> &'static [&'static str] {
        A::Config::HF_MODEL_TYPES
    }
    fn hf_classes(&self) -> &'static [&'static str] {
        A::Config::HF_CLASSES
    }
    fn parse_hf_config(&self, text: &str) -> Result<ModelConfig> {
        A::Config::from_hf(text).map(|c| {
            ModelConfig::new::<A>(c).with_hf_extra(crate::hf_config::keys::written_back(text))
        })
    }
    fn build(&self, c: &ModelConfig) -> Result<(StackModel, PlanOptions)> {
        A::build(self.of(c))
    }
    fn stack(&self, c: &ModelConfig) -> Result<(Stack, PlanOptions)> {
        Ok((A::Stack::stack(self.of(c))?, A::Stack::OPTIONS))
    }
    fn describe(&self, c: &ModelConfig) -> String {
        A::describe(self.of(c))
    }
    fn tokens(&self, c: &ModelConfig) -> Tokens {
        tokens::<A>(self.of(c))
    }
    fn with_batch_per_device(&self, c: &ModelConfig, batch: i64) -> ModelConfig {
        reshaped::<A>(self.of(c), |s| *s.batch_per_device = batch)
    }
    fn with_seq(&self, c: &ModelConfig, seq: i64) -> ModelConfig {
        reshaped::<A>(self.of(c), |s| *s.seq = seq)
    }
    fn to_json(&self, c: &ModelConfig) -> serde_json::Value {
        serde_json::to_value(self.of(c)).unwrap_or(serde_json::Value::Null)
    }
    fn config_from_json(&self, v: serde_json::Value) -> Result<ModelConfig> {
        serde_json::from_value::<A::Config>(v)
            .map(ModelConfig::new::<A>)
            .map_err(|e| stackscan::Error::InvalidOp {
                op: "config",
                message: format!("not a config of `{}`: {e}", A::NAME),
            })
    }
    fn layers(&self, c: &ModelConfig) -> usize {
        *A::shape(&mut self.of(c).clone()).layers
    }
    fn with_layers(&self, c: &ModelConfig, layers: usize) -> ModelConfig {
        reshaped::<A>(self.of(c), |s| *s.layers = layers)
    }
    fn synthetic_batch(&self, c: &ModelConfig, seed: u64) -> (Vec<i32>, Vec<i32>) {
        A::synthetic_batch(self.of(c), seed)
    }
    fn experts(&self, c: &ModelConfig) -> Option<ActiveExperts> {
        A::experts(self.of(c))
    }
    fn with_moe_flags(&self, c: &ModelConfig, flags: MoeFlags) -> Option<ModelConfig> {
        A::with_moe_flags(self.of(c), flags).map(ModelConfig::new::<A>)
    }
    fn expert_parallel(
        &self,
        c: &ModelConfig,
        devices: usize,
        ep: usize,
    ) -> Option<Result<(ModelConfig, Mesh)>> {
        A::expert_parallel(self.of(c), devices, ep)
            .map(|r| r.map(|(c, mesh)| (ModelConfig::new::<A>(c), mesh)))
    }
    fn context_parallel(
        &self,
        c: &ModelConfig,
        devices: usize,
        cp: usize,
        ep: usize,
    ) -> Option<Result<(ModelConfig, Mesh)>> {
        A::context_parallel(self.of(c), devices, cp, ep)
            .map(|r| r.map(|(c, mesh)| (ModelConfig::new::<A>(c), mesh)))
    }
    fn active_parameters(&self, c: &ModelConfig, m: &StackModel) -> Option<u64> {
        A::active_parameters(self.of(c), m)
    }
    fn logits_head(&self, c: &ModelConfig) -> Option<PostFn> {
        A::logits_head(self.of(c))
    }
    fn decode_kinds(&self, c: &ModelConfig) -> Option<Vec<DecodeKind>> {
        A::decode_kinds(self.of(c))
    }
    fn hf_weights(&self, c: &ModelConfig) -> Option<Result<HfMap>> {
        A::hf_weights(self.of(c))
    }
    fn hf_config_json(&self, c: &ModelConfig) -> Option<serde_json::Value> {
        A::hf_config_json(self.of(c))
    }
    fn clone_config(&self, c: &ModelConfig) -> ModelConfig {
        ModelConfig::new::<A>(self.of(c).clone())
    }
    fn eq_config(&self, a: &ModelConfig, b: &ModelConfig) -> bool {
        match (a.get::<A::Config>(), b.get::<A::Config>()) {
            (Some(a), Some(b)) => a == b,
            _ => false,
        }
    }
    fn debug_config(&self, c: &ModelConfig, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.of(c), f)
    }
}
