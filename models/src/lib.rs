//! The models stackscan ships, apart from the tool that runs them (`stackscan-cli`: the
//! command line, the bench, calibration, prediction): the layers and mixers (Llama's
//! attention and MLP, MLA, the Gated DeltaNet, gated attention, MoE), the declared models
//! (`llama`, `deepseek3`, `qwen35`) and the causal-LM outer part they share,
//! their configs as data (`configs`, the TOML presets under `configs/`), Hugging Face config
//! and weight maps, and the registry through which every command finds a model.

pub mod causal_lm;
pub mod configs;
pub mod decay;
pub mod deepseek3;
pub mod gated_attention;
pub mod gdn;
pub mod gdn_layer;
pub mod hf_config;
pub mod hf_weights;
pub mod jobs;
pub mod llama;
pub mod memory;
pub mod mla;
pub mod moe;
pub mod qwen35;
pub mod registry;
pub mod toy;
pub mod weights;
pub mod yarn;
