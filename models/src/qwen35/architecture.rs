//! The model as every command knows it (`--model qwen35`): its [`Architecture`] impl, one line
//! of [`crate::registry::BUILT_IN`].

use crate::causal_lm::CausalLm;
use stackscan::Result;
use stackscan::fsdp::StackModel;
use stackscan::plan::PlanOptions;

use super::*;
use crate::registry::Architecture;

/// The declared Qwen3.5-style hybrid as the commands know it (`--model qwen35`).
#[derive(Debug)]
pub struct Qwen35;

impl Architecture for Qwen35 {
    type Config = Qwen35Config;
    type Stack = Qwen35Stack;
    const ABOUT: &'static str = "Qwen3.5-style hybrid: blocks of `[GDN, GDN, GDN, attention]` (published: Qwen3.5-35B-A3B, 10 blocks)";
    const PUBLISHED: &'static str = "qwen35-35b-a3b";

    fn build(c: &Qwen35Config) -> Result<(StackModel, PlanOptions)> {
        for_config(c)
    }

    fn describe(c: &Qwen35Config) -> String {
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

    fn shape(c: &mut Qwen35Config) -> crate::registry::Shape<'_> {
        crate::registry::Shape {
            vocab: c.vocab,
            seq: &mut c.seq,
            batch_per_device: &mut c.batch_per_device,
            layers: &mut c.layers,
        }
    }

    fn experts(c: &Qwen35Config) -> Option<stackscan::cost::ActiveExperts> {
        Some(stackscan::cost::ActiveExperts {
            experts: c.experts as u64,
            active: c.top_k as u64,
        })
    }

    fn with_moe_flags(c: &Qwen35Config, flags: crate::jobs::MoeFlags) -> Option<Qwen35Config> {
        Some(Qwen35Config {
            direct_token_gather: flags.direct_token_gather,
            dlhs_transpose_rhs: flags.dlhs_transpose_rhs,
            ..*c
        })
    }

    fn default_plans(options: PlanOptions) -> Option<Result<String>> {
        Some(describe_plans(options))
    }

    fn active_parameters(c: &Qwen35Config, m: &StackModel) -> Option<u64> {
        Some(active_parameters(c, m))
    }

    fn expert_parallel(
        c: &Qwen35Config,
        devices: usize,
        ep: usize,
    ) -> Option<Result<(Qwen35Config, stackscan::Mesh)>> {
        Some(c.with_expert_parallel(devices, ep).and_then(|c| {
            let mesh = c.expert_mesh.mesh()?;
            Ok((c, mesh))
        }))
    }

    /// Refused: a Gated DeltaNet layer carries its recurrent state along the sequence, so the
    /// piece of a sequence on device `c` needs the state the pieces before it end with. That
    /// state could be passed on (each piece's chunk recurrence is affine in its initial state,
    /// so the pieces' transitions compose by a prefix scan over `context`), but it is not
    /// built yet; running the layers on each piece from a zero state would train a different
    /// model without a word.
    fn context_parallel(
        _: &Qwen35Config,
        _: usize,
        cp: usize,
        _: usize,
    ) -> Option<Result<(Qwen35Config, stackscan::Mesh)>> {
        Some(Err(stackscan::Error::InvalidOp {
            op: "context_parallel",
            message: format!(
                "--cp {cp}: Qwen3.5's Gated DeltaNet layers carry a recurrent state along the \
                 sequence, and passing it from one device's piece to the next is not built; \
                 train it with --cp 1"
            ),
        }))
    }

    fn logits_head(c: &Qwen35Config) -> Option<stackscan::fsdp::PostFn> {
        Some(stackscan::model::logits_head::<CausalLm<Tensor, Qwen35Stack>>(c))
    }

    fn decode_kinds(c: &Qwen35Config) -> Option<Vec<stackscan::decode::DecodeKind>> {
        use stackscan::decode::decode_kind;
        let c = super::decode::decoding(c);
        Some(vec![
            decode_kind::<super::Gdn<Tensor>>(&c),
            decode_kind::<super::Attention<Tensor>>(&c),
        ])
    }

    fn hf_weights(c: &Qwen35Config) -> Option<Result<stackscan::hf_map::HfMap>> {
        Some(super::hf::map(c))
    }

    fn hf_config_json(c: &Qwen35Config) -> Option<serde_json::Value> {
        Some(super::hf::config_json(c))
    }
}
