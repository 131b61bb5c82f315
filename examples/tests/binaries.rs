//! The binaries as a user runs them: bad input ends in one line on stderr and a non-zero exit
//! status, never a signal (SIGSEGV at exit and SIGBUS in `dlopen` before), and the cases that
//! used to fail for no reason (`--steps 1`, many devices) succeed.

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Output};

/// Runs a binary of this package with XLA's informational log silenced, so stderr holds only
/// what the binary itself says. The CPU plugin is fetched first, here, so that the lines a
/// first fetch prints on a fresh machine are not taken for the binary's own.
fn run(bin: &str, args: &[&str]) -> Output {
    static FETCHED: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    FETCHED.get_or_init(|| {
        stackscan_runtime::plugin::resolve("cpu").expect("fetch the cpu plugin");
    });
    let exe = match bin {
        "train" => env!("CARGO_BIN_EXE_train"),
        "bench" => env!("CARGO_BIN_EXE_bench"),
        "collectives" => env!("CARGO_BIN_EXE_collectives"),
        "plan" => env!("CARGO_BIN_EXE_plan"),
        other => panic!("no binary `{other}`"),
    };
    Command::new(exe)
        .args(args)
        .env("TF_CPP_MIN_LOG_LEVEL", "1")
        .output()
        .expect("start the binary")
}

