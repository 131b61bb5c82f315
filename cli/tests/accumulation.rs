//! Gradient accumulation: a step over k micro-batches equals one step on the k-times larger
//! batch. The accumulated program's loss and every gradient equal the unsharded single-device
//! reference on the whole batch (f32, the derived rtol of `testing::fsdp`), and a trainer
//! accumulating micro-batches follows the reference's Adam trajectory on the whole batches
//! over several steps, on 1 and 4 devices and on both CPU plugins.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan::fsdp::{Adam, StackModel, accumulate, train_step};
use stackscan::plan::PlanOptions;
use stackscan::{Axis, DType, TensorType};
use stackscan_models::llama::{LlamaConfig, synthetic_batch, synthetic_tokens};
use stackscan_models::registry::Architecture;
use stackscan_runtime::testing::cpu_client;
use stackscan_runtime::testing::fsdp::{assert_matches_reference, fixture, run_program};
use stackscan_runtime::testing::graph::{Arg, Data};
use stackscan_runtime::testing::multi_step::{self, Reference, Tolerance, Trajectory};
use stackscan_runtime::train::Trainer;
use stackscan_runtime::{Client, ClientOptions, Mesh};

const SEQ: i64 = 8;
/// Sequences of one global batch.
const ROWS: usize = 8;
const DEVICES: usize = 2;

fn config(batch_per_device: i64) -> LlamaConfig {
    LlamaConfig {
        seq: SEQ,
        batch_per_device,
        ..LlamaConfig::small(0)
    }
}

/// The declared Llama with `rows` sequences a device (a micro-batch's rows).
fn llama(rows: usize) -> StackModel {
    Architecture::build(&config(rows as i64)).unwrap().0
}

#[test]
fn micro_batches_sum_to_the_big_batch_gradient() {
    let client = cpu_client(DEVICES);
    let (tokens, labels) = synthetic_batch(&config(1), ROWS as i64, 7);
    let ty = TensorType::new(DType::I32, [ROWS as i64, SEQ]);
    let inputs = vec![
        Arg {
            ty: ty.clone(),
            data: Data::I(tokens),
        },
        Arg {
            ty,
            data: Data::I(labels),
        },
    ];
    let axis = Axis {
        name: "fsdp".into(),
        size: DEVICES,
    };
    for k in [2, 4] {
        let micro = llama(ROWS / DEVICES / k);
        // The reference runs the whole global batch at once: DEVICES · k micro-batches.
        let fx = fixture(&client, &micro, inputs.clone(), DEVICES * k, 11);
        for options in [PlanOptions::baseline(), PlanOptions::prefetch_deferred()] {
            let step = accumulate(&train_step(&micro, options, &axis).unwrap(), k).unwrap();
            let (losses, grads) = run_program(&client, &micro, &fx, &step.program, DEVICES);
            let what = format!("{k} micro-batches, {options:?}");
            let d = assert_matches_reference(&what, &losses, &grads, &fx);
            eprintln!(
                "{what}: worst deviation {:.2e} norm-wise (rtol {:.2e})",
                d.normwise, fx.rtol
            );
        }
    }
}

#[test]
fn a_trainer_accumulating_follows_adam_on_the_whole_batches_on_1_and_4_devices_and_both_plugins() {
    const STEPS: usize = 5;
    const K: usize = 2;
    let adam = Adam {
        eps: 1e-3,
        ..Adam::default()
    };
    let whole = llama(ROWS);
    let initial = multi_step::initial_weights(&whole, 5);
    let batches: Vec<Vec<Data>> = (0..STEPS)
        .map(|s| {
            let (tokens, labels) = synthetic_tokens(64, SEQ, ROWS as i64, 300 + s as u64);
            vec![Data::I(tokens), Data::I(labels)]
        })
        .collect();
    let run = Reference::new(&cpu_client(1), &whole).train(&initial, &batches, adam, None);
    let tol = Tolerance::new(&whole, ROWS * SEQ as usize, adam, &run);

    // On 1 and 4 devices, on both CPU plugins.
    let newer = stackscan_runtime::testing::newer_cpu_plugin()
        .inspect_err(|why| eprintln!("skipped on the newer plugin: {why}"))
        .ok();
    for devices in [1, 4] {
        let mut clients = vec![("cpu", cpu_client(devices))];
        if let Some(plugin) = &newer {
            clients.push((
                "cpu-0.115",
                Client::new(plugin, &ClientOptions::cpu(devices)).unwrap(),
            ));
        }
        for (name, client) in &clients {
            let mesh = Mesh::new(client, "fsdp", devices).unwrap();
            let micro = llama(ROWS / devices / K);
            let options = PlanOptions::prefetch_deferred();
            let mut trainer =
                Trainer::accumulating(client, &mesh, &micro, options, adam, 1, K).unwrap();
            multi_step::start_from(&mut trainer, &micro, &initial);
            let losses = batches
                .iter()
                .map(|b| f64::from(trainer.step(&multi_step::split(b, devices)).unwrap().loss))
                .collect();
            let actual = Trajectory {
                losses,
                weights: multi_step::weights(&trainer),
            };
            let what = format!("{K} micro-batches a step, {devices} devices, {name}");
            multi_step::assert_follows(&what, &actual, &run.trajectory, &tol);
        }
    }

    let client = cpu_client(DEVICES);
    let mesh = Mesh::new(&client, "fsdp", DEVICES).unwrap();
    let micro = llama(ROWS / DEVICES / K);
    let options = PlanOptions::prefetch_deferred();
    let mut trainer = Trainer::accumulating(&client, &mesh, &micro, options, adam, 1, K).unwrap();
    // A batch of one micro-batch's rows is refused, not trained on.
    let short = multi_step::split(&batches[0], 2 * DEVICES);
    assert!(trainer.step(&short[..DEVICES]).is_err());
}
