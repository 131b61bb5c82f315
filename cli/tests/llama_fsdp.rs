//! The Llama-style stack's FSDP training step equals the unsharded single-device reference for
//! every option set ({prefetch off, on, on + deferred} × {unroll 1, 2}) on 1, 2, 4 and 8
//! devices (f32, rtol 1e-5 of each gradient's scale). Compiling a case takes most of its
//! time, so CI runs every option set on 4 devices and one on each other count; the whole
//! product is `#[ignore]`d, run with `cargo test -p stackscan-cli --test llama_fsdp --
//! --ignored`.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan_models::registry::Architecture;
use stackscan_runtime::testing as common;

use common::fsdp::{check_option_sets, every_option_set, fixture};
use common::graph::{Arg, Data};
use stackscan::plan::PlanOptions;
use stackscan::{DType, TensorType};
use stackscan_models::llama::{LlamaConfig, synthetic_batch};

/// Small enough to compile 24 variants quickly; the structure of the tiny config.
fn config(batch_per_device: i64) -> LlamaConfig {
    LlamaConfig::small(batch_per_device)
}

/// Checks the step on each `(devices, option sets)` case against the reference for that
/// device count (the global batch is the same for every count: `n` shards of `8 / n` rows).
fn check(cases: &[(usize, &[PlanOptions])]) {
    let max = 8;
    let client = common::cpu_client(max);
    let (tokens, labels) = synthetic_batch(&config(1), max as i64, 3);
    let ty = TensorType::new(DType::I32, [max as i64, 8]);
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
    for &(n, sets) in cases {
        let m = model(&config((max / n) as i64)).unwrap();
        let fx = fixture(&client, &m, inputs.clone(), n, 11);
        let d = check_option_sets(&client, &m, &fx, n, sets);
        eprintln!(
            "{n} devices, {} option sets: worst norm-wise deviation {:.2e}, worst element {:.2e} of its gradient's scale",
            sets.len(),
            d.normwise,
            d.elementwise
        );
    }
}

#[test]
fn llama_step_equals_reference_for_every_option_set_on_4_devices() {
    check(&[(4, &every_option_set())]);
}

/// One option set on each other device count, together covering off, on and deferred.
#[test]
fn llama_step_equals_reference_on_1_2_and_8_devices() {
    let sets = every_option_set();
    check(&[(1, &sets[..1]), (2, &sets[3..4]), (8, &sets[4..5])]);
}

#[test]
#[ignore = "28 programs, long; CI runs every option set on 4 devices and one on 1, 2 and 8"]
fn llama_step_equals_reference_for_every_option_set_and_device_count() {
    let sets = every_option_set();
    check(&[(1, &sets), (2, &sets), (4, &sets), (8, &sets)]);
}

/// The declared Llama at `c`, as the run-time model.
fn model(c: &LlamaConfig) -> stackscan::Result<stackscan::fsdp::StackModel> {
    Ok(Architecture::build(c)?.0)
}
