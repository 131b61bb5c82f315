//! Qwen3.5 with its published mixture-of-experts FFN, for pricing: the hybrid stack of
//! [`qwen35`](crate::qwen35) (GDN and gated-attention mixers, the same stack and plan) with
//! each layer's dense FFN replaced by routed experts plus a sigmoid-gated shared expert, as
//! the released model has. The trained model's FFN is being swapped to an MoE in
//! `qwen35.rs` itself; until then the cost model prices this variant, built from the same
//! mixer functions, so the prediction counts the FLOPs and gathered bytes of the real model.

use std::rc::Rc;

use stackscan::fsdp::{LayerFn, ParamSpec, StackModel};
use stackscan::{DType, Error, Result, Tensor, nn};

use crate::gated_attention::{attention_params, gated_attention};
use crate::gdn_layer::{gdn_params, gdn_sublayer};
use crate::moe::{
    ExpertWeights, MoeConfig, MoeWeights, RouterConfig, RouterKind, SharedExpert, moe,
};
use crate::qwen35::{Qwen35Config, Qwen35Full, model};

/// The MoE FFN's sizes (`num_experts`, `num_experts_per_tok`, `moe_intermediate_size`,
/// `shared_expert_intermediate_size`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Qwen35Moe {
    /// Routed experts.
    pub experts: usize,
    /// Experts per token.
    pub top_k: usize,
    /// One routed expert's hidden width.
    pub expert_width: i64,
    /// The shared expert's hidden width.
    pub shared_width: i64,
    /// Expert capacity over a balanced load.
    pub capacity_factor: f64,
}

impl Qwen35Moe {
    /// Qwen3.5-35B-A3B: 256 experts, 8 per token, width 512, one shared expert of 512.
    pub const fn qwen35_35b_a3b() -> Self {
        Qwen35Moe {
            experts: 256,
            top_k: 8,
            expert_width: 512,
            shared_width: 512,
            capacity_factor: 1.25,
        }
    }

    fn config(&self) -> MoeConfig {
        MoeConfig {
            router: RouterConfig {
                experts: self.experts,
                top_k: self.top_k,
                kind: RouterKind::Softmax,
            },
            capacity_factor: self.capacity_factor,
            direct_token_gather: false,
            dlhs_transpose_rhs: false,
            expert_mesh: crate::moe::ExpertMesh::OFF,
            gated_shared: true,
        }
    }

    fn params(&self, d: i64) -> Vec<ParamSpec> {
        let (e, f, s, f32) = (
            self.experts as i64,
            self.expert_width,
            self.shared_width,
            DType::F32,
        );
        vec![
            ParamSpec::replicated("ffn_norm", &[d], f32),
            ParamSpec::sharded("router", &[d, e], f32, 0),
            ParamSpec::sharded("experts_gate", &[e, d, f], f32, 0),
            ParamSpec::sharded("experts_up", &[e, d, f], f32, 0),
            ParamSpec::sharded("experts_down", &[e, f, d], f32, 0),
            ParamSpec::sharded("shared_gate", &[d, s], f32, 0),
            ParamSpec::sharded("shared_up", &[d, s], f32, 0),
            ParamSpec::sharded("shared_down", &[s, d], f32, 0),
            ParamSpec::sharded("shared_gate_proj", &[d, 1], f32, 0),
        ]
    }
}

/// `h + moe(norm(h))` with weights `[norm, router, gate, up, down, s_gate, s_up, s_down,
/// s_proj]`.
fn moe_ffn(cfg: &MoeConfig, h: &Tensor, w: &[Tensor]) -> Result<Tensor> {
    let [norm, router, gate, up, down, s_gate, s_up, s_down, s_proj] = w else {
        return Err(Error::InvalidOp {
            op: "qwen35_moe",
            message: format!("the MoE FFN takes 9 weights, got {}", w.len()),
        });
    };
    let dims = h.dims().to_vec();
    let d = dims.last().copied().unwrap_or(0);
    let tokens =
        nn::rms_norm(h, norm, 1e-6)?.reshape(&[dims.iter().product::<i64>() / d.max(1), d])?;
    let weights = MoeWeights {
        router,
        router_bias: None,
        experts: ExpertWeights { gate, up, down },
        shared: Some(SharedExpert {
            gate: s_gate,
            up: s_up,
            down: s_down,
            gate_proj: Some(s_proj),
        }),
    };
    h.add(&moe(cfg, &tokens, &weights)?.reshape(&dims)?)
}

/// Qwen3.5 of `c` (40 layers, [`Qwen35Full`]'s stack) with the MoE FFN `m` in every layer.
pub fn model_with_moe(c: &Qwen35Config, m: &Qwen35Moe) -> Result<StackModel> {
    let mut base = model::<Qwen35Full>(c)?;
    m.config().router.validate()?;
    for kind in &mut base.kinds {
        let (mixer, forward): (Vec<ParamSpec>, LayerFn) = match kind.name.as_str() {
            "GDN" => {
                let (g, moe_cfg) = (c.gdn, m.config());
                let n = gdn_params(&g).len();
                (
                    gdn_params(&g),
                    Rc::new(move |h, w| moe_ffn(&moe_cfg, &gdn_sublayer(&g, h, &w[..n])?, &w[n..])),
                )
            }
            "attention" => {
                let (a, moe_cfg) = (c.attention, m.config());
                let n = attention_params(&a).len();
                (
                    attention_params(&a),
                    Rc::new(move |h, w| {
                        moe_ffn(&moe_cfg, &gated_attention(&a, h, &w[..n])?, &w[n..])
                    }),
                )
            }
            other => {
                return Err(Error::InvalidOp {
                    op: "qwen35_moe",
                    message: format!("unexpected layer kind `{other}` in the Qwen3.5 stack"),
                });
            }
        };
        let mut params = mixer;
        params.extend(m.params(c.d_model));
        kind.params = params;
        kind.forward = forward;
    }
    Ok(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_moe_variant_has_the_published_parameter_count() {
        let m = model_with_moe(
            &Qwen35Config::qwen35_35b_a3b(),
            &Qwen35Moe::qwen35_35b_a3b(),
        )
        .unwrap();
        let stack: u64 = (0..m.stack.len())
            .map(|l| {
                m.kinds[m.stack.kind_of(l)]
                    .params
                    .iter()
                    .map(|p| p.shape.iter().product::<i64>() as u64)
                    .sum::<u64>()
            })
            .sum();
        let outer: u64 = m
            .outer_params
            .iter()
            .map(|p| p.shape.iter().product::<i64>() as u64)
            .sum();
        // 35 B in all (the name's "35B"); the routed experts alone are
        // 40 · 256 · 3 · 2048 · 512 = 32.2 B.
        let total = stack + outer;
        assert!((34.0e9..36.5e9).contains(&(total as f64)), "{total}");
    }
}
