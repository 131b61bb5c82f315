//! The training driver: a rejected step changes nothing, and training lowers the loss.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

#[path = "../../runtime/tests/common/mod.rs"]
mod common;

use stackscan::fsdp::Adam;
use stackscan::plan::PlanOptions;
use stackscan_examples::toy::{self, ToyConfig};
use stackscan_runtime::train::{HostInput, Trainer};
use stackscan_runtime::{Error, Mesh};

/// Device `d`'s `x` and `y` of the toy (rows of 8, two per device).
fn batch(devices: usize) -> Vec<Vec<HostInput>> {
    (0..devices)
        .map(|d| {
            (0..2)
                .map(|k| {
                    let v = (0..16).map(|i| ((i * 7 + d * 3 + k * 5) % 11) as f32 / 11.0 - 0.5);
                    HostInput::F32(v.collect())
                })
                .collect()
        })
        .collect()
}

#[test]
fn a_rejected_step_does_not_shift_later_updates() {
    let client = common::cpu_client(2);
    let mesh = Mesh::new(&client, "fsdp", 2).unwrap();
    let m = toy::hand_built(&ToyConfig::small(), 1).unwrap();
    let adam = Adam {
        lr: 0.05,
        ..Adam::default()
    };
    let mut fresh = Trainer::new(&client, &mesh, &m, PlanOptions::prefetch(), adam, 1).unwrap();
    let mut after_error =
        Trainer::new(&client, &mesh, &m, PlanOptions::prefetch(), adam, 1).unwrap();
    // One device's `x` has 3 values instead of 16.
    let mut bad = batch(2);
    bad[1][0] = HostInput::F32(vec![0.0; 3]);
    let err = after_error.step(&bad).unwrap_err();
    assert!(
        matches!(
            err,
            Error::HostDataLength {
                expected: 16,
                actual: 3,
                ..
            }
        ),
        "{err:?}"
    );
    let wrong_devices = after_error.step(&batch(1)).unwrap_err();
    assert!(
        matches!(
            wrong_devices,
            Error::DeviceLists {
                expected: 2,
                actual: 1
            }
        ),
        "{wrong_devices:?}"
    );
    let a: Vec<f32> = (0..4)
        .map(|_| fresh.step(&batch(2)).unwrap().loss)
        .collect();
    let b: Vec<f32> = (0..4)
        .map(|_| after_error.step(&batch(2)).unwrap().loss)
        .collect();
    assert_eq!(a, b, "a rejected step changed later updates");
    assert!(a[3] < a[0], "the loss falls on a fixed batch: {a:?}");
}
