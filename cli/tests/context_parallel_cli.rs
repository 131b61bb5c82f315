//! `--cp` through the command line: `train` with each sequence split over the devices of a
//! context group trains exactly as the same global batch on fewer devices without the split
//! (Llama on `fsdp × context`, DeepSeek-V3 on `fsdp × expert × context`), and the models and
//! splits that cannot run say why in one line before any plugin loads.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

mod common;

use common::{fails, succeeds};

/// The metrics lines of a `train` run with `args`, written to `name` in a scratch directory.
fn metrics(name: &str, args: &[&str]) -> Vec<serde_json::Value> {
    let dir = std::env::temp_dir().join(format!("stackscan-cp-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let path_text = path.to_str().unwrap().to_owned();
    let mut all = vec!["--steps", "3", "--quiet", "--metrics", &path_text];
    all.extend_from_slice(args);
    succeeds("train", &all);
    let lines = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    std::fs::remove_file(&path).unwrap();
    lines
}

/// The first step's loss and gradient norm equal to f32 rounding (the same weights and batch;
/// only the sums are split differently), later losses close (Adam's first steps move each
/// weight by about the learning rate whatever the size of its gradient, so the rounding of a
/// tiny gradient component shows, and a router's near-tie may fall the other way), tokens and
/// data positions the same.
fn assert_same_run(what: &str, split: &[serde_json::Value], whole: &[serde_json::Value]) {
    assert_eq!(split.len(), whole.len(), "{what}");
    let value = |line: &serde_json::Value, key: &str| line[key].as_f64().unwrap();
    for (i, (s, w)) in split.iter().zip(whole).enumerate() {
        let keys: &[(&str, f64)] = if i == 0 {
            &[("loss", 2e-5), ("grad_norm", 2e-5)]
        } else {
            &[("loss", 1e-3)]
        };
        for &(key, rtol) in keys {
            let (a, b) = (value(s, key), value(w, key));
            assert!(
                (a - b).abs() <= rtol * b.abs(),
                "{what}, step {}: {key} {a} vs {b}",
                s["step"]
            );
        }
        assert_eq!(s["tokens"], w["tokens"], "{what}");
        assert_eq!(s["data_position"], w["data_position"], "{what}");
    }
}

#[test]
fn llama_with_cp_trains_as_the_same_batch_without_it() {
    let split = metrics(
        "llama-cp.jsonl",
        &["--model", "llama", "--devices", "4", "--cp", "2"],
    );
    let whole = metrics("llama.jsonl", &["--model", "llama", "--devices", "2"]);
    assert_same_run("llama, 2 × 2 against 2 devices", &split, &whole);
}

#[test]
fn deepseek3_with_cp_and_ep_trains_as_the_same_batch_without_cp() {
    let split = metrics(
        "deepseek3-cp.jsonl",
        &[
            "--model",
            "deepseek3",
            "--devices",
            "8",
            "--ep",
            "2",
            "--cp",
            "2",
        ],
    );
    let whole = metrics(
        "deepseek3.jsonl",
        &["--model", "deepseek3", "--devices", "4", "--ep", "2"],
    );
    assert_same_run("deepseek3, 2 × 2 × 2 against 2 × 2", &split, &whole);
}

#[test]
fn models_and_splits_without_context_parallelism_are_refused() {
    fails(
        "train",
        &["--model", "qwen35", "--devices", "4", "--cp", "2"],
        2,
        &["--cp 2", "Gated DeltaNet"],
    );
    fails(
        "train",
        &["--config", "tiny-swa", "--devices", "4", "--cp", "2"],
        2,
        &["sliding `window` has no context-parallel form"],
    );
    fails(
        "train",
        &["--model", "llama", "--devices", "4", "--cp", "3"],
        2,
        &["--cp 3", "divide the 4 devices"],
    );
    fails(
        "train",
        &[
            "--model",
            "llama",
            "--devices",
            "4",
            "--cp",
            "4",
            "--seq",
            "6",
        ],
        2,
        &["--cp 4", "sequence length 6"],
    );
}

/// `bench --cp 2` times the split step: the same first timed loss as the same batch on half
/// the devices without it, and the split in its setup.
#[test]
fn bench_takes_cp() {
    let run = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec![
            "--model",
            "llama",
            "--layers",
            "2",
            "--batch",
            "4",
            "--seq",
            "32",
            "--steps",
            "2",
            "--warmup",
            "1",
            "--options",
            "deferred",
            "--compile-depths",
        ];
        args.extend_from_slice(extra);
        serde_json::from_str(&succeeds("bench", &args)).unwrap()
    };
    let split = run(&["--devices", "4", "--cp", "2"]);
    let whole = run(&["--devices", "2"]);
    assert_eq!(split["setup"]["context"], 2);
    assert_eq!(
        split["setup"]["global_batch"],
        whole["setup"]["global_batch"]
    );
    let first = |r: &serde_json::Value| r["runs"][0]["loss_first"].as_f64().unwrap();
    let (a, b) = (first(&split), first(&whole));
    assert!((a - b).abs() <= 2e-5 * b, "{a} vs {b}");
}

/// What context parallelism is for: a device's compiled temp at 4 × the context on `--cp 4`
/// stays within 1.2 × of the context on `--cp 1` (the same tokens per device; measured 1.15,
/// against 1.22 when each piece held its whole score matrix, and 1.86 at 4 × 256 tokens).
#[test]
fn four_times_the_context_on_four_devices_costs_a_device_little_more_memory() {
    let temp = |cp: &str, seq: &str, batch: &str| -> f64 {
        let args = [
            "--model",
            "llama",
            "--devices",
            "4",
            "--cp",
            cp,
            "--seq",
            seq,
            "--batch",
            batch,
            "--json",
        ];
        let report: serde_json::Value =
            serde_json::from_str(&succeeds("compile-report", &args)).unwrap();
        report["temp_bytes"].as_f64().unwrap()
    };
    let (short, long) = (temp("1", "64", "8"), temp("4", "256", "2"));
    assert!(long <= 1.2 * short, "{long} bytes against {short}");
}
