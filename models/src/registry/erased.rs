//! What a model is before any config, behind a [`ModelName`]: its name, help line, presets
//! and config readers. These are the [`Architecture`] functions without `self` and the
//! [`ConfigFile`] constants, which a `dyn Architecture` cannot reach; everything a config
//! does goes through the config itself (`ModelConfig` holds it as a `dyn Architecture`).

use std::marker::PhantomData;

use stackscan::Result;
use stackscan::plan::PlanOptions;

use super::{Architecture, ModelConfig};
use crate::configs::{self, ConfigFile};

/// A registered model's functions of its type: one handle per model.
pub(super) trait Erased: Sync {
    fn name(&self) -> &'static str;
    fn about(&self) -> &'static str;
    fn published(&self) -> &'static str;
    fn presets(&self) -> Vec<&'static str>;
    fn default_lr(&self) -> f64;
    fn default_plans(&self, options: PlanOptions) -> Option<Result<String>>;
    fn load(&self, spec: &str) -> Result<ModelConfig>;
    fn hf_model_types(&self) -> &'static [&'static str];
    fn hf_classes(&self) -> &'static [&'static str];
    fn parse_hf_config(&self, text: &str) -> Result<ModelConfig>;
    fn config_from_json(&self, v: serde_json::Value) -> Result<ModelConfig>;
}

pub(super) struct Registered<C>(pub(super) PhantomData<fn() -> C>);

impl<C: Architecture + ConfigFile + PartialEq> Erased for Registered<C> {
    fn name(&self) -> &'static str {
        C::MODEL
    }
    fn about(&self) -> &'static str {
        C::about()
    }
    fn published(&self) -> &'static str {
        C::published()
    }
    fn presets(&self) -> Vec<&'static str> {
        C::preset_names()
    }
    fn default_lr(&self) -> f64 {
        C::default_lr()
    }
    fn default_plans(&self, options: PlanOptions) -> Option<Result<String>> {
        C::default_plans(options)
    }
    fn load(&self, spec: &str) -> Result<ModelConfig> {
        let c = configs::load_with_keys::<C>(spec).map(|(c, keys)| {
            ModelConfig::new(c)
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
        C::HF_MODEL_TYPES
    }
    fn hf_classes(&self) -> &'static [&'static str] {
        C::HF_CLASSES
    }
    fn parse_hf_config(&self, text: &str) -> Result<ModelConfig> {
        C::from_hf(text)
            .map(|c| ModelConfig::new(c).with_hf_extra(crate::hf_config::keys::written_back(text)))
    }
    fn config_from_json(&self, v: serde_json::Value) -> Result<ModelConfig> {
        serde_json::from_value::<C>(v)
            .map(ModelConfig::new)
            .map_err(|e| stackscan::Error::InvalidOp {
                op: "config",
                message: format!("not a config of `{}`: {e}", C::MODEL),
            })
    }
}
