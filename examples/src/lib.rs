//! Example models and the main job of stackscan.

pub mod deepseek3;
pub mod gdn;
pub mod hardware;
pub mod llama;
pub mod llama_macro;
pub mod mla;
pub mod moe;
pub mod predict;
pub mod timeline;
pub mod toy;
