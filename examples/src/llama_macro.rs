//! The stacks of the declared Llama ([`llama::Llama`](crate::llama::Llama), whose layer is
//! the nested [`Decoder`]): `#[layer_stack]` types for the tiny config and for Llama-3-8B's
//! depth, and the declared model lowered to a [`StackModel`]. The result is the run-time API's
//! hand-built [`llama::model`](crate::llama::model): same parameters, same program text.
//!
//! ```
//! use stackscan::LayerStack;
//! use stackscan_examples::llama::LlamaConfig;
//! use stackscan_examples::llama_macro::{Llama3_8b, TinyLlama, model};
//!
//! let m = model::<TinyLlama>(&LlamaConfig::tiny())?;
//! assert_eq!(m.kinds[0].params[1].name, "attn.wq");
//! assert_eq!(m.parameters()[4].path, "layers.attn.wq");
//! assert_eq!(Llama3_8b::plan_notation()?.0, "[layer 0 … layer 30] → [layer 31]");
//! // The config's depth must be the declared one.
//! let e = model::<Llama3_8b>(&LlamaConfig::tiny()).unwrap_err();
//! assert!(matches!(
//!     e,
//!     stackscan::Error::DepthMismatch { field: "LlamaConfig.layers", config: 4, declared: 32, .. }
//! ));
//! assert_eq!(
//!     e.to_string(),
//!     "`LlamaConfig.layers` is 4, but the stack `Llama3_8b` declares 32 layers (32 repeats of its block pattern)"
//! );
//! # Ok::<(), stackscan::Error>(())
//! ```

use stackscan::fsdp::StackModel;
use stackscan::model::stack_model;
use stackscan::plan::PlanOptions;
use stackscan::{LayerStack, Result, Tensor, layer_stack};

use crate::llama::{Llama, LlamaConfig};

pub use crate::llama::{Decoder, Residual};

/// The tiny config's stack: 4 decoder layers, prefetch and deferred reduce-scatter.
#[layer_stack(
    block = [Decoder],
    layers = 4,
    prefetch_fsdp_weights,
    defer_grad_reduce_scatter,
)]
#[derive(Debug)]
pub struct TinyLlama;

/// Llama-3-8B's stack: 32 decoder layers.
#[layer_stack(
    block = [Decoder],
    layers = 32,
    prefetch_fsdp_weights,
    defer_grad_reduce_scatter,
)]
#[derive(Debug)]
pub struct Llama3_8b;

/// The model with stack `S`: the declared [`Llama`] lowered to the run-time model (the depth
/// checked once against `LlamaConfig.layers`).
pub fn model<S: LayerStack<Config = LlamaConfig> + 'static>(c: &LlamaConfig) -> Result<StackModel> {
    Ok(stack_model::<Llama<Tensor, S>>(c)?.0)
}

/// The main job's model: the declared tiny Llama with its attribute's options.
pub fn tiny() -> Result<(StackModel, PlanOptions)> {
    stack_model::<Llama<Tensor, TinyLlama>>(&LlamaConfig::tiny())
}

/// Llama-3-8B declared with the macros, with its attribute's options (for plans and
/// parameter listings; far too big to train here).
pub fn llama3_8b() -> Result<(StackModel, PlanOptions)> {
    stack_model::<Llama<Tensor, Llama3_8b>>(&LlamaConfig::llama3_8b())
}

/// The declared model for a config loaded by name or path: the declared stack of its depth
/// (4 layers: [`TinyLlama`], 32: [`Llama3_8b`]), since a stack's depth is part of its type.
pub fn for_config(c: &LlamaConfig) -> Result<(StackModel, PlanOptions)> {
    match c.layers {
        n if n == Llama3_8b::LAYERS => stack_model::<Llama<Tensor, Llama3_8b>>(c),
        _ => stack_model::<Llama<Tensor, TinyLlama>>(c),
    }
}
