//! MoE load balancing on the tiny DeepSeek-V3 model as the main job trains it (4 devices,
//! Adam at the job's 3e-3, synthetic batches): each step reports the fraction of routed
//! (token, expert) assignments dropped for capacity (`moe.dropped`) and the load imbalance,
//! and DeepSeek-V3's auxiliary-loss-free bias rule lowers both against the same run without
//! it (same weights, same batches, the same first step).
//!
//! The CI test trains a cheaper shape of the preset, sequences of 8 tokens (8 per device,
//! the same 64 tokens a device routes), 60 steps; the `#[ignore]`d one is the preset itself
//! for 200 steps (`cargo test --release -p stackscan-examples --test moe_balance --
//! --ignored`). Measured (CPU plugin, fast XLA flags): sequences of 8, steps 20–60, dropped
//! 15.1 % without the rule, 11.7 % at γ = 0.01; the preset over 200 steps, 45.6 % without,
//! 41.1 % at its γ = 0.001. The rule does not reach a few percent on this tiny model: its
//! routers' inputs are nearly alike across tokens (an untrained model drops 31 % at step 1
//! with sequences of 64 tokens, 9 % with sequences of 8), so any global rule moves whole
//! herds of tokens from one expert to the next.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan::fsdp::Adam;
use stackscan_examples::deepseek3::{self, DeepSeek3Config, synthetic_batch};
use stackscan_examples::moe::{DROPPED, IMBALANCE};
use stackscan_runtime::Mesh;
use stackscan_runtime::testing as common;
use stackscan_runtime::train::{HostInput, Trainer};

const DEVICES: usize = 4;

/// Per step: (dropped fraction, load imbalance) of `steps` steps of `c`.
fn train(c: DeepSeek3Config, steps: u64) -> Vec<(f32, f32)> {
    let client = common::cpu_client(DEVICES);
    let mesh = Mesh::new(&client, "fsdp", DEVICES).unwrap();
    let (model, options) = deepseek3::for_config(&c).unwrap();
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

fn with_speed(c: DeepSeek3Config, bias_update_speed: f64) -> DeepSeek3Config {
    DeepSeek3Config {
        bias_update_speed,
        ..c
    }
}

/// Sequences of 8 tokens, 60 steps: the rule (γ = 0.01) drops fewer assignments and
/// balances the load better over steps 20–60 than the same run without it.
#[test]
fn the_bias_rule_lowers_the_dropped_assignments() {
    let short = DeepSeek3Config {
        seq: 8,
        batch_per_device: 8,
        ..DeepSeek3Config::tiny()
    };
    let on = train(with_speed(short, 0.01), 60);
    let off = train(with_speed(short, 0.0), 60);
    assert_eq!(on[0], off[0], "the first step routes before any update");
    assert!(on[0].0 > 0.0, "capacity 1.25 drops: {:?}", on[0]);
    let (late_on, late_off) = (mean(&on[20..]), mean(&off[20..]));
    eprintln!("steps 20–60 (dropped, imbalance): balanced {late_on:?}, unbalanced {late_off:?}");
    assert!(late_on.0 < late_off.0 - 0.01, "{late_on:?} vs {late_off:?}");
    assert!(late_on.1 < late_off.1, "{late_on:?} vs {late_off:?}");
}

/// The preset itself, 200 steps: without the rule over 30 % of the assignments are dropped;
/// the preset's γ drops fewer.
#[test]
#[ignore = "two 200-step runs of the tiny preset; minutes"]
fn the_preset_over_200_steps() {
    let steps = 200;
    let tiny = DeepSeek3Config::tiny();
    let on = mean(&train(tiny, steps));
    let off = mean(&train(with_speed(tiny, 0.0), steps));
    eprintln!("mean over {steps} steps (dropped, imbalance): balanced {on:?}, unbalanced {off:?}");
    assert!(off.0 > 0.30, "{off:?}");
    assert!(on.0 < off.0, "{on:?} vs {off:?}");
}
