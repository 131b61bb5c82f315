//! A training run's losses, step by step, for the precision tests (`precision.rs`, and the
//! 100-step comparison in `precision_100_steps.rs`, a binary of its own so each stays under
//! two minutes).

use stackscan::Precision;
use stackscan::fsdp::Adam;
use stackscan_models::registry::{ModelName, Preset};
use stackscan_runtime::train::{HostInput, Trainer};
use stackscan_runtime::{Client, Mesh};

/// The loss of each of `steps` steps of `model`'s tiny preset on `devices` of `client`, Adam
/// at `lr`, under `precision`; the weights (seed 17) and batches are the same for every
/// precision.
pub fn losses(
    client: &Client,
    devices: usize,
    model: ModelName,
    precision: Precision,
    steps: u64,
    lr: f64,
) -> Vec<f32> {
    let c = model.preset(Preset::Tiny).unwrap();
    let (m, options) = c.build().unwrap();
    let mesh = Mesh::new(client, "fsdp", devices).unwrap();
    let adam = Adam {
        lr,
        ..Adam::default()
    };
    let options = options.with_precision(precision);
    let mut trainer = Trainer::new(client, &mesh, &m, options, adam, 17).unwrap();
    let n = devices as u64;
    (0..steps)
        .map(|step| {
            let inputs: Vec<Vec<HostInput>> = (0..n)
                .map(|d| {
                    let (t, l) = c.architecture().synthetic_batch(step * n + d);
                    vec![HostInput::I32(t), HostInput::I32(l)]
                })
                .collect();
            trainer.step(&inputs).unwrap().loss
        })
        .collect()
}
