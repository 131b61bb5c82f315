//! Attention masks ([`stackscan::nn::Mask`]) against hand-written predicates, and the Llama's
//! sliding window (`LlamaConfig::window`): a window as long as the sequence trains exactly as
//! the causal Llama does, a shorter one does not.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan::fsdp::Adam;
use stackscan::nn::{self, Mask};
use stackscan::{DType, TensorType};
use stackscan_models::jobs::{Job, MoeFlags};
use stackscan_models::llama::{LlamaConfig, synthetic_batch};
use stackscan_models::registry::{ModelConfig, ModelName};
use stackscan_runtime::Mesh;
use stackscan_runtime::testing as common;
use stackscan_runtime::testing::graph::{Arg, Compiled, Data, function};
use stackscan_runtime::train::{HostInput, Trainer};

/// Which `(query, key)` pairs of `t` positions `mask` keeps, read from the compiled mask.
fn kept(mask: Mask, t: i64) -> Vec<Vec<bool>> {
    let arg = Arg {
        ty: TensorType::new(DType::F32, [1, 1, t, t]),
        data: Data::F(vec![1.0; (t * t) as usize]),
    };
    let f = function("mask", std::slice::from_ref(&arg), |p| {
        Ok(vec![nn::apply_mask(&p[0], mask)?])
    });
    let out = &Compiled::new(&common::cpu_client(1), &f).run(std::slice::from_ref(&arg))[0];
    (0..t)
        .map(|i| (0..t).map(|j| out[(i * t + j) as usize] == 1.0).collect())
        .collect()
}

/// Query `i` keeps keys `i − window < j ≤ i`: for 5 positions and a window of 2, the diagonal
/// and the one below it; a window of the sequence or more is the causal mask.
#[test]
fn a_sliding_window_keeps_each_query_and_the_window_before_it() {
    let t = 5;
    for window in [1, 2, 5, 9] {
        let got = kept(Mask::SlidingWindow(window), t);
        for i in 0..t {
            for j in 0..t {
                let want = j <= i && i - j < window;
                assert_eq!(
                    got[i as usize][j as usize], want,
                    "window {window}: ({i}, {j})"
                );
            }
        }
    }
    assert_eq!(kept(Mask::SlidingWindow(9), t), kept(Mask::Causal, t));
}

/// Blocks of 3 over 7 positions: `{0, 1, 2}`, `{3, 4, 5}`, `{6}`, causal inside each.
#[test]
fn a_block_mask_is_causal_inside_each_block() {
    let got = kept(Mask::Block(3), 7);
    let block = |p: usize| p / 3;
    for (i, row) in got.iter().enumerate() {
        for (j, &k) in row.iter().enumerate() {
            assert_eq!(k, j <= i && block(i) == block(j), "({i}, {j})");
        }
    }
    // Its first row of block two sees only itself: position 3 starts a block.
    assert_eq!(got[3], [false, false, false, true, false, false, false]);
    assert_eq!(kept(Mask::Block(7), 7), kept(Mask::Causal, 7));
}

#[test]
fn a_window_or_block_below_one_is_refused() {
    for mask in [Mask::SlidingWindow(0), Mask::Block(-1)] {
        let e = mask.validate().unwrap_err().to_string();
        assert!(e.contains("expected 1 or more"), "{e}");
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
    let reference = losses(ModelConfig::new(llama));
    let windowed = |window| {
        losses(ModelConfig::new(LlamaConfig {
            window: Some(window),
            ..llama
        }))
    };
    let same = windowed(llama.seq);
    for (a, b) in reference.iter().zip(&same) {
        assert!((a - b).abs() <= 1e-6 * a.abs(), "{reference:?} vs {same:?}");
    }
    let local = windowed(4);
    assert!(
        (local[0] - reference[0]).abs() > 1e-4,
        "a window of 4 attends to less: {local:?} vs {reference:?}"
    );
}

/// The presets name the window, and a bad one is refused naming the field.
#[test]
fn the_window_is_a_field_of_the_llamas_config() {
    let llama: ModelName = "llama".parse().unwrap();
    let tiny = llama.load("tiny-swa").unwrap();
    assert_eq!(tiny.get::<LlamaConfig>().unwrap().window, Some(16));
    assert!(tiny.describe().contains("a sliding window of 16 positions"));
    let mistral = llama.load("mistral-7b").unwrap();
    assert_eq!(mistral.get::<LlamaConfig>().unwrap().window, Some(4096));
    let bad = LlamaConfig {
        window: Some(0),
        ..LlamaConfig::tiny()
    };
    let e = ModelConfig::new(bad).build().unwrap_err();
    assert!(e.to_string().contains("`window` is 0"), "{e}");
}