/// Requires a failure: exit status `code`, no signal, exactly one line on stderr holding
/// every string of `says`.
fn fails(bin: &str, args: &[&str], code: i32, says: &[&str]) {
    let out = run(bin, args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let shown = format!(
        "`{bin} {}`: {:?}; stderr:\n{stderr}",
        args.join(" "),
        out.status
    );
    assert_eq!(out.status.signal(), None, "killed by a signal: {shown}");
    assert_eq!(out.status.code(), Some(code), "{shown}");
    assert_eq!(
        stderr.trim_end().lines().count(),
        1,
        "not one line: {shown}"
    );
    assert!(stderr.starts_with("error: "), "{shown}");
    for s in says {
        assert!(stderr.contains(s), "no `{s}` in {shown}");
    }
}

fn succeeds(bin: &str, args: &[&str]) -> String {
    let out = run(bin, args);
    assert!(
        out.status.success(),
        "`{bin} {}`: {:?}\n{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn train_rejects_bad_arguments_in_one_line() {
    fails("train", &["--devices", "3"], 2, &["3 devices", "`attn.wq`"]);
    fails(
        "train",
        &["--config", "no-such.toml"],
        2,
        &["neither a built-in config (tiny, llama3-8b)"],
    );
    fails(
        "train",
        &["--model", "qwen35", "--config", "tiny"],
        2,
        &["`--config` is read for `--model llama` only"],
    );
    let dir = std::env::temp_dir().join(format!("stackscan-bad-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "layers = 4\nheadz = 8\n").unwrap();
    fails(
        "train",
        &["--config", bad.to_str().unwrap()],
        2,
        &["unknown field `headz`", "bad.toml"],
    );
    std::fs::remove_dir_all(&dir).unwrap();
    fails("train", &["--unroll", "0"], 2, &["unroll"]);
    fails("train", &["--unroll", "3"], 2, &["unroll"]);
    fails("train", &["--steps", "0"], 2, &["--steps"]);
    fails("train", &["--save-every", "0"], 2, &["--save-every"]);
    fails("train", &["--resume"], 2, &["--resume"]);
    fails("train", &["--devices"], 2, &["--devices"]);
    fails("train", &["--devices", "-1"], 2, &["--devices"]);
    fails("train", &["--frobnicate"], 2, &["--frobnicate"]);
    fails(
        "train",
        &["--model", "qwen"],
        2,
        &["unknown model `qwen`", "`deepseek3`"],
    );
    fails("train", &["--model"], 2, &["--model"]);
    for lr in ["0", "-1", "nan", "inf"] {
        fails("train", &["--lr", lr], 2, &["--lr"]);
    }
}

#[test]
fn train_rejects_bad_plugins_in_one_line() {
    fails(
        "train",
        &["--plugin", "/nonexistent/plugin.so"],
        1,
        &["no PJRT plugin"],
    );
    fails("train", &["--plugin", "gpu"], 1, &["unknown plugin `gpu`"]);
    let cpu = stackscan_runtime::plugin::resolve("cpu").expect("the cpu plugin");
    let dir = std::env::temp_dir().join(format!("stackscan-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let cut = dir.join("cut.so");
    std::fs::copy(&cpu, &cut).expect("copy the plugin");
    let len = std::fs::metadata(&cut).expect("size").len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&cut)
        .and_then(|f| f.set_len(len / 5))
        .expect("truncate");
    let path = cut.to_str().expect("a UTF-8 path");
    fails("train", &["--plugin", path], 1, &["truncated"]);
    std::fs::remove_dir_all(dir).expect("clean up");
}

#[test]
fn train_one_step_succeeds() {
    let stdout = succeeds("train", &["--steps", "1", "--devices", "2"]);
    assert!(stdout.contains("step   1  loss"), "{stdout}");
    // The macro-declared model trains, with the options its attribute declares.
    assert!(stdout.contains("declared with the macros"), "{stdout}");
    assert!(
        stdout.contains(
            "prefetch_fsdp_weights=true defer_grad_reduce_scatter=true unroll=2 (from the `#[layer_stack]` attribute)"
        ),
        "{stdout}"
    );
}

#[test]
fn train_flags_override_the_attribute_and_say_so() {
    let stdout = succeeds(
        "train",
        &[
            "--steps",
            "1",
            "--devices",
            "1",
            "--no-defer",
            "--unroll",
            "1",
        ],
    );
    assert!(
        stdout.contains(
            "prefetch_fsdp_weights=true defer_grad_reduce_scatter=false unroll=1 (from the `#[layer_stack]` attribute, overridden by --no-defer, --unroll 1)"
        ),
        "{stdout}"
    );
}

#[test]
fn plan_lists_hierarchical_parameters() {
    let stdout = succeeds("plan", &["llama", "--params"]);
    let line = |path: &str| {
        stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(path))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|| panic!("no `{path}` in {stdout}"))
    };
    assert_eq!(line("embed"), "embed ×1 [128256, 4096] f32 shard 0");
    assert_eq!(
        line("layers.attn.wq"),
        "layers.attn.wq ×32 [4096, 4096] f32 shard 0"
    );
    assert_eq!(
        line("layers.mlp_norm"),
        "layers.mlp_norm ×32 [4096] f32 replicated"
    );
    assert_eq!(
        line("layers.mlp.w_down"),
        "layers.mlp.w_down ×32 [14336, 4096] f32 shard 0"
    );
    // Llama-3-8B's published count: 8.03 B.
    assert!(stdout.contains("\n8030261248 parameters"), "{stdout}");
    fails("plan", &["qwen35", "--params"], 2, &["--params"]);
}

#[test]
fn bench_rejects_bad_arguments_before_running() {
    fails(
        "bench",
        &["--steps", &usize::MAX.to_string()],
        2,
        &["--steps"],
    );
    fails("bench", &["--steps", "0"], 2, &["--steps"]);
    fails("bench", &["--devices", "3"], 2, &["3 devices"]);
    fails("bench", &["--steps"], 2, &["needs a value"]);
    // An unwritable destination fails before anything is measured (the only line printed is
    // the error), and leaves nothing behind.
    fails(
        "bench",
        &["--out", "/nonexistent-dir/bench.json"],
        2,
        &["/nonexistent-dir/bench.json"],
    );
}

#[test]
fn collectives_reject_bad_counts_and_agree_on_many_devices() {
    fails("collectives", &["--devices", "0"], 2, &["--devices"]);
    fails(
        "collectives",
        &["--devices", "4294967298"],
        1,
        &["cpu_device_count"],
    );
    // 300 devices: the reduce-scatter's f32 sums round differently from the host's; equal
    // within the summation's error bound (false mismatches before).
    let stdout = succeeds("collectives", &["--devices", "300"]);
    assert!(!stdout.contains("MISMATCH"), "{stdout}");
    assert_eq!(stdout.matches(" ok\n").count(), 300, "{stdout}");
}

#[test]
fn plan_rejects_bad_arguments_in_one_line() {
    fails("plan", &[], 2, &["usage"]);
    fails("plan", &["gpt"], 2, &["unknown stack `gpt`"]);
    fails("plan", &["llama", "--frobnicate"], 2, &["--frobnicate"]);
    fails("plan", &["llama", "--unroll", "x"], 2, &["--unroll"]);
}
