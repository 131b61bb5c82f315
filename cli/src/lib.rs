//! The stackscan command line and the tools behind its commands: hardware profiles, step-time
//! prediction, the benchmark, the compile report, timelines, tokenization. The models it runs
//! are `stackscan_models`'s.

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
