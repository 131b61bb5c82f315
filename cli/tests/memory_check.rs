//! The memory check made before anything compiles: its estimate against what XLA's CPU
//! compiler plans for the same step, as `compile-report` prints both, on each tiny built-in
//! model; and the refusals of `train`, `bench` and `eval` for a step far too big, made before
//! the plugin loads.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

mod common;

use stackscan_models::registry::BUILT_IN;

/// `compile-report --json` of the tiny `model` on 4 devices: the estimate and XLA's figure
/// (arguments + outputs − aliased + temporaries), in bytes, and the estimate's parts.
fn memory(model: &str) -> (u64, i64, Vec<(String, u64)>) {
    let out = common::succeeds(
        "compile-report",
        &["--model", model, "--devices", "4", "--json"],
    );
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let m = &report["memory"];
    let parts = m["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p[0].as_str().unwrap().to_owned(), p[1].as_u64().unwrap()))
        .collect();
    (
        m["estimate"].as_u64().unwrap(),
        m["xla"].as_i64().unwrap(),
        parts,
    )
}

/// Never below XLA's plan, so a step the check passes is not refused by the compiler for
/// memory the estimate did not count, and at most half again above it, so the check does not
/// refuse steps that fit.
fn within_half_again(model: &str) {
    let (estimate, xla, parts) = memory(model);
    assert_eq!(
        parts.iter().map(|(_, b)| b).sum::<u64>(),
        estimate,
        "{model}: the parts add up to the estimate"
    );
    let ratio = estimate as f64 / xla as f64;
    assert!(
        (1.0..=1.5).contains(&ratio),
        "{model}: estimate {estimate} B against XLA's {xla} B ({ratio:.2}x): {parts:?}"
    );
}

#[test]
fn the_llama_estimate_is_within_half_again_of_xlas_plan() {
    within_half_again("llama");
}

#[test]
fn the_deepseek3_estimate_is_within_half_again_of_xlas_plan() {
    within_half_again("deepseek3");
}

#[test]
fn the_qwen35_estimate_is_within_half_again_of_xlas_plan() {
    within_half_again("qwen35");
}

/// Every built-in model has its test above.
#[test]
fn every_built_in_model_is_checked() {
    let names: Vec<&str> = BUILT_IN.iter().map(|m| m.as_str()).collect();
    assert_eq!(names, ["llama", "deepseek3", "qwen35"]);
}

/// A step whose activations alone are far beyond any machine's memory is refused by `train`,
/// `bench` and `eval` before the plugin loads (nothing on stdout, where the first line would name the
/// devices), its needs broken down and the flags to change named.
#[test]
fn a_step_far_too_big_is_refused_before_anything_loads() {
    let says = [
        "needs about",
        "GB of host memory",
        "on each of 4 devices",
        "layer backward",
        "saved layer inputs",
        "`--seq`",
        "`--accumulate K`",
        "`--no-memory-check`",
    ];
    let data = std::env::temp_dir().join(format!("stackscan-memory-{}.u16", std::process::id()));
    std::fs::write(&data, vec![0u8; 1 << 16]).unwrap();
    let ckpt = std::env::temp_dir().join("stackscan-memory-no-checkpoint");
    for (bin, args) in [
        ("train", vec!["--seq", "1000000"]),
        ("bench", vec!["--seq", "1000000"]),
        (
            "eval",
            vec![
                "--seq",
                "1000000",
                "--data",
                data.to_str().unwrap(),
                "--checkpoint",
                ckpt.to_str().unwrap(),
            ],
        ),
    ] {
        common::fails(bin, &args, 2, &says);
        let out = common::run(bin, &args);
        assert!(out.stdout.is_empty(), "{bin} printed: {:?}", out.stdout);
    }
    std::fs::remove_file(&data).unwrap();
}
