//! The training driver: a rejected step changes nothing, training lowers the loss, and inputs
//! that do not fit the model's declaration (element type, length, value range) are rejected
//! with an error naming the input, device and position before anything is uploaded.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan_models::registry::Architecture;
use stackscan_runtime::testing as common;

use stackscan::fsdp::Adam;
use stackscan::plan::PlanOptions;
use stackscan_models::llama::{self, LlamaConfig};
use stackscan_models::toy::{self, ToyConfig};
use stackscan_runtime::train::{HostInput, Trainer};
use stackscan_runtime::{DType, Error, Mesh};

/// Device `d`'s `x` and `y` of the toy (rows of 8, two per device).
fn batch(devices: usize) -> Vec<Vec<HostInput>> {
    common::train::batch(devices, 2, 16, 0)
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
            Error::InputLength {
                ref input,
                device: 1,
                expected: 16,
                actual: 3,
                ..
            } if input == "x"
        ),
        "{err:?}"
    );
    // Integer values for the toy's f32 `y`.
    let mut ints = batch(2);
    ints[0][1] = HostInput::I32(vec![0; 16]);
    let wrong_type = after_error.step(&ints).unwrap_err();
    assert!(
        matches!(
            wrong_type,
            Error::InputType {
                ref input,
                device: 0,
                expected: DType::F32,
                actual: DType::I32,
            } if input == "y"
        ),
        "{wrong_type:?}"
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

/// A Llama small enough to compile in a second: vocabulary 16, width 8, 2 layers, rows of 4.
fn micro_llama() -> LlamaConfig {
    LlamaConfig {
        vocab: 16,
        d_model: 8,
        layers: 2,
        heads: 2,
        kv_heads: 1,
        head_dim: 4,
        ffn: 8,
        rope_theta: 10_000.0,
        rope_scaling: None,
        seq: 4,
        batch_per_device: 2,
        window: None,
        attention_block: None,
        tie_embeddings: false,
        norm_eps: 1e-5,
        context: 1,
    }
}

/// Device `d`'s tokens and labels, two rows of 4.
fn token_batch(c: &LlamaConfig, devices: usize) -> Vec<Vec<HostInput>> {
    (0..devices)
        .map(|d| {
            let (tokens, labels) = llama::synthetic_batch(c, c.batch_per_device, d as u64);
            vec![HostInput::I32(tokens), HostInput::I32(labels)]
        })
        .collect()
}

/// Sets element `i` of a token or label input.
fn set_id(input: &mut HostInput, i: usize, value: i32) {
    match input {
        HostInput::I32(v) => v[i] = value,
        HostInput::F32(_) => panic!("token ids and labels are integers"),
    }
}

/// Token ids and labels outside the vocabulary are refused with the input, device and
/// `[row, column]` named, and the refused steps change nothing. Before the inputs declared
/// their range, a label equal to the vocabulary size added nothing to the loss and a token
/// id of -1 was clamped by the embedding's gather; both steps returned `Ok`.
#[test]
fn ids_outside_the_vocabulary_are_rejected_with_their_position() {
    let client = common::cpu_client(2);
    let mesh = Mesh::new(&client, "fsdp", 2).unwrap();
    let c = micro_llama();
    let m = Architecture::build(&c).unwrap().0;
    let mut fresh = Trainer::new(
        &client,
        &mesh,
        &m,
        PlanOptions::prefetch(),
        Adam::default(),
        3,
    )
    .unwrap();
    let mut checked = Trainer::new(
        &client,
        &mesh,
        &m,
        PlanOptions::prefetch(),
        Adam::default(),
        3,
    )
    .unwrap();

    // Device 1's label at row 1, column 1 (element 5) is the vocabulary size.
    let mut bad_label = token_batch(&c, 2);
    set_id(&mut bad_label[1][1], 5, 16);
    let err = checked.step(&bad_label).unwrap_err();
    assert!(
        matches!(
            err,
            Error::InputOutOfRange {
                ref input,
                device: 1,
                ref position,
                value: 16,
                ref expected,
            } if input == "labels" && position == &[1, 1] && *expected == (0..16)
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "device 1, input `labels` at [1, 1]: 16 is outside the valid values 0..16"
    );

    // Device 0's token at row 1, column 2 (element 6) is -1.
    let mut bad_token = token_batch(&c, 2);
    set_id(&mut bad_token[0][0], 6, -1);
    let err = checked.step(&bad_token).unwrap_err();
    assert!(
        matches!(
            err,
            Error::InputOutOfRange {
                ref input,
                device: 0,
                ref position,
                value: -1,
                ..
            } if input == "tokens" && position == &[1, 2]
        ),
        "{err:?}"
    );

    let a: Vec<f32> = (0..3)
        .map(|_| fresh.step(&token_batch(&c, 2)).unwrap().loss)
        .collect();
    let b: Vec<f32> = (0..3)
        .map(|_| checked.step(&token_batch(&c, 2)).unwrap().loss)
        .collect();
    assert_eq!(a, b, "a refused batch changed later updates");
    assert_eq!(checked.steps(), 3);
}
