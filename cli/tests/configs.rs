//! One `--config` for every command that takes a model, as a user runs them: a TOML file
//! extending a published preset, a Hugging Face `config.json`, another architecture's file
//! refused by each command in one line naming both.

mod common;

use common::{fails, run, succeeds};

#[test]
fn every_command_that_takes_a_model_takes_one_config() {
    let hf = |f: &str| format!("{}/../models/configs/hf/{f}", env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::temp_dir().join(format!("stackscan-one-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Two Qwen3.5-35B-A3B blocks: everything but the depth from the published preset.
    let eight = dir.join("qwen35-8.toml");
    std::fs::write(&eight, "extends = \"qwen35-35b-a3b\"\nlayers = 8\n").unwrap();
    let eight = eight.to_str().unwrap();
    let stdout = succeeds("plan", &["qwen35", "--config", eight]);
    assert!(
        stdout.contains(&format!(
            "qwen35 ({eight}): 8 layers, prefetch_fsdp_weights=true"
        )),
        "{stdout}"
    );
    // `-v` says which fields came from the base.
    let verbose = run("plan", &["qwen35", "--config", eight, "-v"]);
    let stderr = String::from_utf8_lossy(&verbose.stderr);
    assert!(verbose.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "config `{eight}`: 14 fields from the base `qwen35-35b-a3b`: attention, \
             batch_per_device, capacity_factor, d_model"
        )),
        "{stderr}"
    );
    let stdout = succeeds("params", &["qwen35", "--config", eight]);
    // The published widths (GDN value heads 32 × 128 = 4096 wide), two blocks deep.
    let wv = stdout
        .lines()
        .find(|l| l.starts_with("layers.GDN.mixer.wv "))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "));
    assert_eq!(
        wv.as_deref(),
        Some("layers.GDN.mixer.wv ×6 [2048, 4096] f32 shard 0"),
        "{stdout}"
    );
    // A Hugging Face file reads as the preset it was written from.
    let llama = hf("llama-3-8b.json");
    let from_file = succeeds("params", &["llama", "--config", &llama]);
    let published = succeeds("params", &["llama"]);
    let table = |s: &str| s.lines().skip(1).collect::<Vec<_>>().join("\n");
    assert_eq!(table(&from_file), table(&published));
    let stdout = succeeds("plan", &["llama", "--config", &llama]);
    assert!(stdout.contains("32 layers"), "{stdout}");
    // Another architecture's file is refused by every command, naming both.
    let deepseek = hf("deepseek-v3.json");
    for (bin, args) in [
        ("params", vec!["qwen35", "--config", &deepseek]),
        ("plan", vec!["llama", "--config", &deepseek]),
        ("train", vec!["--model", "qwen35", "--config", &deepseek]),
    ] {
        fails(
            bin,
            &args,
            2,
            &[&deepseek, "is a `deepseek3` config, not a `", "` one"],
        );
    }
    // `timeline` takes the same `--config` with a model name.
    let out = dir.join("timeline");
    let stdout = succeeds(
        "timeline",
        &[
            "--model",
            "qwen35",
            "--config",
            eight,
            "--chips",
            "8",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert!(stdout.contains("predicted step"), "{stdout}");
    let schedule = std::fs::read_to_string(out.join("schedule.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&schedule).unwrap();
    assert_eq!(
        v["on"]["forward"]["steps"].as_array().map(Vec::len),
        Some(8),
        "two blocks of four layers"
    );
    // A config, model or profile that cannot be loaded is the arguments' fault: status 2.
    fails(
        "timeline",
        &["--hardware", "no-such-profile"],
        2,
        &["no-such-profile"],
    );
    fails(
        "timeline",
        &["--model", "llama3-8b", "--config", "tiny"],
        2,
        &["`--config tiny` needs `--model llama|deepseek3|qwen35`"],
    );
    fails(
        "timeline",
        &["--model", "qwen35", "--config", "extends.toml"],
        2,
        &["neither a built-in config (tiny, qwen35-35b-a3b)"],
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Without `--model`, a Hugging Face `config.json` (a file or a model directory) says which
/// model it is: its `model_type`, matched against the registry's models. `--model` still
/// decides, and a file of another architecture is then refused naming both.
#[test]
fn a_config_json_names_its_model() {
    let hf = |f: &str| format!("{}/../models/configs/hf/{f}", env!("CARGO_MANIFEST_DIR"));
    let (deepseek, qwen) = (hf("deepseek-v3.json"), hf("qwen3.5-35b-a3b.json"));
    let inferred = succeeds("params", &["--config", &deepseek]);
    let named = succeeds("params", &["deepseek3", "--config", &deepseek]);
    assert_eq!(inferred, named);
    assert!(inferred.contains("layers.M.moe.experts"), "{inferred}");
    let plan = succeeds("plan", &["--config", &qwen]);
    assert!(plan.contains("qwen35 ("), "{plan}");
    // A model directory as the Hub lays it out.
    let dir = std::env::temp_dir().join(format!("stackscan-infer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(&qwen, dir.join("config.json")).unwrap();
    let from_dir = succeeds("plan", &["--config", dir.to_str().unwrap()]);
    std::fs::remove_dir_all(&dir).unwrap();
    let body = |s: &str| s.lines().skip(2).collect::<Vec<_>>().join("\n");
    assert!(
        from_dir.contains("qwen35 (") && body(&from_dir) == body(&plan),
        "{from_dir}"
    );
    fails(
        "params",
        &["--model", "llama", "--config", &qwen],
        2,
        &["is a `qwen35` config, not a `llama` one"],
    );
}
