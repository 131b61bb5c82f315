//! The model registry: every command reaches a model through its `Architecture`, so a model
//! the built-in table does not list gets the same job, plan and parameter table from its one
//! impl.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use serde::{Deserialize, Serialize};
use stackscan::LayerStack;
use stackscan::fsdp::StackModel;
use stackscan::plan::PlanOptions;
use stackscan_models::configs::ConfigFile;
use stackscan_models::jobs::{Job, MoeFlags};
use stackscan_models::llama::LlamaConfig;
use stackscan_models::llama::LlamaStack;
use stackscan_models::registry::{Architecture, BUILT_IN, ModelConfig, ModelName, Preset, Shape};

/// A model of the test's own: the declared Llama under another name and learning rate, with a
/// config type of its own (the Llama's fields, its presets).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
struct WideBatchLlama(LlamaConfig);

impl ConfigFile for WideBatchLlama {
    const MODEL: &'static str = "wide-batch-llama";
    const PRESETS: &'static [(&'static str, &'static str)] = LlamaConfig::PRESETS;
    const TABLES: &'static [&'static str] = LlamaConfig::TABLES;
}

impl Architecture for WideBatchLlama {
    fn about() -> &'static str {
        "the tiny Llama, two sequences a device"
    }
    fn published() -> &'static str {
        "llama3-8b"
    }
    fn default_lr() -> f64 {
        5e-3
    }
    fn build(&self) -> stackscan::Result<(StackModel, PlanOptions)> {
        Architecture::build(&self.0)
    }
    fn describe(&self) -> String {
        format!("wide-batch Llama of {} layers", self.0.layers)
    }
    fn shape(&mut self) -> Shape<'_> {
        let c = &mut self.0;
        Shape {
            vocab: c.vocab,
            seq: &mut c.seq,
            batch_per_device: &mut c.batch_per_device,
            layers: &mut c.layers,
        }
    }
}

#[test]
fn a_model_outside_the_table_gets_the_same_job_from_its_one_impl() {
    let c = ModelConfig::new(WideBatchLlama(LlamaConfig::tiny()));
    assert_eq!(c.model(), ModelName::of::<WideBatchLlama>());
    assert_eq!(c.model().as_str(), "wide-batch-llama");
    assert_eq!(
        c.get::<WideBatchLlama>(),
        Some(&WideBatchLlama(LlamaConfig::tiny()))
    );
    let job = Job::from_config(c.clone(), MoeFlags::default()).unwrap();
    assert_eq!(job.describe, "wide-batch Llama of 4 layers");
    let tiny = LlamaConfig::tiny();
    assert_eq!(
        (job.default_lr, job.batch_per_device),
        (5e-3, tiny.batch_per_device)
    );
    let (tokens, labels) = (job.batch)(7);
    let per_device = (tiny.batch_per_device * tiny.seq) as usize;
    assert_eq!((tokens.len(), labels.len()), (per_device, per_device));
    // The commands resize it through its `shape`.
    let resized = c.with_batch_per_device(3).with_seq(16).with_layers(6);
    assert_eq!(
        (
            resized.tokens().batch_per_device,
            resized.tokens().seq,
            resized.layers()
        ),
        (3, 16, 6)
    );
    assert_eq!(c.layers(), 4, "resizing makes a new config");
    // The stack `plan` prints is the declared one at the config's depth.
    let (stack, options) = c.with_layers(6).stack().unwrap();
    assert_eq!(stack.len(), 6);
    assert_eq!(options, LlamaStack::OPTIONS);
    let six = LlamaConfig {
        layers: 6,
        ..LlamaConfig::tiny()
    };
    assert_eq!(stack, LlamaStack::stack(&six).unwrap());
    // No routed experts: the MoE options are refused naming the model.
    let on = MoeFlags {
        direct_token_gather: true,
        ..MoeFlags::default()
    };
    let e = Job::from_config(c, on).unwrap_err().to_string();
    assert!(
        e.contains("`wide-batch-llama` has no routed experts") && e.contains("`deepseek3`"),
        "{e}"
    );
}

#[test]
fn every_built_in_model_loads_its_presets_and_builds() {
    let names: Vec<&str> = BUILT_IN.iter().map(|m| m.as_str()).collect();
    assert_eq!(names, ["llama", "deepseek3", "qwen35"]);
    for &m in BUILT_IN {
        assert_eq!(m.as_str().parse::<ModelName>().unwrap(), m);
        let tiny = m.preset(Preset::Tiny).unwrap();
        assert_eq!(tiny.model(), m);
        let (model, _) = tiny.build().unwrap();
        assert_eq!(model.stack.len(), tiny.layers(), "{m}");
        let published = m.preset(Preset::Published).unwrap();
        assert!(published.layers() > tiny.layers(), "{m}");
        assert_ne!(published, tiny);
        assert_eq!(published.clone(), published);
    }
    let e = "gpt2".parse::<ModelName>().unwrap_err().to_string();
    assert!(e.contains("`llama`, `deepseek3`, `qwen35`"), "{e}");
}
