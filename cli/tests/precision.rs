//! The precision policy ([`stackscan::Precision`]) on the built-in models: the f32 step is
//! the program it was before the policy existed, and a bf16 step gathers (and, when asked,
//! reduce-scatters) half the bytes, counted from the program itself.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};
use stackscan::cost::{self, Collective, Cost};
use stackscan::fsdp::train_step;
use stackscan::{Axis, DType, Precision};
use stackscan_models::registry::{BUILT_IN, ModelName, Preset};
use stackscan_runtime::hlo::{OptimizedModule, primitive};
use stackscan_runtime::testing as common;

mod losses;

use losses::losses;
use stackscan_runtime::{Client, ClientOptions, Mesh};

/// The tiny preset's training step on 4 devices under its attribute's options and `precision`.
fn step_program(model: ModelName, precision: Precision) -> stackscan::Program {
    let (m, options) = model.preset(Preset::Tiny).unwrap().build().unwrap();
    train_step(&m, options.with_precision(precision), &Axis::new("fsdp", 4))
        .unwrap()
        .program
}

fn cost_of(model: ModelName, precision: Precision) -> Cost {
    cost::of(step_program(model, precision).main()).unwrap()
}

/// SHA-256 of the emitted f32 step of each built-in model's tiny preset, and of the Llama's
/// sliding-window preset. A change here is a change of every f32 run's program: update a
/// digest only for a change that means to alter it, and say in its commit why (git keeps
/// each retaking's reason; the equivalence tests against the unsharded reference and
/// `multi_step.rs` show what it kept).
const F32_DIGESTS: [(&str, &str, &str); 4] = [
    (
        "llama",
        "tiny",
        "5b7751e72f9ef0701eb693cf75e81ef3dacb5182ed3707de29de4ffd564b5e34",
    ),
    (
        "deepseek3",
        "tiny",
        "6f8bc2539994f16ca9dd3e22dc2eb536db81d0d9864b5bc8d6e9a4d6a170405a",
    ),
    (
        "qwen35",
        "tiny",
        "decdad47acf11090b259346e360cfd339baae2571122345ea302bdb64d235497",
    ),
    (
        "llama",
        "tiny-swa",
        "46b7c03322659063d18c235167266f16b5409371f22d4305380e9ca92db2c25c",
    ),
];

