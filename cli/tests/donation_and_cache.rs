//! The trainer's step donates its state and can come from the compile cache: compiled alias
//! bytes equal the weights', moments' and step count's size (held once, not as argument and again as
//! output), training goes on over the donated buffers, on both CPU plugins; a second trainer
//! of the same model loads the step from the cache and trains bit for bit alike.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan_runtime::testing as common;

use stackscan::fsdp::{Adam, StackModel};
use stackscan::plan::PlanOptions;
use stackscan_models::toy::{self, ToyConfig};
use stackscan_runtime::train::{HostInput, Progress, Trainer};
use stackscan_runtime::{CacheOutcome, Client, ClientOptions, CompileCache, Mesh, Plugin};

const DEVICES: usize = 2;

/// Device `d`'s `x` and `y` of the toy (rows of 8, two per device), varying with `seed`.
fn batch(seed: usize) -> Vec<Vec<HostInput>> {
    (0..DEVICES)
        .map(|d| {
            (0..2)
                .map(|k| {
                    let v =
                        (0..16).map(|i| ((i * 7 + d * 3 + k * 5 + seed) % 11) as f32 / 11.0 - 0.5);
                    HostInput::F32(v.collect())
                })
                .collect()
        })
        .collect()
}

/// Bytes of one device's weights, counted from the model's declaration: a sharded tensor
/// holds `1 / DEVICES` of its layers' elements, a replicated one all.
fn weight_bytes_per_device(m: &StackModel) -> i64 {
    m.weights()
        .iter()
        .map(|(spec, layers)| {
            let elements = *layers as i64 * spec.shape.iter().product::<i64>();
            let share = if spec.shard_dim.is_some() {
                DEVICES as i64
            } else {
                1
            };
            elements / share * 4
        })
        .sum()
}

fn trainer(client: &Client, m: &StackModel) -> Trainer {
    let mesh = Mesh::new(client, "fsdp", DEVICES).unwrap();
    let adam = Adam {
        lr: 0.05,
        ..Adam::default()
    };
    Trainer::new(client, &mesh, m, PlanOptions::prefetch_deferred(), adam, 3).unwrap()
}

fn losses(t: &mut Trainer, steps: usize) -> Vec<u32> {
    (0..steps)
        .map(|s| t.step(&batch(s)).unwrap().loss.to_bits())
        .collect()
}

fn check_donated_state(plugin: &Plugin) {
    let client = Client::new(plugin, &ClientOptions::cpu(DEVICES)).unwrap();
    let m = toy::hand_built(&ToyConfig::small(), 1).unwrap();
    let mut t = trainer(&client, &m);
    let stats = t.memory_stats().unwrap();
    // Weights, both moments and Adam's step count (an f32 scalar).
    let state = 3 * weight_bytes_per_device(&m) + 4;
    assert_eq!(stats.alias, state, "{stats:?}");
    // What is left of the arguments is the batch (x and y, 16 f32 each); of the outputs, the
    // loss and the `applied` flag, the optimizer's learning rate and gradient norm, and the
    // output tuple's table of pointers (8 bytes per result), which XLA counts as output.
    assert_eq!(stats.arguments - stats.alias, 2 * 16 * 4, "{stats:?}");
    let reported = stackscan::fsdp::OPTIMIZER_OUTPUTS.len() as i64;
    let results = 2 + 3 * m.weights().len() as i64 + 1 + reported;
    assert_eq!(
        stats.outputs - stats.alias,
        4 + 4 + 4 * reported + 8 * results,
        "{stats:?}"
    );
    let run = losses(&mut t, 4);
    assert!(f32::from_bits(run[3]) < f32::from_bits(run[0]), "{run:?}");
    let ckpt = t.checkpoint(Progress::default()).unwrap();
    assert!(
        ckpt.tensors
            .iter()
            .all(|x| x.data.iter().all(|v| v.is_finite()))
    );
}

#[test]
fn the_step_donates_its_state() {
    check_donated_state(&common::cpu_plugin());
}

#[test]
fn the_step_donates_its_state_on_the_newer_plugin() {
    if let Ok(plugin) = common::newer_cpu_plugin().inspect_err(|why| eprintln!("skipped: {why}")) {
        check_donated_state(&plugin);
    }
}

#[test]
fn a_second_trainer_loads_its_step_from_the_cache() {
    let dir = std::env::temp_dir().join(format!("stackscan-trainer-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let client = common::cpu_client(DEVICES).with_compile_cache(Some(CompileCache::new(&dir)));
    let m = toy::hand_built(&ToyConfig::small(), 1).unwrap();
    let mut first = trainer(&client, &m);
    assert_eq!(first.cache_outcome(), &CacheOutcome::Miss);
    let mut second = trainer(&client, &m);
    assert_eq!(second.cache_outcome(), &CacheOutcome::Hit);
    assert_eq!(losses(&mut second, 3), losses(&mut first, 3));
    let _ = std::fs::remove_dir_all(&dir);
}
