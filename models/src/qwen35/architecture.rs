//! The model as every command knows it (`--model qwen35`): its [`Architecture`] impl, one line
//! of [`crate::registry::BUILT_IN`].

use crate::causal_lm::CausalLm;
use stackscan::cost::ActiveExperts;
use stackscan::decode::DecodeKind;
use stackscan::fsdp::{PostFn, StackModel};
use stackscan::hf_map::HfMap;
use stackscan::plan::PlanOptions;
use stackscan::{Mesh, Result};

use super::*;
use crate::jobs::MoeFlags;
use crate::registry::{Architecture, Shape};

/// The declared Qwen3.5-style hybrid as the commands know it (`--model qwen35`).
impl Architecture for Qwen35Config {
    fn about() -> &'static str {
        "Qwen3.5-style hybrid: blocks of `[GDN, GDN, GDN, attention]` (published: \
         Qwen3.5-35B-A3B, 10 blocks)"
    }

    fn published() -> &'static str {
        "qwen35-35b-a3b"
    }

    fn default_plans(options: PlanOptions) -> Option<Result<String>> {
        Some(describe_plans(options))
    }

    fn build(&self) -> Result<(StackModel, PlanOptions)> {
        declared::<Qwen35Stack>(self)
    }

    fn describe(&self) -> String {
        let c = self;
        let mut line = format!(
            "Qwen3.5-style hybrid (declared with the macros): {} layers of [GDN, GDN, GDN, attention], d {}, GDN {}/{} heads × {}, attention {}/{} heads × {}, {} experts top-{} of width {} + a gated shared expert of {}, vocab {}; {} × {} tokens per device",
            c.layers,
            c.d_model,
            c.gdn.key_heads,
            c.gdn.value_heads,
            c.gdn.key_dim,
            c.attention.heads,
            c.attention.kv_heads,
            c.attention.head_dim,
            c.experts,
            c.top_k,
            c.expert_width,
            c.shared_width,
            c.vocab,
            c.batch_per_device,
            c.seq
        );
        if c.expert_mesh.is_parallel() {
            line.push_str(&format!(
                "; expert parallel: fsdp {} × expert {}",
                c.expert_mesh.fsdp, c.expert_mesh.expert
            ));
        }
        line
    }

    fn shape(&mut self) -> Shape<'_> {
        Shape {
            vocab: self.vocab,
            seq: &mut self.seq,
            batch_per_device: &mut self.batch_per_device,
            layers: &mut self.layers,
        }
    }

    fn experts(&self) -> Option<ActiveExperts> {
        Some(ActiveExperts {
            experts: self.experts as u64,
            active: self.top_k as u64,
        })
    }

    fn set_moe_flags(&mut self, flags: MoeFlags) -> bool {
        self.direct_token_gather = flags.direct_token_gather;
        self.dlhs_transpose_rhs = flags.dlhs_transpose_rhs;
        true
    }

    fn active_parameters(&self, m: &StackModel) -> Option<u64> {
        Some(active_parameters(self, m))
    }

    fn split_experts(&mut self, devices: usize, ep: usize) -> Option<Result<Mesh>> {
        Some(self.with_expert_parallel(devices, ep).and_then(|c| {
            let mesh = c.expert_mesh.mesh()?;
            *self = c;
            Ok(mesh)
        }))
    }

    /// Refused: a Gated DeltaNet layer carries its recurrent state along the sequence, so the
    /// piece of a sequence on device `c` needs the state the pieces before it end with. That
    /// state could be passed on (each piece's chunk recurrence is affine in its initial state,
    /// so the pieces' transitions compose by a prefix scan over `context`), but it is not
    /// built yet; running the layers on each piece from a zero state would train a different
    /// model without a word.
    fn split_context(&mut self, _: usize, cp: usize, _: usize) -> Option<Result<Mesh>> {
        Some(Err(stackscan::Error::InvalidOp {
            op: "context_parallel",
            message: format!(
                "--cp {cp}: Qwen3.5's Gated DeltaNet layers carry a recurrent state along the \
                 sequence, and passing it from one device's piece to the next is not built; \
                 train it with --cp 1"
            ),
        }))
    }

    fn logits_head(&self) -> Option<PostFn> {
        Some(stackscan::model::logits_head::<CausalLm<Tensor, Qwen35Stack>>(self))
    }

    fn decode_kinds(&self) -> Option<Vec<DecodeKind>> {
        use stackscan::decode::decode_kind;
        let c = super::decode::decoding(self);
        Some(vec![
            decode_kind::<super::Gdn<Tensor>>(&c),
            decode_kind::<super::Attention<Tensor>>(&c),
        ])
    }

    fn hf_weights(&self) -> Option<Result<HfMap>> {
        Some(super::hf::map(self))
    }

    fn hf_config_json(&self) -> Option<serde_json::Value> {
        Some(super::hf::config_json(self))
    }
}
