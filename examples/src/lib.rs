//! Example models and the main job of stackscan.

pub mod gated_attention;
pub mod gdn;
pub mod gdn_layer;
pub mod llama;
pub mod llama_macro;
pub mod qwen35;
pub mod toy;
