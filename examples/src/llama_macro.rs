//! The Llama-style decoder of [`llama`](crate::llama) declared with the macros: one
//! `#[derive(SubLayer)]` struct whose fields are the layer's weights (the forward is the
//! hand-built model's layer function, handed the fields by name), and `#[layer_stack]` models for the tiny config and for
//! Llama-3-8B's depth. The resulting [`StackModel`] is the hand-built one: same parameters, same
//! program text.
//!
//! ```
//! use stackscan::LayerStack;
//! use stackscan_examples::llama::LlamaConfig;
//! use stackscan_examples::llama_macro::{Llama3_8b, TinyLlama, model};
//!
//! let m = model::<TinyLlama>(&LlamaConfig::tiny())?;
//! assert_eq!(m.kinds[0].params[1].name, "attn.wq");
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
use stackscan::plan::PlanOptions;
use stackscan::{LayerStack, Result, layer_stack};

use crate::llama::LlamaConfig;

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

/// The model with stack `S`: tokens and next-token labels `[batch_per_device, seq]` per
/// device, embedding before the stack, final norm, LM head and cross-entropy after it.
pub fn model<S: LayerStack<Config = LlamaConfig>>(c: &LlamaConfig) -> Result<StackModel> {
    S::check_depth("LlamaConfig.layers", c.layers)?;
    let o = crate::llama::outer(c)?;
    S::stack_model(c, o.activation, o.inputs, o.params, o.pre, o.post)
}

/// The main job's model: the macro-declared tiny Llama with its attribute's options.
pub fn tiny() -> Result<(StackModel, PlanOptions)> {
    Ok((
        model::<TinyLlama>(&LlamaConfig::tiny())?,
        TinyLlama::OPTIONS,
    ))
}

/// Llama-3-8B declared with the macros, with its attribute's options (for plans and
/// parameter listings; far too big to train here).
pub fn llama3_8b() -> Result<(StackModel, PlanOptions)> {
    Ok((
        model::<Llama3_8b>(&LlamaConfig::llama3_8b())?,
        Llama3_8b::OPTIONS,
    ))
}
