//! The stack of the declared Llama (the causal language model [`CausalLm`] over layers of the
//! nested [`Decoder`]): one `#[layer_stack]` type whose depth is the config's
//! (`layers = cfg.layers`), so the tiny config and Llama-3-8B share it, and the declared model
//! lowered to a [`StackModel`]. The result is what a Llama built by hand with the run-time API
//! gives (the test support `cli/tests/hand_llama`): same parameters, same program text.
//!
//! ```
//! use stackscan::LayerStack;
//! use stackscan_models::llama::LlamaConfig;
//! use stackscan_models::llama::{LlamaStack, model};
//!
//! let m = model::<LlamaStack>(&LlamaConfig::tiny())?;
//! assert_eq!(m.kinds[0].params[1].name, "attn.wq");
//! assert_eq!(m.parameters()[4].path, "layers.attn.wq");
//! assert_eq!(m.stack.len(), 4);
//! // One stack type, every depth: the depth is the config's.
//! let full = LlamaConfig::llama3_8b();
//! assert_eq!(LlamaStack::plan_notation(&full)?.0, "[layer 0 … layer 30] → [layer 31]");
//! // A depth the block pattern cannot hold is refused once, when the model is built.
//! let e = model::<LlamaStack>(&LlamaConfig { layers: 0, ..LlamaConfig::tiny() }).unwrap_err();
//! assert!(matches!(&e, stackscan::Error::Depth { field, value: 0, .. } if field == "LlamaConfig.layers"));
//! # Ok::<(), stackscan::Error>(())
//! ```

use stackscan::fsdp::StackModel;
use stackscan::model::stack_model;
use stackscan::plan::PlanOptions;
use stackscan::{LayerStack, Result, Tensor, layer_stack};

use super::{Decoder, LlamaConfig};
use crate::causal_lm::{CausalLm, TiedCausalLm};

/// The Llama stack at every depth: `LlamaConfig.layers` decoder layers, prefetch and deferred
/// reduce-scatter.
#[layer_stack(
    block = [Decoder],
    layers = cfg.layers,
    prefetch_fsdp_weights,
    defer_grad_reduce_scatter,
)]
#[derive(Debug)]
pub struct LlamaStack;

/// The model with stack `S`: the declared Llama lowered to the run-time model (the depth
/// checked once, against the stack's block pattern).
pub fn model<S: LayerStack<Config = LlamaConfig> + 'static>(c: &LlamaConfig) -> Result<StackModel> {
    Ok(declared::<S>(c)?.0)
}

/// The causal LM over stack `S` at `c`: its head tied to the embedding or its own.
fn declared<S: LayerStack<Config = LlamaConfig> + 'static>(
    c: &LlamaConfig,
) -> Result<(StackModel, PlanOptions)> {
    if c.tie_embeddings {
        stack_model::<TiedCausalLm<Tensor, S>>(c)
    } else {
        stack_model::<CausalLm<Tensor, S>>(c)
    }
}

/// The main job's model: the declared tiny Llama with its attribute's options.
pub fn tiny() -> Result<(StackModel, PlanOptions)> {
    for_config(&LlamaConfig::tiny())
}

/// Llama-3-8B declared with the macros, with its attribute's options (for plans and
/// parameter listings; far too big to train here).
pub fn llama3_8b() -> Result<(StackModel, PlanOptions)> {
    for_config(&LlamaConfig::llama3_8b())
}

/// The declared model for a config loaded by name or path, at the config's depth.
pub fn for_config(c: &LlamaConfig) -> Result<(StackModel, PlanOptions)> {
    declared::<LlamaStack>(c)
}

/// The declared Llama as the commands know it (`--model llama`).
#[derive(Debug)]
pub struct Llama;

impl crate::registry::Architecture for Llama {
    type Config = LlamaConfig;
    type Stack = LlamaStack;
    const ABOUT: &'static str = "Llama-style decoder (tiny; published: Llama-3-8B, 32 identical \
         layers; `window = N` in its config: sliding-window attention, preset `mistral-7b`)";
    const PUBLISHED: &'static str = "llama3-8b";

    fn build(c: &LlamaConfig) -> Result<(StackModel, PlanOptions)> {
        for_config(c)
    }

    fn describe(c: &LlamaConfig) -> String {
        format!(
            "Llama (declared with the macros): {} layers, d {}, {}/{} heads × {}, FFN {}, vocab {}; {} × {} tokens per device",
            c.layers,
            c.d_model,
            c.heads,
            c.kv_heads,
            c.head_dim,
            c.ffn,
            c.vocab,
            c.batch_per_device,
            c.seq_per_device()
        ) + &c
            .window
            .map(|w| format!("; a sliding window of {w} positions"))
            .unwrap_or_default()
            + &crate::llama::describe_context(c.seq, c.context)
    }

    fn context_parallel(
        c: &LlamaConfig,
        devices: usize,
        cp: usize,
        ep: usize,
    ) -> Option<Result<(LlamaConfig, stackscan::Mesh)>> {
        Some(c.with_context_parallel(devices, cp).and_then(|c| {
            let mesh = crate::llama::context_mesh(devices, cp, ep)?;
            Ok((c, mesh))
        }))
    }

    fn shape(c: &mut LlamaConfig) -> crate::registry::Shape<'_> {
        crate::registry::Shape {
            vocab: c.vocab,
            seq: &mut c.seq,
            batch_per_device: &mut c.batch_per_device,
            layers: &mut c.layers,
        }
    }

    fn logits_head(c: &LlamaConfig) -> Option<stackscan::fsdp::PostFn> {
        Some(if c.tie_embeddings {
            stackscan::model::logits_head::<TiedCausalLm<Tensor, LlamaStack>>(c)
        } else {
            stackscan::model::logits_head::<CausalLm<Tensor, LlamaStack>>(c)
        })
    }

    fn decode_kinds(c: &LlamaConfig) -> Option<Vec<stackscan::decode::DecodeKind>> {
        Some(vec![stackscan::decode::decode_kind::<Decoder<Tensor>>(c)])
    }

    fn hf_weights(c: &LlamaConfig) -> Option<Result<stackscan::hf_map::HfMap>> {
        Some(match c.window {
            // Refused rather than written as a `LlamaForCausalLM` that attends to every
            // earlier position: the checkpoint would load as another model.
            Some(w) => Err(stackscan::Error::InvalidOp {
                op: "hf weights",
                message: format!(
                    "the Llama with a sliding window ({w} positions) has no Hugging Face \
                     counterpart here: `LlamaForCausalLM` attends to every earlier position"
                ),
            }),
            None => super::hf::map(c),
        })
    }

    fn hf_config_json(c: &LlamaConfig) -> Option<serde_json::Value> {
        Some(super::hf::config_json(c))
    }
}
