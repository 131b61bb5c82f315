//! AdamW's decoupled weight decay, a warmup + cosine learning-rate schedule and global-norm
//! gradient clipping, all on the devices inside the step: the Trainer on 2 devices over six
//! steps follows the unsharded reference program whose optimizer runs on the host in f64
//! with the same rules (`runtime::testing::multi_step`), within the derived tolerance; the
//! learning rate it reports is the schedule's, and its first gradient norm the reference's,
//! all weights as one f64 vector (replicated ones counted once, sharded ones over every
//! shard). The rules change the trajectory: plain Adam ends elsewhere.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan::fsdp::{Adam, Schedule, StackModel};
use stackscan::plan::PlanOptions;
use stackscan_models::llama::{LlamaConfig, synthetic_tokens};
use stackscan_models::registry::Architecture;
use stackscan_runtime::testing::graph::Data;
use stackscan_runtime::testing::multi_step::{self, Reference, Tolerance, Trajectory};
use stackscan_runtime::testing::{cpu_client, newer_cpu_plugin};
use stackscan_runtime::train::Trainer;
use stackscan_runtime::{Client, ClientOptions, Mesh};

const ROWS: usize = 8;
const SEQ: i64 = 8;
const STEPS: usize = 6;
const DEVICES: usize = 2;

/// Plain Adam with a large ε (see `Tolerance::new`).
const ADAM: Adam = Adam {
    lr: 1e-3,
    beta1: 0.9,
    beta2: 0.95,
    eps: 1e-3,
    weight_decay: 0.0,
    schedule: Schedule::Constant,
    clip_grad_norm: None,
};

/// AdamW with λ 0.1, two warmup steps then cosine to a tenth at step 5, clipped at 0.5 (below
/// every step's gradient norm here, so every step clips).
const ADAMW: Adam = Adam {
    weight_decay: 0.1,
    schedule: Schedule::Cosine {
        warmup: 2,
        total: 5,
        min_lr: 1e-4,
    },
    clip_grad_norm: Some(0.5),
    ..ADAM
};

/// The declared Llama at a small size, `rows` sequences a device.
fn llama(rows: usize) -> StackModel {
    Architecture::build(&LlamaConfig {
        seq: SEQ,
        batch_per_device: rows as i64,
        ..LlamaConfig::small(0)
    })
    .unwrap()
    .0
}

fn batches() -> Vec<Vec<Data>> {
    (0..STEPS)
        .map(|k| {
            let (tokens, labels) = synthetic_tokens(64, SEQ, ROWS as i64, 200 + k as u64);
            vec![Data::I(tokens), Data::I(labels)]
        })
        .collect()
}

#[test]
fn adamw_with_a_schedule_and_clipping_follows_the_reference() {
    let whole = llama(ROWS);
    let initial = multi_step::initial_weights(&whole, 5);
    let reference = Reference::new(&cpu_client(1), &whole);
    let batches = batches();
    let run = reference.train(&initial, &batches, ADAMW, None);
    assert!(
        run.gradient_norms.iter().all(|&n| n > 0.5),
        "every step clips: {:?}",
        run.gradient_norms
    );
    let tol = Tolerance::new(&whole, ROWS * SEQ as usize, ADAMW, &run);

    let client = cpu_client(DEVICES);
    let mesh = Mesh::new(&client, "fsdp", DEVICES).unwrap();
    let sharded = llama(ROWS / DEVICES);
    let mut trainer = Trainer::new(
        &client,
        &mesh,
        &sharded,
        PlanOptions::prefetch_deferred(),
        ADAMW,
        1,
    )
    .unwrap();
    multi_step::start_from(&mut trainer, &sharded, &initial);
    let mut losses = Vec::new();
    for (k, batch) in batches.iter().enumerate() {
        let r = trainer.step(&multi_step::split(batch, DEVICES)).unwrap();
        losses.push(f64::from(r.loss));
        let lr = f64::from(r.aux("lr").unwrap());
        let expected = ADAMW.schedule.at(ADAMW.lr, k as u64 + 1);
        assert!(
            (lr - expected).abs() <= 1e-6 * expected,
            "step {}: lr {lr} vs {expected}",
            k + 1
        );
        if k == 0 {
            // The same weights on both sides: the norms agree to f32 rounding.
            let norm = f64::from(r.aux("grad_norm").unwrap());
            let want = run.gradient_norms[0];
            assert!((norm - want).abs() <= 1e-5 * want, "{norm} vs {want}");
        }
    }
    let actual = Trajectory {
        losses,
        weights: multi_step::weights(&trainer),
    };
    multi_step::assert_follows("AdamW, cosine, clipped", &actual, &run.trajectory, &tol);

    // The rules matter: plain Adam from the same start ends far outside the tolerance.
    let plain = reference.train(&initial, &batches, ADAM, None);
    let d = multi_step::trajectory_deviation(&plain.trajectory, &run.trajectory);
    assert!(d.weights.normwise > 100.0 * tol.weights, "{d:?} vs {tol:?}");
}

