//! Example models and the main job of stackscan.

pub mod bench;
pub mod calibrate;
pub mod cli;
pub mod collectives;
pub mod configs;
pub mod deepseek3;
pub mod gated_attention;
pub mod gdn;
pub mod gdn_layer;
pub mod hardware;
pub mod hf_config;
pub mod jobs;
pub mod llama;
pub mod llama_macro;
pub mod metrics;
pub mod mla;
pub mod moe;
pub mod plot;
pub mod predict;
pub mod progress;
pub mod qwen35;
pub mod reference;
pub mod timeline;
pub mod toy;
pub mod weights;
pub mod yarn;
