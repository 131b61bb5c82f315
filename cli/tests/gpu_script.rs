//! The GPU check (`examples/gpu/run.sh`) kept right on machines without a GPU: its model is
//! the ~1B-parameter Llama it says, and every command it runs is accepted by the binary and
//! gets as far as loading the plugin (here a stand-in that is no plugin), so no flag, config
//! or path in it is stale.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use std::path::{Path, PathBuf};
use std::process::Command;

use stackscan_models::registry::ModelName;

fn gpu_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/gpu")
}

#[test]
fn the_benchmarked_llama_has_about_a_billion_parameters() {
    let llama: ModelName = "llama".parse().unwrap();
    let path = gpu_dir().join("llama-1b.toml");
    let c = llama.load(path.to_str().unwrap()).unwrap();
    assert_eq!((c.layers(), c.tokens().seq), (16, 2048));
    let m = c.build().unwrap().0;
    let params: i64 = m
        .weights()
        .iter()
        .map(|(p, layers)| p.shape.iter().product::<i64>() * *layers as i64)
        .sum();
    assert!(
        (1_000_000_000..1_300_000_000).contains(&params),
        "{params} parameters"
    );
}

#[test]
fn every_command_of_the_script_reaches_the_plugin() {
    let scratch = std::env::temp_dir().join(format!("stackscan-gpu-script-{}", std::process::id()));
    let plugin_dir = scratch.join("site/jax_plugins/xla_cuda13");
    std::fs::create_dir_all(&plugin_dir).unwrap();
    std::fs::write(
        plugin_dir.join("xla_cuda_plugin.so"),
        b"not a shared library",
    )
    .unwrap();
    // A Python that answers the script's one question, where the plugin package is.
    let python = scratch.join("python");
    std::fs::write(
        &python,
        format!("#!/bin/sh\necho {}\n", plugin_dir.display()),
    )
    .unwrap();
    Command::new("chmod")
        .arg("+x")
        .arg(&python)
        .status()
        .unwrap();
    let out = scratch.join("out");
    let run = Command::new("bash")
        .arg(gpu_dir().join("run.sh"))
        .arg(env!("CARGO_BIN_EXE_stackscan"))
        .arg(&out)
        .env("PYTHON", &python)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    // Every command fails, on the stand-in plugin: the script reports it.
    assert!(!run.status.success(), "{stdout}");
    let mut logs = 0;
    for entry in std::fs::read_dir(&out).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|x| x != "log") {
            continue;
        }
        logs += 1;
        let log = std::fs::read_to_string(&path).unwrap();
        assert!(
            !log.contains("Usage:") && !log.contains("unexpected argument"),
            "{}: a flag the binary refuses:\n{log}",
            path.display()
        );
        assert!(
            log.contains("xla_cuda_plugin.so"),
            "{}: did not reach the plugin:\n{log}",
            path.display()
        );
    }
    // Two benches, two compile reports and two steps of each of three models.
    assert_eq!(logs, 2 + 2 + 3 * 2, "{stdout}");
    let versions = std::fs::read_to_string(out.join("versions.txt")).unwrap();
    assert!(versions.contains("stackscan "), "{versions}");
    std::fs::remove_dir_all(&scratch).unwrap();
}