#[test]
fn the_f32_step_is_the_program_it_was() {
    let mut changed = Vec::new();
    for (name, preset, digest) in F32_DIGESTS {
        let model: ModelName = name.parse().unwrap();
        let (m, options) = model.load(preset).unwrap().build().unwrap();
        let text = train_step(
            &m,
            options.with_precision(Precision::F32),
            &Axis::new("fsdp", 4),
        )
        .unwrap()
        .program
        .emit()
        .unwrap();
        assert!(
            text.contains(stackscan::fsdp::LOOP_LABEL),
            "{name}: no loop labels"
        );
        let got: String = Sha256::digest(text.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        if got != digest {
            changed.push(format!("{name} {preset}: {got}"));
        }
        assert!(!text.contains("bf16"), "{name}: an f32 step names bf16");
    }
    assert!(changed.is_empty(), "the f32 step changed: {changed:?}");
    for model in BUILT_IN {
        assert!(
            F32_DIGESTS
                .iter()
                .any(|(name, _, _)| *name == model.as_str()),
            "the built-in model `{model}` has no digest"
        );
    }
}

/// Bytes a collective of `kind` moves in the program, per element type.
fn moved(c: &Cost, kind: Collective, dtype: DType) -> u64 {
    c.collective(kind).get(dtype)
}

#[test]
fn bf16_gathers_move_half_the_bytes_and_reduce_in_the_chosen_type() {
    for &model in BUILT_IN {
        let f32 = cost_of(model, Precision::F32);
        let bf16 = cost_of(model, Precision::BF16);
        let both = cost_of(model, Precision::BF16_REDUCE_BF16);
        let gathered = moved(&f32, Collective::AllGather, DType::F32);
        assert!(gathered > 0, "{model}: no gathers");
        for (what, c) in [("bf16", &bf16), ("bf16-reduce-bf16", &both)] {
            assert_eq!(
                moved(c, Collective::AllGather, DType::F32),
                0,
                "{model} {what}: an f32 gather is left"
            );
            assert_eq!(
                2 * moved(c, Collective::AllGather, DType::BF16),
                gathered,
                "{model} {what}: gathers do not move half the bytes"
            );
        }
        let scattered = moved(&f32, Collective::ReduceScatter, DType::F32);
        assert!(scattered > 0, "{model}: no reduce-scatters");
        assert_eq!(
            moved(&bf16, Collective::ReduceScatter, DType::F32),
            scattered,
            "{model}: bf16 compute reduces gradients in f32"
        );
        assert_eq!(moved(&bf16, Collective::ReduceScatter, DType::BF16), 0);
        assert_eq!(moved(&both, Collective::ReduceScatter, DType::F32), 0);
        assert_eq!(
            2 * moved(&both, Collective::ReduceScatter, DType::BF16),
            scattered,
            "{model}: bf16 reduce-scatters do not move half the bytes"
        );
    }
}

/// The bytes the compiled program's all-gathers write, per XLA element type, read from the
/// optimized module the plugin returns: the gathered-weight buffers XLA allocates after its
/// own passes, rather than what stackscan emitted.
fn compiled_gathers(client: &Client, model: ModelName, precision: Precision) -> BTreeMap<i32, u64> {
    let mesh = Mesh::new(client, "fsdp", 4).unwrap();
    let exe = client
        .compile_program(&step_program(model, precision), &mesh)
        .unwrap();
    let (format, bytes) = exe.optimized_program().unwrap();
    OptimizedModule::parse(&format, &bytes)
        .unwrap()
        .collective_bytes()
        .into_iter()
        .filter(|((kind, _), _)| kind == "all-gather")
        .map(|((_, dtype), n)| (dtype, n))
        .collect()
}

/// What the CPU plugin makes of the bf16 gathers: the program stackscan emits gathers bf16
/// (half the bytes, above), and XLA's CPU compiler, which has no bf16 collectives, widens
/// every one of them back to f32 (its float-normalization pass), so the compiled bf16 step
/// gathers exactly the f32 step's bytes in f32. This is why the CPU plugin's temp memory
/// barely moves under bf16; the halving of gathered-weight buffers is for plugins with bf16
/// collectives (CUDA, TPU), where `compile-report` shows it (`examples/gpu/run.sh`). If this
/// fails because the CPU plugin gathers bf16 now, assert half the bytes instead.
#[test]
fn the_cpu_plugin_widens_bf16_gathers_to_f32() {
    let client = common::cpu_client(4);
    // One model: what the plugin does with a bf16 gather does not depend on whose it is.
    let model: ModelName = "llama".parse().unwrap();
    {
        let f32 = compiled_gathers(&client, model, Precision::F32);
        let bf16 = compiled_gathers(&client, model, Precision::BF16);
        let wide = f32.get(&primitive::F32).copied().unwrap_or(0);
        assert!(
            wide > 0,
            "{model}: the compiled f32 step gathers nothing: {f32:?}"
        );
        assert_eq!(f32.len(), 1, "{model}: f32 gathers of other types: {f32:?}");
        assert_eq!(
            bf16, f32,
            "{model}: compiled bf16 gathers {bf16:?}, f32's {f32:?}"
        );
    }
}

#[test]
fn bf16_layers_compute_their_products_in_bf16() {
    for &model in BUILT_IN {
        let bf16 = cost_of(model, Precision::BF16);
        let f32 = cost_of(model, Precision::F32);
        let (narrow, wide) = (
            bf16.matrix_flops.get(DType::BF16),
            bf16.matrix_flops.get(DType::F32),
        );
        // The router's, the recurrence's and the head's loss stay f32; the projections and
        // experts, most of the products, move to bf16.
        assert!(
            narrow > 2 * wide,
            "{model}: {narrow} bf16 product FLOPs against {wide} in f32"
        );
        assert_eq!(narrow + wide, f32.matrix_flops.get(DType::F32), "{model}");
    }
}

/// Adam's learning rate in the step-by-step comparison.
const STEPWISE_LR: f64 = 1e-3;

/// A bf16 step follows f32 step by step on 1 and 4 devices and on both CPU plugins: the tiny
/// Llama over 8 steps from the same weights and batches, Adam at 1e-3, the first step's loss
/// within 1e-3 of f32's (bf16's rounding), the next two within 0.02, every step within 2 %,
/// and both runs falling. f32 itself is the program of before the policy (the digests
/// above), checked against the host reference by the trainer's own tests.
///
/// Measured (2026-12-06, default XLA flags and CI's alike): first steps within 1.3e-4, every
/// step within 0.25 %. At 3e-3, the rate of the 100-step comparison, one device's two
/// sequences a step made the loss jump (6.35 to 6.66 and back to 5.66 within three steps),
/// and after the jump the runs were 9 % apart without CI's flags, 0.4 % with them: chaos,
/// not bf16, which this test is not about.
#[test]
fn bf16_steps_follow_f32_on_1_and_4_devices_and_both_plugins() {
    let llama: ModelName = "llama".parse().unwrap();
    let newer = common::newer_cpu_plugin()
        .inspect_err(|why| eprintln!("skipped on the newer plugin: {why}"))
        .ok();
    for devices in [1, 4] {
        let mut clients = vec![("cpu", common::cpu_client(devices))];
        if let Some(plugin) = &newer {
            clients.push((
                "cpu-0.115",
                Client::new(plugin, &ClientOptions::cpu(devices)).unwrap(),
            ));
        }
        for (name, client) in &clients {
            let f32 = losses(client, devices, llama, Precision::F32, 8, STEPWISE_LR);
            let bf16 = losses(client, devices, llama, Precision::BF16, 8, STEPWISE_LR);
            println!("{devices} devices, {name}: f32 {f32:?}\n  bf16 {bf16:?}");
            for (step, (a, b)) in f32.iter().zip(&bf16).enumerate() {
                // The same weights: bf16's rounding. Then the updates they made: the first
                // two stay close, and after 8 the runs have drifted by at most 2 %.
                let tolerance = match step {
                    0 => 1e-3,
                    1 | 2 => 0.02,
                    _ => 0.02 * a,
                };
                assert!(
                    (a - b).abs() <= tolerance,
                    "{devices} devices, {name}, step {}: {b} in bf16, {a} in f32",
                    step + 1
                );
            }
            for run in [&f32, &bf16] {
                assert!(run[7] < run[0], "{devices} devices, {name}: {run:?}");
            }
        }
    }
}
