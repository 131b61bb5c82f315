//! MoE load balancing on the tiny DeepSeek-V3 model as the main job trains it (4 devices,
//! Adam at the job's 3e-3, synthetic batches): each step reports the fraction of routed
//! (token, expert) assignments dropped for capacity, and DeepSeek-V3's auxiliary-loss-free
//! bias rule brings it down where the unbalanced router keeps dropping a third or more.
//!
//! The CI test compares a short run with balancing on and off; the `#[ignore]`d one is the
//! 200-step claim (`cargo test --release -p stackscan-examples --test moe_balance -- --ignored`).

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
                    let (t, l) = synthetic_batch(&c, c.batch_per_device, step * DEVICES as u64 + d);
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

fn off() -> DeepSeek3Config {
    DeepSeek3Config {
        bias_update_speed: 0.0,
        ..DeepSeek3Config::tiny()
    }
}

/// 40 steps: both runs start from the same weights and the same skewed routing; with the
/// bias rule the last 20 steps drop under a third of what they drop without it.
#[test]
fn the_bias_rule_cuts_the_dropped_assignments() {
    let steps = 40;
    let on = train(DeepSeek3Config::tiny(), steps);
    let off = train(off(), steps);
    assert_eq!(on[0], off[0], "the first step routes before any update");
    assert!(on[0].0 > 0.2, "the untrained router drops: {:?}", on[0]);
    let (late_on, late_off) = (mean(&on[20..]), mean(&off[20..]));
    eprintln!("last 20 of {steps} steps: balanced {late_on:?}, unbalanced {late_off:?}");
    assert!(late_off.0 > 0.3, "{late_off:?}");
    assert!(late_on.0 < late_off.0 / 3.0, "{late_on:?} vs {late_off:?}");
    assert!(late_on.1 < late_off.1, "{late_on:?} vs {late_off:?}");
}

/// The claim of the issue: over 200 steps the balanced run drops under 5 % of the routed
/// assignments, the unbalanced one over 30 %.
#[test]
#[ignore = "two 200-step runs; minutes in a debug build"]
fn balancing_keeps_drops_under_5_percent_over_200_steps() {
    let steps = 200;
    let on = mean(&train(DeepSeek3Config::tiny(), steps));
    let off = mean(&train(off(), steps));
    eprintln!("mean over {steps} steps (dropped, imbalance): balanced {on:?}, unbalanced {off:?}");
    assert!(on.0 < 0.05, "{on:?}");
    assert!(off.0 > 0.30, "{off:?}");
}
