//! The sliding-window Llama (`models/src/llama_swa.rs`, the registry's demonstration that a
//! model is one file and one line): its mask against hand-written windows, and its training
//! against the declared Llama's, which a window as long as the sequence must equal.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan::fsdp::Adam;
use stackscan::{DType, TensorType};
use stackscan_models::jobs::{Job, MoeFlags};
use stackscan_models::llama::{LlamaConfig, synthetic_batch};
use stackscan_models::llama_macro::LlamaModel;
use stackscan_models::llama_swa::{LlamaSwaModel, SwaConfig, window_mask};
use stackscan_models::registry::ModelConfig;
use stackscan_runtime::Mesh;
use stackscan_runtime::testing as common;
use stackscan_runtime::testing::graph::{Arg, Compiled, Data, function};
use stackscan_runtime::train::{HostInput, Trainer};

/// Query `i` keeps keys `i − window < j ≤ i`: for 5 positions and a window of 2, the diagonal
/// and the one below it.
#[test]
fn the_mask_keeps_each_query_and_the_window_before_it() {
    let t = 5;
    let arg = Arg {
        ty: TensorType::new(DType::F32, [1, 1, t, t]),
        data: Data::F(vec![1.0; (t * t) as usize]),
    };
    for window in [1, 2, 5, 9] {
        let f = function("window", std::slice::from_ref(&arg), |p| {
            Ok(vec![window_mask(&p[0], window)?])
        });
        let out = &Compiled::new(&common::cpu_client(1), &f).run(std::slice::from_ref(&arg))[0];
        for i in 0..t {
            for j in 0..t {
                let kept = out[(i * t + j) as usize] == 1.0;
                assert_eq!(
                    kept,
                    j <= i && i - j < window,
                    "window {window}: ({i}, {j})"
                );
            }
        }
    }
}

/// Three steps of `c` on 2 devices from seed 5: the losses.
fn losses(c: ModelConfig) -> Vec<f32> {
    let devices = 2;
    let client = common::cpu_client(devices);
    let mesh = Mesh::new(&client, "fsdp", devices).unwrap();
    let job = Job::from_config(c, MoeFlags::default()).unwrap();
    let mut trainer =
        Trainer::new(&client, &mesh, &job.model, job.options, Adam::default(), 5).unwrap();
    let llama = LlamaConfig::tiny();
    (0..3)
        .map(|step| {
            let inputs: Vec<Vec<HostInput>> = (0..devices as u64)
                .map(|d| {
                    let (t, l) = synthetic_batch(&llama, llama.batch_per_device, 10 * step + d);
                    vec![HostInput::I32(t), HostInput::I32(l)]
                })
                .collect();
            trainer.step(&inputs).unwrap().loss
        })
        .collect()
}

/// The same parameters in the same order, so the same seed gives the same weights: a window
/// as long as the sequence trains exactly as the Llama does, and a shorter one does not.
#[test]
fn a_window_as_long_as_the_sequence_is_the_llama() {
    let llama = LlamaConfig::tiny();
    let reference = losses(ModelConfig::new::<LlamaModel>(llama));
    let full = SwaConfig {
        window: llama.seq,
        llama,
    };
    let same = losses(ModelConfig::new::<LlamaSwaModel>(full));
    for (a, b) in reference.iter().zip(&same) {
        assert!((a - b).abs() <= 1e-6 * a.abs(), "{reference:?} vs {same:?}");
    }
    let local = losses(ModelConfig::new::<LlamaSwaModel>(SwaConfig {
        window: 4,
        llama,
    }));
    assert!(
        (local[0] - reference[0]).abs() > 1e-4,
        "a window of 4 attends to less: {local:?} vs {reference:?}"
    );
}

#[test]
fn a_window_below_one_is_refused_naming_the_field() {
    let bad = SwaConfig {
        window: 0,
        llama: LlamaConfig::tiny(),
    };
    let e = ModelConfig::new::<LlamaSwaModel>(bad).build().unwrap_err();
    assert!(e.to_string().contains("`SwaConfig.window` is 0"), "{e}");
}
