//! bf16 training against f32 training over 100 steps on the built-in models' tiny presets
//! (the precision policy's end-to-end check; `precision.rs` holds the rest of its tests). A
//! binary of its own: with the others, its runs kept one binary past two minutes.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

mod losses;

use losses::losses;
use stackscan::Precision;
use stackscan_models::registry::ModelName;
use stackscan_runtime::testing as common;

/// Devices of the 100-step comparison.
const DEVICES: usize = 2;
/// Steps of the 100-step comparison.
const STEPS: u64 = 100;
/// Adam's learning rate in the 100-step comparison.
const LR: f64 = 3e-3;
/// Steps per window of the 100-step comparison.
const WINDOW: usize = 20;

/// bf16 training follows f32 training on each model's tiny preset (2 devices, Adam at 3e-3,
/// the same weights and batches): the first step's loss within 0.01 of f32's (the same
/// function, rounded to bf16's 8 significant bits), the mean of the first 20 steps within
/// 2 %, and every later 20-step window within 15 % of the descent f32 made (its first
/// window's mean less its last's).
///
/// The later windows are bounded by the descent, not by the loss itself, because the runs
/// drift apart in time, not in level: training amplifies a ~0.4 % difference per step, and
/// where the loss falls steeply a shift of a few steps is a large fraction of the loss
/// there. Qwen3.5 falls from 5.2 to 1.3 within 60 steps; its last window differed by 22 %
/// of the loss (f32 1.31, bf16 1.60, default XLA flags, 2026-12-06; steps 61–80: 2.53 and
/// 2.91, the widest: 8.4 % of its descent, about 5 steps behind) and by 24 % the other way
/// in an earlier run (f32 1.51, bf16 1.15: about 8.4 % of that run's descent). A bf16 run
/// that did not train, or trained at a fraction of f32's pace, misses the bound by far.
///
/// One test per model, compiled at XLA's default optimization level
/// ([`common::step_bound_cpu_client`]), as their time is their steps. The Llama's runs in
/// the suite; DeepSeek-V3's and Qwen3.5's are `#[ignore]`d, as the three together keep this
/// binary past two minutes (`cargo test -p stackscan-cli --test precision_100_steps --
/// --ignored`).
fn bf16_training_follows_f32_over_100_steps(name: &str) {
    let mean = |v: &[f32]| v.iter().sum::<f32>() / v.len() as f32;
    let model: ModelName = name.parse().unwrap();
    let client = common::step_bound_cpu_client(DEVICES);
    let f32 = losses(&client, DEVICES, model, Precision::F32, STEPS, LR);
    let bf16 = losses(&client, DEVICES, model, Precision::BF16, STEPS, LR);
    println!("{name}: first step f32 {}, bf16 {}", f32[0], bf16[0]);
    assert!(
        (f32[0] - bf16[0]).abs() <= 0.01,
        "{name}: the first step's loss is {} in bf16, {} in f32",
        bf16[0],
        f32[0]
    );
    let f32_windows: Vec<f32> = f32.chunks(WINDOW).map(mean).collect();
    let (opening, closing) = (f32_windows[0], f32_windows[f32_windows.len() - 1]);
    assert!(closing < 0.7 * opening, "{name}: f32 did not train");
    let descent = opening - closing;
    let bf16_windows = bf16.chunks(WINDOW).map(mean);
    for (w, (&a, b)) in f32_windows.iter().zip(bf16_windows).enumerate() {
        let (first, last) = (WINDOW * w + 1, WINDOW * (w + 1));
        println!("{name}: steps {first}-{last}: f32 {a:.4}, bf16 {b:.4}");
        let tolerance = if w == 0 { 0.02 * a } else { 0.15 * descent };
        assert!(
            (a - b).abs() <= tolerance,
            "{name}: steps {first}..{last}: mean loss {b} in bf16 against {a} in f32 \
             (f32 fell by {descent} over the run)"
        );
    }
}

#[test]
#[ignore = "a 100-step run of each precision, long; CI's bf16 check is `precision`'s eight steps on 1 and 4 devices and both plugins"]
fn bf16_training_follows_f32_over_100_steps_llama() {
    bf16_training_follows_f32_over_100_steps("llama");
}

#[test]
#[ignore = "a 100-step run of each precision: with the others, over the suite's two minutes a binary"]
fn bf16_training_follows_f32_over_100_steps_deepseek3() {
    bf16_training_follows_f32_over_100_steps("deepseek3");
}

#[test]
#[ignore = "a 100-step run of each precision: with the others, over the suite's two minutes a binary"]
fn bf16_training_follows_f32_over_100_steps_qwen35() {
    bf16_training_follows_f32_over_100_steps("qwen35");
}
