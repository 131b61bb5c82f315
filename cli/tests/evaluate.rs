//! Held-out evaluation (`Trainer::evaluate`): the loss of the current weights with nothing
//! updated. It equals the loss the next step reports on the same batch (the step's own
//! program without its update, to f32 rounding), repeats exactly, and leaves the training
//! run bit for bit as it would be without it.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan::fsdp::Adam;
use stackscan::plan::PlanOptions;
use stackscan_models::llama::{LlamaConfig, synthetic_batch};
use stackscan_models::registry::Architecture;
use stackscan_runtime::Mesh;
use stackscan_runtime::testing::cpu_client;
use stackscan_runtime::train::{HostInput, Trainer};

const DEVICES: usize = 2;

fn config() -> LlamaConfig {
    LlamaConfig {
        layers: 2,
        seq: 16,
        batch_per_device: 2,
        ..LlamaConfig::tiny()
    }
}

fn batch(step: u64) -> Vec<Vec<HostInput>> {
    let c = config();
    (0..DEVICES as u64)
        .map(|d| {
            let (t, l) = synthetic_batch(&c, c.batch_per_device, 10 * step + d);
            vec![HostInput::I32(t), HostInput::I32(l)]
        })
        .collect()
}

#[test]
fn evaluation_is_the_step_loss_and_changes_nothing() {
    let client = cpu_client(DEVICES);
    let mesh = Mesh::new(&client, "fsdp", DEVICES).unwrap();
    let model = Architecture::build(&config()).unwrap().0;
    let adam = Adam {
        lr: 1e-2,
        ..Adam::default()
    };
    let trainer = || {
        Trainer::new(
            &client,
            &mesh,
            &model,
            PlanOptions::prefetch_deferred(),
            adam,
            3,
        )
        .unwrap()
    };
    let mut evaluated = trainer();
    let mut plain = trainer();
    let mut losses = Vec::new();
    for step in 0..3 {
        let before = evaluated.evaluate(&batch(step)).unwrap();
        assert_eq!(
            before.to_bits(),
            evaluated.evaluate(&batch(step)).unwrap().to_bits(),
            "evaluation repeats exactly"
        );
        let reported = evaluated.step(&batch(step)).unwrap().loss;
        assert!(
            (before - reported).abs() <= 1e-6 * reported.abs(),
            "step {step}: evaluated {before}, the step reported {reported}"
        );
        losses.push(reported.to_bits());
    }
    let without: Vec<u32> = (0..3)
        .map(|step| plain.step(&batch(step)).unwrap().loss.to_bits())
        .collect();
    assert_eq!(losses, without, "evaluating changed the run");
    // It reads the weights as they are now: after three updates, another loss on batch 0.
    let after = evaluated.evaluate(&batch(0)).unwrap();
    assert!(
        (after - f32::from_bits(losses[0])).abs() > 1e-4,
        "{after} vs {}",
        f32::from_bits(losses[0])
    );
}
