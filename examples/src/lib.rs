//! Example models and the main job of stackscan.

pub mod configs;
pub mod deepseek3;
pub mod gated_attention;
pub mod gdn;
pub mod gdn_layer;
pub mod hardware;
pub mod jobs;
pub mod llama;
pub mod llama_macro;
pub mod mla;
pub mod moe;
pub mod predict;
pub mod qwen35;
pub mod timeline;
pub mod toy;
pub mod weights;
