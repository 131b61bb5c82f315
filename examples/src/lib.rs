//! Example models and the main job of stackscan.

pub mod bench;
pub mod calibrate;
pub mod cli;
pub mod collectives;
pub mod compile_report;
pub mod hardware;
pub mod metrics;
pub mod plot;
pub mod predict;
pub mod progress;
pub mod reference;
pub mod timeline;
pub mod tokenize;
pub mod xla_preset;

// The models live in their own crate; the tool's modules and its users reach them here too.
pub use stackscan_models::{
    causal_lm, configs, deepseek3, gated_attention, gdn, gdn_layer, hf_config, hf_weights, jobs,
    llama, llama_macro, llama_swa, mla, moe, qwen35, registry, toy, weights, yarn,
};
