//! MoE load balancing on the tiny DeepSeek-V3 model as the main job trains it (4 devices,
//! Adam at the job's 3e-3, synthetic batches): each step reports the fraction of routed
//! (token, expert) assignments dropped for capacity (`moe.dropped`) and the load imbalance.
//!
//! A device routes one sequence of 64 tokens, so capacity (1.25 × a balanced load) is spent
//! per sequence. Two things keep the drops low: the embedding's `normal(1)` initialisation
//! (at the layers' 0.02 every router saw nearly one input per sequence and the preset dropped
//! 31 % at the first step, 46 % over 200 steps), and the preset's sequence-wise balancing
//! loss (α 0.1), which trains the routers to spread each sequence's tokens. DeepSeek-V3's
//! selection-bias rule balances the global load, which is not what a per-sequence capacity
//! needs. Measured with the release build and default XLA flags (`stackscan train --model
//! deepseek3 --steps 200 --metrics …`): 3.0 % dropped over 200 steps with the preset's
//! balancing, 8.4 % with neither rule (13 % over the last 66 steps).
//!
//! The rule's own direction is checked where it is computed: the bias's gradient is each
//! expert's load share over the balanced one, so a sign step lowers the crowded expert's bias.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan::fsdp::Adam;
use stackscan_models::deepseek3::{DeepSeek3Config, synthetic_batch};
use stackscan_models::moe::{DROPPED, IMBALANCE};
use stackscan_models::registry::Architecture;
use stackscan_runtime::Mesh;
use stackscan_runtime::testing as common;
use stackscan_runtime::train::{HostInput, Trainer};

const DEVICES: usize = 4;

/// Per step: (dropped fraction, load imbalance) of `steps` steps of `c`.
fn train(c: DeepSeek3Config, steps: u64) -> Vec<(f32, f32)> {
    let client = common::step_bound_cpu_client(DEVICES);
    let mesh = Mesh::new(&client, "fsdp", DEVICES).unwrap();
    let (model, options) = Architecture::build(&c).unwrap();
    let adam = Adam {
        lr: 3e-3,
        ..Adam::default()
    };
    let mut trainer = Trainer::new(&client, &mesh, &model, options, adam, 17).unwrap();
    (0..steps)
        .map(|step| {
            let inputs: Vec<Vec<HostInput>> = (0..DEVICES as u64)
                .map(|d| {
                    let seed = step * DEVICES as u64 + d;
                    let (t, l) = synthetic_batch(&c, c.batch_per_device, seed);
                    vec![HostInput::I32(t), HostInput::I32(l)]
                })
                .collect();
            let r = trainer.step(&inputs).unwrap();
            (r.aux(DROPPED).unwrap(), r.aux(IMBALANCE).unwrap())
        })
        .collect()
}

fn mean(v: &[(f32, f32)]) -> (f32, f32) {
    let n = v.len().max(1) as f32;
    (
        v.iter().map(|p| p.0).sum::<f32>() / n,
        v.iter().map(|p| p.1).sum::<f32>() / n,
    )
}

/// The preset over 200 steps: its balancing keeps the dropped assignments under 5 %, and
/// under those of the same run with neither rule, which drops over 5 % late in the run.
#[test]
#[ignore = "two 200-step runs: a property of training, run by name with the other long runs"]
fn the_preset_drops_under_5_percent_over_200_steps() {
    let steps = 200;
    let tiny = DeepSeek3Config::tiny();
    assert!(tiny.aux_loss_alpha > 0.0 && tiny.bias_update_speed > 0.0);
    let on = train(tiny, steps);
    let off = train(
        DeepSeek3Config {
            aux_loss_alpha: 0.0,
            bias_update_speed: 0.0,
            ..tiny
        },
        steps,
    );
    let (all_on, all_off) = (mean(&on), mean(&off));
    let (late_on, late_off) = (mean(&on[134..]), mean(&off[134..]));
    eprintln!(
        "(dropped, imbalance) over {steps} steps: balanced {all_on:?}, unbalanced {all_off:?}; \
         last 66 steps: {late_on:?}, {late_off:?}"
    );
    assert!(all_on.0 < 0.05, "{all_on:?}");
    assert!(late_on.0 < 0.05, "{late_on:?}");
    assert!(late_off.0 > 0.05, "{late_off:?}");
    assert!(
        all_on.0 < all_off.0 && all_on.1 < all_off.1,
        "{all_on:?} vs {all_off:?}"
    );
}

