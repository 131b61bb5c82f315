//! The model as every command knows it (`--model deepseek3`): its [`Architecture`] impl, one line
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

/// The declared DeepSeek-V3-style model as the commands know it (`--model deepseek3`).
impl Architecture for DeepSeek3Config {
    fn about() -> &'static str {
        "DeepSeek-V3-style: MLA, a dense prefix, then MoE layers (published: 3 dense + 58 MoE)"
    }

    fn published() -> &'static str {
        "deepseek3"
    }

    // At 1e-2 the MoE model's loss barely falls in 30 steps.
    fn default_lr() -> f64 {
        3e-3
    }

    fn build(&self) -> Result<(StackModel, PlanOptions)> {
        declared::<DeepSeek3Stack>(self)
    }

    fn describe(&self) -> String {
        let c = self;
        let mut line = format!(
            "DeepSeek-V3 (declared with the macros): {} layers ({} dense), d {}, MLA {} heads, {} experts top-{} in {} groups (top {}), {} shared, width {}, vocab {}; {} × {} tokens per device",
            c.layers,
            c.dense_layers,
            c.d,
            c.mla.heads,
            c.experts,
            c.top_k,
            c.groups,
            c.top_groups,
            c.shared_experts,
            c.expert_width,
            c.vocab,
            c.batch_per_device,
            c.seq_per_device()
        );
        line.push_str(&crate::llama::describe_context(c.seq, c.context));
        if c.expert_mesh.is_parallel() {
            line.push_str(&format!(
                "; expert parallel: fsdp {} × expert {}{}",
                c.expert_mesh.fsdp,
                c.expert_mesh.expert,
                if c.expert_mesh.context > 1 {
                    format!(
                        " × context {} (experts over expert × context)",
                        c.expert_mesh.context
                    )
                } else {
                    String::new()
                }
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

    fn split_experts(&mut self, devices: usize, ep: usize) -> Option<Result<Mesh>> {
        Some(self.with_expert_parallel(devices, ep).and_then(|c| {
            let mesh = c.expert_mesh.mesh()?;
            *self = c;
            Ok(mesh)
        }))
    }

    fn split_context(&mut self, devices: usize, cp: usize, ep: usize) -> Option<Result<Mesh>> {
        Some(self.with_context_parallel(devices, cp, ep).and_then(|c| {
            let mesh = c.context_mesh(devices)?;
            *self = c;
            Ok(mesh)
        }))
    }

    fn logits_head(&self) -> Option<PostFn> {
        Some(stackscan::model::logits_head::<
            CausalLm<Tensor, DeepSeek3Stack>,
        >(self))
    }

    fn decode_kinds(&self) -> Option<Vec<DecodeKind>> {
        use stackscan::decode::decode_kind;
        let c = super::decode::decoding(self);
        Some(vec![
            decode_kind::<super::Dense<Tensor>>(&c),
            decode_kind::<super::MoeLayer<Tensor>>(&c),
        ])
    }

    fn hf_weights(&self) -> Option<Result<HfMap>> {
        Some(super::hf::map(self))
    }

    fn hf_config_json(&self) -> Option<serde_json::Value> {
        Some(super::hf::config_json(self))
    }
}
