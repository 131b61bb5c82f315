//! The Qwen3.5-style hybrid, `[GDN, GDN, GDN, attention]` and `[attention, GDN, GDN, GDN]`
//! over two blocks: the FSDP step against the unsharded single-device reference for every option set ({prefetch off, on, on + deferred} × {unroll 1, 2}) on 1,
//! 2, 4 and 8 devices (f32, rtol 1e-5 of each gradient's scale).

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan_runtime::testing as common;

use common::fsdp::{check_every_option_set, fixture};
use common::graph::{Arg, Data};
use stackscan::{DType, LayerStack, TensorType};
use stackscan_examples::gdn_layer::GdnForm;
use stackscan_examples::qwen35::{
    Qwen35AttentionFirst, Qwen35Config, Qwen35Tiny, model, synthetic_batch,
};

const SEQ: i64 = 8;

/// The tiny config's structure at sizes that compile quickly.
fn config(batch_per_device: i64, form: GdnForm) -> Qwen35Config {
    Qwen35Config::small(batch_per_device, form)
}

/// Tokens and labels for `rows` sequences.
fn inputs(rows: usize) -> Vec<Arg> {
    let (tokens, labels) = synthetic_batch(&config(1, GdnForm::Recurrent), rows as i64, 3);
    let ty = TensorType::new(DType::I32, [rows as i64, SEQ]);
    vec![
        Arg {
            ty: ty.clone(),
            data: Data::I(tokens),
        },
        Arg {
            ty,
            data: Data::I(labels),
        },
    ]
}

fn step_equals_reference<S: LayerStack<Config = Qwen35Config>>() {
    let max = 8;
    let client = common::cpu_client(max);
    for n in [1, 2, 4, 8] {
        let m = model::<S>(&config((max / n) as i64, GdnForm::Chunked(4))).unwrap();
        let fx = fixture(&client, &m, inputs(max), n, 11);
        check_every_option_set(&client, &m, &fx, n);
        eprintln!("{n} devices: 6 option sets equal the reference");
    }
}

#[test]
#[ignore = "about 1 minute per compiled step on 2 shared cores (24 FSDP steps and 4 references per model); 1 and 2 devices checked, 4 and 8 not yet; run with --ignored"]
fn hybrid_step_equals_reference_for_every_option_set_and_device_count() {
    step_equals_reference::<Qwen35Tiny>();
}

#[test]
#[ignore = "about 1 minute per compiled step on 2 shared cores (24 FSDP steps and 4 references per model); not yet run to completion; run with --ignored"]
fn attention_first_step_equals_reference_for_every_option_set_and_device_count() {
    step_equals_reference::<Qwen35AttentionFirst>();
}
