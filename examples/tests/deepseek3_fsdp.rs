//! The DeepSeek-V3-style stack (dense prefix, MoE layers with MLA) under FSDP equals the
//! unsharded single-device reference for every option set ({prefetch off, on, on + deferred}
//! × {unroll 1, 2}) on 1, 2, 4 and 8 devices: loss and every gradient (f32, rtol 1e-5).
//! Capacity never drops a token, so each token is routed as in the reference.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan_runtime::testing as common;

use common::fsdp::{check_every_option_set, fixture};
use common::graph::{Arg, Data};
use stackscan::{DType, TensorType, layer_stack};
use stackscan_examples::deepseek3::{DeepSeek3Config, Dense, Moe, model};
use stackscan_examples::llama::{LlamaConfig, synthetic_batch};
use stackscan_examples::mla::MlaConfig;

/// The tiny model's structure (3 dense, then MoE) at 6 layers.
#[layer_stack(prefix = [Dense, Dense, Dense], block = [Moe], layers = 6)]
#[derive(Debug)]
struct SmallDeepSeek3;

/// Every sharded dimension divisible by 8; 8 experts in 4 groups, top 2 groups, top-2.
fn config(batch_per_device: i64) -> DeepSeek3Config {
    DeepSeek3Config {
        vocab: 64,
        d: 32,
        layers: 6,
        dense_layers: 3,
        mla: MlaConfig {
            d: 32,
            heads: 2,
            q_lora: 16,
            kv_lora: 16,
            nope: 8,
            rope: 4,
            v: 8,
            rope_theta: 10_000.0,
            eps: 1e-6,
        },
        dense_ffn: 32,
        experts: 8,
        top_k: 2,
        groups: 4,
        top_groups: 2,
        expert_width: 16,
        shared_experts: 1,
        scaling: 2.5,
        capacity_factor: 8.0,
        direct_token_gather: false,
        seq: 8,
        batch_per_device,
    }
}

#[test]
fn deepseek3_step_equals_reference_for_every_option_set_and_device_count() {
    let max = 8;
    let client = common::cpu_client(max);
    let llama_like = LlamaConfig {
        vocab: 64,
        seq: 8,
        ..LlamaConfig::tiny()
    };
    let (tokens, labels) = synthetic_batch(&llama_like, max as i64, 3);
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
        let m = model::<SmallDeepSeek3>(&config((max / n) as i64)).unwrap();
        let fx = fixture(&client, &m, inputs.clone(), n, 11);
        check_every_option_set(&client, &m, &fx, n);
    }
}
