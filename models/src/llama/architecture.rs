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

use stackscan::decode::DecodeKind;
use stackscan::fsdp::{PostFn, StackModel};
use stackscan::hf_map::HfMap;
use stackscan::model::stack_model;
use stackscan::plan::PlanOptions;
use stackscan::{LayerStack, Mesh, Result, Tensor, layer_stack};

use super::{Decoder, LlamaConfig};
use crate::causal_lm::{CausalLm, TiedCausalLm};
use crate::registry::{Architecture, Shape};

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

/// The declared Llama as the commands know it (`--model llama`).
impl Architecture for LlamaConfig {
    fn about() -> &'static str {
        "Llama-style decoder (tiny; published: Llama-3-8B, 32 identical layers; `window = N` in \
         its config: sliding-window attention, preset `mistral-7b`)"
    }

    fn published() -> &'static str {
        "llama3-8b"
    }

    fn build(&self) -> Result<(StackModel, PlanOptions)> {
        declared::<LlamaStack>(self)
    }

    fn describe(&self) -> String {
        format!(
            "Llama (declared with the macros): {} layers, d {}, {}/{} heads × {}, FFN {}, vocab {}; {} × {} tokens per device",
            self.layers,
            self.d_model,
            self.heads,
            self.kv_heads,
            self.head_dim,
            self.ffn,
            self.vocab,
            self.batch_per_device,
            self.seq_per_device()
        ) + &self
            .window
            .map(|w| format!("; a sliding window of {w} positions"))
            .unwrap_or_default()
            + &self
                .attention_block
                .map(|b| format!("; attention {b} keys at a time"))
                .unwrap_or_default()
            + &crate::llama::describe_context(self.seq, self.context)
    }

    fn split_context(&mut self, devices: usize, cp: usize, ep: usize) -> Option<Result<Mesh>> {
        Some((*self).with_context_parallel(devices, cp).and_then(|c| {
            let mesh = crate::llama::context_mesh(devices, cp, ep)?;
            *self = c;
            Ok(mesh)
        }))
    }

    fn shape(&mut self) -> Shape<'_> {
        Shape {
            vocab: self.vocab,
            seq: &mut self.seq,
            batch_per_device: &mut self.batch_per_device,
            layers: &mut self.layers,
        }
    }

    fn logits_head(&self) -> Option<PostFn> {
        Some(if self.tie_embeddings {
            stackscan::model::logits_head::<TiedCausalLm<Tensor, LlamaStack>>(self)
        } else {
            stackscan::model::logits_head::<CausalLm<Tensor, LlamaStack>>(self)
        })
    }

    fn decode_kinds(&self) -> Option<Vec<DecodeKind>> {
        Some(vec![stackscan::decode::decode_kind::<Decoder<Tensor>>(
            self,
        )])
    }

    fn hf_weights(&self) -> Option<Result<HfMap>> {
        Some(match self.window {
            // Refused rather than written as a `LlamaForCausalLM` that attends to every
            // earlier position: the checkpoint would load as another model.
            Some(w) => Err(stackscan::Error::InvalidOp {
                op: "hf weights",
                message: format!(
                    "the Llama with a sliding window ({w} positions) has no Hugging Face \
                     counterpart here: `LlamaForCausalLM` attends to every earlier position"
                ),
            }),
            None => super::hf::map(self),
        })
    }

    fn hf_config_json(&self) -> Option<serde_json::Value> {
        Some(super::hf::config_json(self))
    }
}
