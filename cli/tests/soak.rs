//! Soak: many training steps leak neither device buffers nor host memory. After every step
//! the client holds exactly the trainer's state (weights and both moments on each device),
//! whether the step was applied, skipped as non-finite or refused for a bad input; and the
//! process's resident memory stops growing once the first steps have warmed the allocators.
//!
//! Run with `--nocapture` to see the measured figures. The test is alone in its binary because
//! resident memory is the whole process's: a test running beside it would blur the figure.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan_runtime::testing as common;

use stackscan::fsdp::Adam;
use stackscan::plan::PlanOptions;
use stackscan_models::toy::{self, ToyConfig};
use stackscan_runtime::train::{HostInput, NonFinitePolicy, Trainer};
use stackscan_runtime::{Error, Mesh};

const DEVICES: usize = 4;

/// Steps before the resident-memory baseline is taken: allocator arenas and XLA's first-run
/// caches fill during these.
const WARM_UP: usize = 20;

/// Resident memory may grow by at most this much after warm-up, whatever the step count: a
/// leak of one step's inputs (128 bytes per device) would stay under it for 1000 steps, but a
/// leak of any device buffer, result or compiled-program copy per step would not.
const RSS_GROWTH_BOUND_KIB: i64 = 8 * 1024;

/// The process's resident set size in KiB, from `/proc/self/status`.
fn rss_kib() -> i64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Device `d`'s `x` and `y` for step `s`: rows of 8, two per device.
fn batch(s: usize) -> Vec<Vec<HostInput>> {
    (0..DEVICES)
        .map(|d| {
            (0..2)
                .map(|k| {
                    let v = (0..16).map(|i| ((i * 7 + d * 3 + k * 5 + s) % 11) as f32 / 11.0 - 0.5);
                    HostInput::F32(v.collect())
                })
                .collect()
        })
        .collect()
}

/// Runs `steps` steps of the 12-layer toy on 4 devices; every 40th batch holds a NaN (skipped)
/// and every 30th is one value short (refused).
fn soak(steps: usize) {
    let client = common::cpu_client(DEVICES);
    let mesh = Mesh::new(&client, "fsdp", DEVICES).unwrap();
    let m = toy::hand_built(&ToyConfig::small(), 3).unwrap();
    let adam = Adam {
        lr: 0.01,
        ..Adam::default()
    };
    let mut trainer = Trainer::new(
        &client,
        &mesh,
        &m,
        PlanOptions::prefetch_deferred(),
        adam,
        5,
    )
    .unwrap()
    .on_non_finite(NonFinitePolicy::Skip);
    // Weights, both moments and Adam's step count, on every device.
    let state_buffers = (3 * trainer.num_weights() + 1) * DEVICES;
    assert_eq!(client.live_buffers(), state_buffers);

    let started = std::time::Instant::now();
    let mut warm_rss = 0;
    let (mut skipped, mut refused, mut losses) = (0, 0, Vec::new());
    for s in 1..=steps {
        let mut inputs = batch(s);
        if s % 40 == 0 {
            inputs[s % DEVICES][0] = HostInput::F32(vec![f32::NAN; 16]);
            let report = trainer.step(&inputs).unwrap();
            assert!(report.skipped, "step {s}: {report:?}");
            skipped += 1;
        } else if s % 30 == 0 {
            inputs[s % DEVICES][1] = HostInput::F32(vec![0.0; 15]);
            let err = trainer.step(&inputs).unwrap_err();
            assert!(
                matches!(err, Error::InputLength { .. }),
                "step {s}: {err:?}"
            );
            refused += 1;
        } else {
            let report = trainer.step(&inputs).unwrap();
            assert!(
                !report.skipped && report.loss.is_finite(),
                "step {s}: {report:?}"
            );
            losses.push(report.loss);
        }
        assert_eq!(
            client.live_buffers(),
            state_buffers,
            "step {s} left device buffers behind"
        );
        if s == WARM_UP {
            warm_rss = rss_kib();
        }
        if s % (steps / 10).max(1) == 0 {
            println!("step {s}: RSS {} KiB", rss_kib());
        }
    }
    let end_rss = rss_kib();
    let growth = end_rss - warm_rss;
    println!(
        "{steps} steps in {:.1} s ({skipped} skipped, {refused} refused): live buffers {state_buffers} \
         throughout; RSS {warm_rss} KiB after {WARM_UP} steps, {end_rss} KiB at the end \
         (growth {growth} KiB, bound {RSS_GROWTH_BOUND_KIB} KiB)",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(trainer.skipped_steps(), skipped);
    assert_eq!(trainer.steps(), losses.len());
    assert!(
        growth < RSS_GROWTH_BOUND_KIB,
        "resident memory grew by {growth} KiB over {} steps",
        steps - WARM_UP
    );
}

/// The 1000 steps; at about 7 s in a debug build (2 CPU cores) it runs in CI, so no
/// shorter stand-in is needed. `STACKSCAN_SOAK_STEPS` asks for a longer soak.
#[test]
fn soak_1000_steps() {
    let steps = std::env::var("STACKSCAN_SOAK_STEPS").map_or(1000, |s| {
        s.parse()
            .expect("STACKSCAN_SOAK_STEPS is a number of steps")
    });
    assert!(steps > WARM_UP, "a soak needs more than {WARM_UP} steps");
    soak(steps);
}
