//! The bench's FLOP count against hand-derived values, and its report as a user gets it: the
//! binary at a tiny configuration writes JSON with every figure present and finite. No
//! timing is asserted (a benchmark's figures are for reading).

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan_models::registry::Architecture;
use std::process::Command;

use stackscan::Axis;
use stackscan::fsdp::train_step;
use stackscan::plan::PlanOptions;
use stackscan_cli::bench::step_flops;
use stackscan_models::llama::LlamaConfig;

/// The count is generic (the cost model's count of each layer's and the outer parts' traced
/// forward, × 3); for a dense decoder it must equal the hand-derived `6·N·tokens + 12·layers·
/// heads·head_dim·seq·tokens`, N the parameters of its products.
#[test]
fn model_flops_equal_the_hand_derived_count_of_a_dense_decoder() {
    let c = LlamaConfig {
        layers: 2,
        seq: 16,
        batch_per_device: 2,
        ..LlamaConfig::tiny()
    };
    let axis = Axis {
        name: "fsdp".into(),
        size: 4,
    };
    let model = Architecture::build(&c).unwrap().0;
    let step = train_step(&model, PlanOptions::prefetch_deferred(), &axis).unwrap();
    let tokens = 8 * 16;
    let f = step_flops(&model, tokens, &step, 4).unwrap();
    assert_eq!(f.tokens, tokens);
    // Per layer: wq 256·256, wk and wv 256·64, wo 256·256, w_gate, w_up 256·896, w_down
    // 896·256 = 851 968; two layers and the LM head 256·512 make N = 1 835 008:
    // 6 · N · 128 + 12 · 2 layers · 256 (heads · head_dim) · 16 · 128.
    let matmul_params = 2.0 * 851_968.0 + 131_072.0;
    assert_eq!(f.model_flops, 6.0 * matmul_params * 128.0 + 12_582_912.0);
    // The embedding (a lookup) and the norms are parameters without products.
    assert_eq!(
        f.parameters as f64,
        matmul_params + 512.0 * 256.0 + 5.0 * 256.0
    );
    // The program does the model's products plus a forward recompute in each layer's VJP
    // (the LM head is not recomputed): between 1 and 4/3 of the model's.
    let ratio = f.program_matrix_flops / f.model_flops;
    assert!((1.0..=4.0 / 3.0).contains(&ratio), "{ratio}");
}

#[test]
fn the_binary_writes_a_complete_report() {
    let dir = std::env::temp_dir().join(format!("stackscan-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("bench.json");
    let status = Command::new(env!("CARGO_BIN_EXE_stackscan"))
        .args([
            "bench",
            "--layers",
            "1",
            "--batch",
            "4",
            "--seq",
            "8",
            "--devices",
            "2",
            "--steps",
            "2",
            "--warmup",
            "0",
            "--options",
            "deferred",
            "--compile-depths",
            "1,2",
            "--out",
        ])
        .arg(&out)
        .env("TF_CPP_MIN_LOG_LEVEL", "1")
        .status()
        .unwrap();
    assert!(status.success(), "{status:?}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let positive = |v: &serde_json::Value, what: &str| {
        let x = v.as_f64().unwrap_or_else(|| panic!("{what}: {v}"));
        assert!(x.is_finite() && x > 0.0, "{what}: {x}");
    };
    positive(&report["matmul_peak"]["flops_per_second"], "peak");
    positive(&report["flops"]["model_flops"], "model FLOPs");
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["schedule"], "deferred");
    for key in [
        "step_seconds_median",
        "device_seconds_median",
        "tokens_per_second",
        "mfu",
        "hfu",
        "compile_seconds",
    ] {
        positive(&runs[0][key], key);
    }
    // The host's share is what is left of the step outside the device's: never negative.
    assert!(runs[0]["host_overhead_us_median"].as_f64().unwrap() >= 0.0);
    positive(&runs[0]["memory"]["temp"], "temp");
    let depths: Vec<u64> = report["compile_time"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["layers"].as_u64().unwrap())
        .collect();
    assert_eq!(depths, [1, 2]);
    positive(
        &report["compile_ratio_deepest_to_shallowest"],
        "compile ratio",
    );
    assert_eq!(report["setup"]["config"]["batch_per_device"], 2);
}
