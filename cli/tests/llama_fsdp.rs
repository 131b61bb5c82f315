//! The Llama-style stack's FSDP training step equals the unsharded single-device reference for
//! every option set ({prefetch off, on, on + deferred} × {unroll 1, 2}) on 1, 2, 4 and 8
//! devices (f32, rtol 1e-5 of each gradient's scale).

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan_runtime::testing as common;

use common::fsdp::{check_every_option_set, fixture};
use common::graph::{Arg, Data};
use stackscan::{DType, TensorType};
use stackscan_models::llama::{LlamaConfig, synthetic_batch};

/// Small enough to compile 24 variants quickly; the structure of the tiny config.
fn config(batch_per_device: i64) -> LlamaConfig {
    LlamaConfig::small(batch_per_device)
}

#[test]
fn llama_step_equals_reference_for_every_option_set_and_device_count() {
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
    for n in [1, 2, 4, 8] {
        let m = model(&config((max / n) as i64)).unwrap();
        let fx = fixture(&client, &m, inputs.clone(), n, 11);
        let d = check_every_option_set(&client, &m, &fx, n);
        eprintln!(
            "{n} devices, every option set: worst norm-wise deviation {:.2e}, worst element {:.2e} of its gradient's scale",
            d.normwise, d.elementwise
        );
    }
}

/// The declared Llama at `c`, as the run-time model.
fn model(c: &LlamaConfig) -> stackscan::Result<stackscan::fsdp::StackModel> {
    Ok(stackscan_models::llama::for_config(c)?.0)
}
