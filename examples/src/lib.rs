//! Example models and the main job of stackscan.

pub mod gdn;
pub mod hardware;
pub mod llama;
pub mod llama_macro;
pub mod predict;
pub mod timeline;
pub mod toy;
