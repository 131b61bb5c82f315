//! Example models and the main job of stackscan.

pub mod gdn;
