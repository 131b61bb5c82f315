//! The model as every command knows it (`--model deepseek3`): its [`Architecture`] impl, one line
//! of [`crate::registry::BUILT_IN`].

use crate::causal_lm::CausalLm;
use stackscan::Result;
use stackscan::fsdp::StackModel;
use stackscan::plan::PlanOptions;

use super::*;
use crate::registry::Architecture;

/// The declared DeepSeek-V3-style model as the commands know it (`--model deepseek3`).
#[derive(Debug)]
pub struct DeepSeek3;

impl Architecture for DeepSeek3 {
    type Config = DeepSeek3Config;
    type Stack = DeepSeek3Stack;
    const ABOUT: &'static str =
        "DeepSeek-V3-style: MLA, a dense prefix, then MoE layers (published: 3 dense + 58 MoE)";
    const PUBLISHED: &'static str = "deepseek3";
    // At 1e-2 the MoE model's loss barely falls in 30 steps.
    const DEFAULT_LR: f64 = 3e-3;

    fn build(c: &DeepSeek3Config) -> Result<(StackModel, PlanOptions)> {
        for_config(c)
    }

    fn describe(c: &DeepSeek3Config) -> String {
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

    fn shape(c: &mut DeepSeek3Config) -> crate::registry::Shape<'_> {
        crate::registry::Shape {
            vocab: c.vocab,
            seq: &mut c.seq,
            batch_per_device: &mut c.batch_per_device,
            layers: &mut c.layers,
        }
    }

    fn experts(c: &DeepSeek3Config) -> Option<stackscan::cost::ActiveExperts> {
        Some(stackscan::cost::ActiveExperts {
            experts: c.experts as u64,
            active: c.top_k as u64,
        })
    }

    fn with_moe_flags(
        c: &DeepSeek3Config,
        flags: crate::jobs::MoeFlags,
    ) -> Option<DeepSeek3Config> {
        Some(DeepSeek3Config {
            direct_token_gather: flags.direct_token_gather,
            dlhs_transpose_rhs: flags.dlhs_transpose_rhs,
            ..*c
        })
    }

    fn expert_parallel(
        c: &DeepSeek3Config,
        devices: usize,
        ep: usize,
    ) -> Option<Result<(DeepSeek3Config, stackscan::Mesh)>> {
        Some(c.with_expert_parallel(devices, ep).and_then(|c| {
            let mesh = c.expert_mesh.mesh()?;
            Ok((c, mesh))
        }))
    }

    fn context_parallel(
        c: &DeepSeek3Config,
        devices: usize,
        cp: usize,
        ep: usize,
    ) -> Option<Result<(DeepSeek3Config, stackscan::Mesh)>> {
        Some(c.with_context_parallel(devices, cp, ep).and_then(|c| {
            let mesh = c.context_mesh(devices)?;
            Ok((c, mesh))
        }))
    }

    fn logits_head(c: &DeepSeek3Config) -> Option<stackscan::fsdp::PostFn> {
        Some(stackscan::model::logits_head::<
            CausalLm<Tensor, DeepSeek3Stack>,
        >(c))
    }

    fn decode_kinds(c: &DeepSeek3Config) -> Option<Vec<stackscan::decode::DecodeKind>> {
        use stackscan::decode::decode_kind;
        let c = super::decode::decoding(c);
        Some(vec![
            decode_kind::<super::Dense<Tensor>>(&c),
            decode_kind::<super::MoeLayer<Tensor>>(&c),
        ])
    }

    fn hf_weights(c: &DeepSeek3Config) -> Option<Result<stackscan::hf_map::HfMap>> {
        Some(super::hf::map(c))
    }

    fn hf_config_json(c: &DeepSeek3Config) -> Option<serde_json::Value> {
        Some(super::hf::config_json(c))
    }
}