/// DeepSeek-V3's selection-bias rule at the layer: the recorded term is zero, and its
/// gradient with respect to the bias is each expert's share of the assignments less the
/// balanced share, so the sign step `b − γ·sign(g)` lowers the bias of the expert that six of
/// eight tokens chose, raises those of the two nobody chose and leaves the one that got its
/// balanced two. Sigmoid router, 4 experts in one group, top-1; the bias starts at zero.
#[test]
fn the_bias_gradient_is_the_load_deviation() {
    use stackscan::auxiliary::AuxRole;
    use stackscan::rng::Rng;
    use stackscan::{DType, TensorType};
    use stackscan_models::moe::dispatch::ExpertWeights;
    use stackscan_models::moe::parallel::ExpertMesh;
    use stackscan_models::moe::router::{RouterConfig, RouterKind};
    use stackscan_models::moe::{AUX_LOSS, MoeConfig, MoeWeights, moe};
    use stackscan_runtime::testing::graph::{Arg, Compiled, Data, float_arg, function};
    let (t, e, f) = (8_i64, 4_usize, 2_i64);
    let mut x = Vec::new();
    for token in 0..t {
        x.extend(if token < 6 { [1.0, 0.0] } else { [0.0, 1.0] });
    }
    let mut router = vec![0.0; 2 * e];
    router[0] = 5.0; // d 0 → expert 0
    router[e + 1] = 5.0; // d 1 → expert 1
    let arg = |dims: &[i64], data: Vec<f64>| Arg {
        ty: TensorType::new(DType::F64, dims),
        data: Data::F(data),
    };
    let mut rng = Rng::new(5);
    let args = vec![
        arg(&[t, 2], x),
        arg(&[2, e as i64], router),
        arg(&[e as i64], vec![0.0; e]),
        float_arg(&mut rng, &[e as i64, 2, f], -1.0, 1.0),
        float_arg(&mut rng, &[e as i64, 2, f], -1.0, 1.0),
        float_arg(&mut rng, &[e as i64, f, 2], -1.0, 1.0),
    ];
    let cfg = MoeConfig {
        router: RouterConfig {
            experts: e,
            top_k: 1,
            kind: RouterKind::SigmoidGrouped {
                groups: 1,
                top_groups: 1,
                scaling: 1.0,
            },
        },
        capacity_factor: 0.0,
        bias_update_speed: 0.01,
        aux_loss_coef: 0.0,
        direct_token_gather: false,
        dlhs_transpose_rhs: false,
        gated_shared: false,
        expert_mesh: ExpertMesh::OFF,
    };
    let g = function("moe_bias_rule", &args, |p| {
        let w = MoeWeights {
            router: &p[1],
            router_bias: Some(&p[2]),
            experts: ExpertWeights {
                gate: &p[3],
                up: &p[4],
                down: &p[5],
            },
            shared: None,
        };
        moe(&cfg, &p[0], &w, 1)?;
        let aux = p[0].scope().take_aux();
        let (_, term) = aux
            .into_iter()
            .find(|(o, _)| o.name == AUX_LOSS && o.role == AuxRole::Loss)
            .expect("the rule records its term");
        Ok(vec![term])
    });
    let client = common::cpu_client(1);
    assert_eq!(Compiled::new(&client, &g).run(&args)[0], [0.0]);
    let grads_fn = stackscan::vjp(&g).unwrap();
    let mut vjp_args = args.clone();
    vjp_args.push(Arg {
        ty: g.result_types()[0].clone(),
        data: Data::F(vec![1.0]),
    });
    let grads = Compiled::new(&client, &grads_fn).run(&vjp_args);
    // Loads 6, 2, 0, 0 of 8 against a balanced 2 each.
    let expected = [6.0 / 8.0 - 0.25, 2.0 / 8.0 - 0.25, -0.25, -0.25];
    for (i, (g, want)) in grads[2].iter().zip(expected).enumerate() {
        assert!((g - want).abs() < 1e-6, "expert {i}: {g} vs {want}");
    }
}
