//! Example models and the main job of stackscan.

pub mod gdn;
pub mod llama;