/// The schedule by hand: peak 1, floor 0.1, two warmup steps, decay over steps 2 to 6.
#[test]
fn the_schedule_warms_up_then_decays_to_its_floor() {
    let cosine = Schedule::Cosine {
        warmup: 2,
        total: 6,
        min_lr: 0.1,
    };
    let linear = Schedule::Linear {
        warmup: 2,
        total: 6,
        min_lr: 0.1,
    };
    let at = |s: Schedule, t| s.at(1.0, t);
    assert_eq!(at(cosine, 1), 0.5);
    assert_eq!(at(cosine, 2), 1.0);
    // p = 1/4: 0.1 + 0.9 · ½(1 + cos π/4).
    assert!((at(cosine, 3) - (0.1 + 0.45 * (1.0 + 0.5f64.sqrt()))).abs() < 1e-15);
    assert!((at(cosine, 4) - 0.55).abs() < 1e-15);
    assert_eq!(at(cosine, 6), 0.1);
    assert_eq!(at(cosine, 60), 0.1);
    assert!((at(linear, 3) - 0.775).abs() < 1e-15);
    assert!((at(linear, 5) - 0.325).abs() < 1e-15);
    assert_eq!(at(Schedule::Constant, 9), 1.0);
}

/// The reported gradient norm is the norm of the gradient the update used, at the scale of
/// the tiny preset (d 256, stacked gradients of 10⁶ elements), on 1 and 4 devices of both CPU
/// plugins. After the first step Adam's first moment is `(1 − β₁)·g` to f32 rounding, so its
/// f64 norm read from the checkpoint is the reference. A norm summed as one long f32 dot lost
/// the small squares once the running sum was large (0.5 % low on one device, and less the more
/// devices shared the sum, so the same step reported different norms on different meshes).
/// Clipping is off here, so the moments are the raw gradient's;
/// `adamw_with_a_schedule_and_clipping_follows_the_reference` checks clipped steps over six.
#[test]
fn the_gradient_norm_is_the_norm_of_the_gradient_at_preset_scale() {
    let c = LlamaConfig {
        batch_per_device: 1,
        ..LlamaConfig::tiny()
    };
    let newer = newer_cpu_plugin().map_err(|why| eprintln!("skipped cpu-0.115: {why}"));
    for devices in [1, 4] {
        let mut clients = vec![("cpu", cpu_client(devices))];
        if let Ok(plugin) = &newer {
            let client = Client::new(plugin, &ClientOptions::cpu(devices)).unwrap();
            clients.push(("cpu-0.115", client));
        }
        for (plugin, client) in clients {
            let mesh = Mesh::new(&client, "fsdp", devices).unwrap();
            let (m, _) = Architecture::build(&c).unwrap();
            let options = PlanOptions::prefetch_deferred();
            let mut trainer = Trainer::new(&client, &mesh, &m, options, ADAM, 7).unwrap();
            let (tokens, labels) = synthetic_tokens(c.vocab, c.seq, devices as i64, 3);
            let batch = [Data::I(tokens), Data::I(labels)];
            let r = trainer.step(&multi_step::split(&batch, devices)).unwrap();
            let reported = f64::from(r.aux("grad_norm").unwrap());
            let ckpt = trainer
                .checkpoint(stackscan_runtime::train::Progress::default())
                .unwrap();
            let squares: f64 = ckpt
                .tensors
                .iter()
                .filter(|t| t.name.starts_with("adam.m."))
                .flat_map(|t| t.data.iter())
                .map(|&x| (f64::from(x) / (1.0 - ADAM.beta1)).powi(2))
                .sum();
            let want = squares.sqrt();
            assert!(
                (reported - want).abs() <= 1e-5 * want,
                "{plugin}, {devices} devices: reported {reported} vs {want} ({:.2e} off)",
                (reported - want) / want
            );
        }
    }
}

/// A weight's own decay choice ([`ParamSpec::decay`](stackscan::fsdp::ParamSpec), what
/// `train --no-decay` sets) overrides the rule: the query projections spared, the final
/// norm's scale decayed, at a decay strong enough that either choice moves the trajectory
/// far beyond the tolerance; the Trainer follows the reference that makes the same choices.
#[test]
fn a_weights_own_decay_choice_overrides_the_rule() {
    let adamw = Adam {
        weight_decay: 10.0,
        ..ADAM
    };
    let choose = |mut m: StackModel| {
        let names = m.weight_names();
        for (spec, name) in m.weight_specs_mut().into_iter().zip(&names) {
            match name.as_str() {
                "layers.attn.wq" => spec.decay = Some(false),
                "final_norm" => spec.decay = Some(true),
                _ => {}
            }
        }
        m
    };
    let whole = choose(llama(ROWS));
    let initial = multi_step::initial_weights(&whole, 5);
    let batches = batches();
    let reference = Reference::new(&cpu_client(1), &whole);
    let run = reference.train(&initial, &batches, adamw, None);
    let tol = Tolerance::new(&whole, ROWS * SEQ as usize, adamw, &run);
    let by_rule =
        Reference::new(&cpu_client(1), &llama(ROWS)).train(&initial, &batches, adamw, None);
    let d = multi_step::trajectory_deviation(&by_rule.trajectory, &run.trajectory);
    assert!(d.weights.normwise > 100.0 * tol.weights, "{d:?} vs {tol:?}");

    let client = cpu_client(DEVICES);
    let mesh = Mesh::new(&client, "fsdp", DEVICES).unwrap();
    let sharded = choose(llama(ROWS / DEVICES));
    let mut trainer = Trainer::new(
        &client,
        &mesh,
        &sharded,
        PlanOptions::prefetch_deferred(),
        adamw,
        1,
    )
    .unwrap();
    multi_step::start_from(&mut trainer, &sharded, &initial);
    let mut losses = Vec::new();
    for batch in &batches {
        losses.push(f64::from(
            trainer
                .step(&multi_step::split(batch, DEVICES))
                .unwrap()
                .loss,
        ));
    }
    let actual = Trajectory {
        losses,
        weights: multi_step::weights(&trainer),
    };
    multi_step::assert_follows("AdamW, chosen decay", &actual, &run.trajectory, &tol);
}
