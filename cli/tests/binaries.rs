//! The binaries as a user runs them: bad input ends in one line on stderr and a non-zero exit
//! status, never a signal (SIGSEGV at exit and SIGBUS in `dlopen` before), and the cases that
//! used to fail for no reason (`--steps 1`, many devices) succeed. `train` is the main job's
//! alias of `stackscan train`; every other command runs as `stackscan <command>`.

mod common;

use std::process::Output;

use common::{command, fails, run, run_with_cache, succeeds};

#[test]
fn train_rejects_bad_arguments_in_one_line() {
    fails("train", &["--devices", "3"], 2, &["3 devices", "`attn.wq`"]);
    fails(
        "train",
        &["--config", "no-such.toml"],
        2,
        &["neither a built-in config (tiny, llama3-8b, llama3.2-1b, tiny-swa, mistral-7b)"],
    );
    fails(
        "train",
        &["--model", "qwen35", "--config", "no-such"],
        2,
        &["neither a built-in config (tiny, qwen35-35b-a3b)"],
    );
    fails(
        "train",
        &["--model", "deepseek3", "--config", "llama3-8b"],
        2,
        &["neither a built-in config (tiny, deepseek3)"],
    );
    // The published sizes build (for `params`, `plan`) but are refused before anything is
    // allocated: each device holds its quarter of the 671 B f32 weights, their two moments
    // and their gradients.
    fails(
        "train",
        &["--model", "deepseek3", "--config", "deepseek3"],
        2,
        &["1342.1 GB Adam moments, 671.0 GB weights, 671.0 GB gradients"],
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
    // A step whose activations alone are far beyond any machine's memory is refused before
    // anything compiles, its needs broken down and the flags to change named.
    fails(
        "train",
        &["--seq", "1000000", "--batch", "64"],
        2,
        &[
            "needs about",
            "on each of 4 devices",
            "saved layer inputs",
            "`--seq`",
            "`--no-memory-check`",
        ],
    );
    // A value error names its flag, a negative number included; a flag that would do nothing
    // in the combination given is refused with the reason.
    fails(
        "train",
        &["--warmup-steps", "-1"],
        2,
        &["'-1'", "--warmup-steps"],
    );
    fails(
        "train",
        &["--eval-every", "-1"],
        2,
        &["'-1'", "--eval-every"],
    );
    fails(
        "train",
        &["--warmup-steps", "3"],
        2,
        &[
            "`--warmup-steps` shapes a decaying schedule",
            "--lr-schedule cosine",
        ],
    );
    fails(
        "train",
        &["--lr-min", "0.001"],
        2,
        &["`--lr-min` shapes a decaying schedule"],
    );
    fails(
        "train",
        &["--tokenizer", "tokenizer.json"],
        2,
        &["`--tokenizer` tokenizes the text of `--data` and `--eval-data`"],
    );
    fails(
        "train",
        &["--no-decay", "*norm*"],
        2,
        &["`--no-decay` spares weights", "`--weight-decay`"],
    );
    fails(
        "train",
        &["--weight-decay", "0.1", "--no-decay", "layers.atn.*"],
        2,
        &[
            "`--no-decay layers.atn.*` names no weight",
            "layers.attn.wq",
        ],
    );
    fails(
        "train",
        &["--model", "qwen"],
        2,
        &["unknown model `qwen`", "`deepseek3`"],
    );
    fails("train", &["--model"], 2, &["--model"]);
    let ep =
        |ep: &'static str, model: &'static str| ["--model", model, "--devices", "8", "--ep", ep];
    fails(
        "train",
        &ep("3", "deepseek3"),
        2,
        &["--ep 3", "divide the 8 devices"],
    );
    fails("train", &ep("0", "deepseek3"), 2, &["--ep"]);
    fails(
        "train",
        &ep("2", "llama"),
        2,
        &["--ep 2", "no routed experts"],
    );
    fails("train", &["--ep", "x"], 2, &["--ep"]);
    fails(
        "train",
        &["--model", "llama", "--dlhs-transpose-rhs"],
        2,
        &["--dlhs-transpose-rhs", "no routed experts"],
    );
    fails(
        "train",
        &["--direct-token-gather", "--dlhs-transpose-rhs"],
        2,
        &[
            "--direct-token-gather, --dlhs-transpose-rhs",
            "no routed experts",
        ],
    );
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
    let out = run("train", &["--steps", "1", "--devices", "2"]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Progress on stderr, one plain line per step as stderr is not a terminal here.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("step 1/1  loss "), "{stderr}");
    assert!(stderr.contains(" tok/s | "), "{stderr}");
    assert!(stdout.contains("loss "), "{stdout}");
    // The macro-declared model trains, with the options its attribute declares.
    assert!(stdout.contains("declared with the macros"), "{stdout}");
    assert!(
        stdout.contains(
            "prefetch_fsdp_weights=true defer_grad_reduce_scatter=true unroll=2 precision=f32 (from the `#[layer_stack]` attribute)"
        ),
        "{stdout}"
    );
}

/// A second run of the main job loads its step from the compile cache and trains the same.
#[test]
fn a_second_train_run_compiles_nothing() {
    let cache = std::env::temp_dir().join(format!("stackscan-train-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    let args = ["--steps", "1", "--devices", "2"];
    let stdout = |out: Output| {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // The summary's `loss 6.3063 -> 6.3063`: the losses, not the times.
    let losses = |s: &str| -> Vec<String> {
        s.lines()
            .filter(|l| l.starts_with("loss "))
            .map(str::to_owned)
            .collect()
    };
    let first = stdout(run_with_cache("train", &args, &cache));
    assert!(
        first.contains("not in the compile cache; compiled and stored"),
        "{first}"
    );
    let second = stdout(run_with_cache("train", &args, &cache));
    assert!(
        second.contains("loaded from the compile cache, nothing compiled"),
        "{second}"
    );
    assert_eq!(losses(&first), losses(&second));
    assert_eq!(losses(&first).len(), 1, "{first}");
    std::fs::remove_dir_all(&cache).expect("clean up");
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
            "prefetch_fsdp_weights=true defer_grad_reduce_scatter=false unroll=1 precision=f32 (from the `#[layer_stack]` attribute, overridden by --no-defer, --unroll 1)"
        ),
        "{stdout}"
    );
}

#[test]
fn plan_lists_hierarchical_parameters() {
    let stdout = succeeds("params", &["llama"]);
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
    // DeepSeek-V3 (dense prefix `D`, MoE layers `M`): 671 B.
    let stdout = succeeds("params", &["deepseek3"]);
    let line = |path: &str| {
        stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(path))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|| panic!("no `{path}` in {stdout}"))
    };
    assert_eq!(
        line("layers.D.attn.kv_up"),
        "layers.D.attn.kv_up ×3 [512, 32768] f32 shard 0"
    );
    assert_eq!(
        line("layers.M.moe.experts.down"),
        "layers.M.moe.experts.down ×58 [256, 2048, 7168] f32 shard 0"
    );
    assert_eq!(
        line("layers.M.moe.shared.w_up"),
        "layers.M.moe.shared.w_up ×58 [7168, 2048] f32 shard 0"
    );
    assert!(stdout.contains("\n671026419200 parameters"), "{stdout}");
    let tiny = succeeds("params", &["deepseek3", "--config", "tiny"]);
    assert!(tiny.contains("\n2896720 parameters"), "{tiny}");
}

#[test]
fn params_lists_qwen35_with_hierarchical_names_and_its_active_count() {
    let stdout = succeeds("params", &["qwen35"]);
    let line = |path: &str| {
        stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(path))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|| panic!("no `{path}` in {stdout}"))
    };
    assert_eq!(
        line("layers.GDN.mixer.conv"),
        "layers.GDN.mixer.conv ×30 [4, 8192] f32 shard 1"
    );
    assert_eq!(
        line("layers.attention.mixer.wq"),
        "layers.attention.mixer.wq ×10 [2048, 8192] f32 shard 0"
    );
    assert_eq!(
        line("layers.GDN.moe.experts.down"),
        "layers.GDN.moe.experts.down ×30 [256, 512, 2048] f32 shard 0"
    );
    assert_eq!(
        line("layers.attention.moe.shared_gate"),
        "layers.attention.moe.shared_gate ×10 [2048, 1] f32 shard 0"
    );
    // By hand: routed experts 40 · 256 · 3 · 2048 · 512 = 32,212,254,720; embedding and head
    // 2 · 248,320 · 2048 = 1,017,118,720; per GDN layer 37,394,624 (× 30), per attention
    // layer 30,939,648 (× 10); the final norm 2048. Active: all but 248/256 of the experts.
    assert!(stdout.contains("\n34660610688 parameters"), "{stdout}");
    assert!(
        stdout.contains("\n3454988928 active per token (top-8 of 256 routed experts)"),
        "{stdout}"
    );
    let tiny = succeeds("params", &["qwen35", "--config", "tiny"]);
    let tiny_wq = tiny
        .lines()
        .find(|l| l.starts_with("layers.GDN.mixer.wq "))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "));
    assert_eq!(
        tiny_wq.as_deref(),
        Some("layers.GDN.mixer.wq ×6 [128, 128] f32 shard 0"),
        "{tiny}"
    );
    fails(
        "params",
        &["qwen35", "--config", "no-such"],
        2,
        &["neither a built-in config (tiny, qwen35-35b-a3b)"],
    );
}

/// Requires a rejection by the argument parser: status 2, no signal, clap's `error: …` first
/// line (its usage lines follow) naming every string of `says`.
fn rejected(bin: &str, args: &[&str], says: &[&str]) {
    let (stderr, shown) = common::exits(bin, args, 2);
    let first = stderr.lines().next().unwrap_or_default();
    assert!(first.starts_with("error: "), "{shown}");
    for s in says {
        assert!(first.contains(s), "no `{s}` in {shown}");
    }
}

#[test]
fn bench_rejects_bad_arguments_before_running() {
    rejected("bench", &["--steps", &usize::MAX.to_string()], &["--steps"]);
    rejected("bench", &["--steps", "0"], &["--steps"]);
    rejected("bench", &["--steps"], &["--steps"]);
    rejected("bench", &["--options", "fast"], &["fast"]);
    fails(
        "bench",
        &["--devices", "3"],
        2,
        &["--batch 16", "--devices 3"],
    );
    fails(
        "bench",
        &["--devices", "3", "--batch", "12"],
        2,
        &["3 devices"],
    );
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
    // Beyond the CPU plugin's limit: refused by the parser, before any plugin is loaded.
    fails(
        "collectives",
        &["--devices", "4294967298"],
        2,
        &["--devices", "1 to 4096"],
    );
    // 300 devices: the reduce-scatter's f32 sums round differently from the host's; equal
    // within the summation's error bound (false mismatches before).
    let stdout = succeeds("collectives", &["--devices", "300"]);
    assert!(!stdout.contains("MISMATCH"), "{stdout}");
    assert_eq!(stdout.matches(" ok\n").count(), 300, "{stdout}");
}

#[test]
fn plan_rejects_bad_arguments_in_one_line() {
    // No stack named: the first model the command line knows.
    let first = succeeds("plan", &[]);
    assert!(
        first.starts_with("options from") && first.contains("llama: 32 layers"),
        "{first}"
    );
    fails(
        "plan",
        &["gpt"],
        2,
        &[
            "invalid value 'gpt'",
            "[STACK]",
            "expected one of `llama`, `deepseek3`, `qwen35`",
        ],
    );
    fails("plan", &["llama", "--frobnicate"], 2, &["--frobnicate"]);
    fails("plan", &["llama", "--unroll", "x"], 2, &["--unroll"]);
}

#[test]
fn help_lists_the_commands_and_explains_each_flag() {
    let top = succeeds("--help", &[]);
    for cmd in [
        "train",
        "plan",
        "params",
        "bench",
        "calibrate",
        "timeline",
        "collectives",
    ] {
        assert!(top.contains(&format!("\n  {cmd} ")), "no `{cmd}` in {top}");
    }
    assert!(top.contains("-v, --verbose"), "{top}");
    let train = succeeds("train", &["--help"]);
    assert!(train.starts_with("Train a tiny model"), "{train}");
    assert!(
        train.contains("Usage: stackscan train [OPTIONS]"),
        "{train}"
    );
    // Every flag of `train` with its explanation, the shared ones included.
    for flag in [
        "--model <NAME>",
        "--plugin <NAME|PATH>",
        "--devices <N>",
        "--no-prefetch",
        "--unroll <1|2>",
        "--lr <LR>",
        "--data <PATH>",
        "--data-format <u16|u32|bytes>",
        "--metrics <FILE>",
        "--plot <FILE>",
        "--save-every <N>",
        "--resume <DIR>",
        "--direct-token-gather",
        "--dlhs-transpose-rhs",
        "--quiet",
    ] {
        let line = train
            .lines()
            .find(|l| l.contains(flag))
            .unwrap_or_else(|| panic!("no `{flag}` in {train}"));
        assert!(
            line.trim_start().len() > flag.len() + 20,
            "`{flag}` is not explained: {line}"
        );
    }
}

/// The CPU plugin's log line on creating a client with `cpu_device_count`.
const XLA_INFO: &str = "cpu_device_count set via create_options";

#[test]
fn xla_info_lines_are_silenced_by_default_and_shown_with_verbose() {
    let quiet = command("collectives", &["--devices", "2"])
        .env_remove("TF_CPP_MIN_LOG_LEVEL")
        .output()
        .expect("start");
    assert!(quiet.status.success(), "{quiet:?}");
    let stderr = String::from_utf8_lossy(&quiet.stderr);
    assert!(!stderr.contains(XLA_INFO), "{stderr}");
    assert!(!stderr.contains("absl::InitializeLog"), "{stderr}");
    // No line of the plugin's at all (`I0000 …`, `W0000 …` with a source file).
    assert!(!stderr.contains(".cc:"), "{stderr}");
    let verbose = command("collectives", &["--devices", "2", "-v"])
        .env_remove("TF_CPP_MIN_LOG_LEVEL")
        .output()
        .expect("start");
    assert!(verbose.status.success(), "{verbose:?}");
    let stderr = String::from_utf8_lossy(&verbose.stderr);
    assert!(stderr.contains(XLA_INFO), "{stderr}");
}

/// A fresh directory for one test's files.
fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("stackscan-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn utf8(p: &std::path::Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

/// The losses of a `--metrics` file, by step.
fn metric_losses(path: &std::path::Path) -> Vec<(usize, f32, u64)> {
    let lines = stackscan_cli::metrics::read(path).expect("metrics");
    lines
        .iter()
        .map(|m| (m.step, m.loss.expect("finite"), m.data_position))
        .collect()
}

#[test]
fn train_on_a_token_file_writes_metrics_and_a_plot_and_resumes_on_its_data() {
    let dir = scratch("data");
    // nanoGPT's format: little-endian u16, here a repeating pattern the tiny Llama (vocab
    // 512) can learn; 4096 tokens = 63 windows of 64 + 1.
    let data = dir.join("train.bin");
    let ids: Vec<u8> = (0..4096u32)
        .flat_map(|i| (((i * 7) % 97) as u16 + 3).to_le_bytes())
        .collect();
    std::fs::write(&data, ids).expect("write the tokens");
    let (metrics, plot, ckpt) = (dir.join("a.jsonl"), dir.join("loss.svg"), dir.join("ckpt"));
    let first = [
        "--steps",
        "3",
        "--devices",
        "2",
        "--data",
        utf8(&data),
        "--metrics",
        utf8(&metrics),
        "--plot",
        utf8(&plot),
        "--save-every",
        "2",
        "--checkpoint-dir",
        utf8(&ckpt),
    ];
    let stdout = succeeds("train", &first);
    assert!(
        stdout.contains(&format!(
            "data: {} (4096 u16 tokens, 63 sequences per pass)",
            data.display()
        )),
        "{stdout}"
    );
    let a = metric_losses(&metrics);
    // Two devices of batch 2 each: 2 device batches per step.
    let positions: Vec<u64> = a.iter().map(|m| m.2).collect();
    assert_eq!(positions, [2, 4, 6]);
    assert_eq!(a.iter().map(|m| m.0).collect::<Vec<_>>(), [1, 2, 3]);
    // The plot is SVG with one polyline of the three steps.
    let svg = std::fs::read_to_string(&plot).expect("the plot");
    let mut points = None;
    for event in svg::read(&svg).expect("parse the SVG") {
        if let svg::parser::Event::Tag("polyline", _, attrs) = event {
            points = attrs.get("points").map(|v| v.to_string());
        }
    }
    let points = points.expect("a polyline");
    assert_eq!(points.split_whitespace().count(), 3, "{points}");

    // Resumed from the step-2 checkpoint, step 3 reads the same batches and gives the
    // same loss, bit for bit.
    let resumed = dir.join("b.jsonl");
    succeeds(
        "train",
        &[
            "--steps",
            "3",
            "--devices",
            "2",
            "--data",
            utf8(&data),
            "--metrics",
            utf8(&resumed),
            "--resume",
            utf8(&ckpt),
        ],
    );
    let b = metric_losses(&resumed);
    assert_eq!(b.len(), 1, "{b:?}");
    assert_eq!(b[0].0, 3);
    assert_eq!(b[0].1.to_bits(), a[2].1.to_bits(), "{a:?} vs {b:?}");
    assert_eq!(b[0].2, 6);
    std::fs::remove_dir_all(dir).expect("clean up");
}

#[test]
fn bad_token_files_are_refused_before_the_plugin_loads() {
    let dir = scratch("bad-data");
    // Token 70 of 100 is 600, outside the tiny Llama's vocabulary of 512.
    let ids: Vec<u8> = (0..100u16)
        .flat_map(|i| if i == 70 { 600u16 } else { i }.to_le_bytes())
        .collect();
    let big = dir.join("big.bin");
    std::fs::write(&big, ids).expect("write");
    fails(
        "train",
        &["--data", utf8(&big)],
        2,
        &["token 70 is 600", "vocabulary of 512", "big.bin"],
    );
    let odd = dir.join("odd.bin");
    std::fs::write(&odd, [1u8, 0, 2]).expect("write");
    fails(
        "train",
        &["--data", utf8(&odd)],
        2,
        &["not a whole number of u16 tokens"],
    );
    // Text is read as bytes: 20 bytes are too few for one sequence of 64.
    let text = dir.join("short.txt");
    std::fs::write(&text, "twenty bytes of text").expect("write");
    fails(
        "train",
        &["--data", utf8(&text)],
        2,
        &["holds 20 tokens (bytes)", "65"],
    );
    fails(
        "train",
        &["--data", utf8(&dir.join("missing.bin"))],
        2,
        &["missing.bin"],
    );
    fails("train", &["--data-format", "u16"], 2, &["--data"]);
    std::fs::remove_dir_all(dir).expect("clean up");
}

/// The CUDA plugin on a machine without a GPU (`.ci/run` fetches its wheel): the client
/// every command makes gives it its own options, so it fails only for want of a GPU, not on
/// the CPU plugins' `cpu_device_count`.
#[test]
fn the_cuda_plugin_fails_only_for_want_of_a_gpu() {
    use stackscan_runtime::plugin;
    if std::path::Path::new("/dev/nvidia0").exists() {
        eprintln!("skipped: this machine has an NVIDIA GPU");
        return;
    }
    if let Err(e) = plugin::ensure_installed(&plugin::CUDA, &plugin::cache_dir(), false) {
        eprintln!("skipped: the `cuda` plugin is not in the cache ({e})");
        return;
    }
    let out = run(
        "train",
        &[
            "--plugin",
            "cuda",
            "--devices",
            "1",
            "--steps",
            "1",
            "--gpu-memory-fraction",
            "0.5",
            "--gpu-preallocate",
            "false",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let error = stderr
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_default();
    assert!(
        error.contains("No visible GPU devices") && !error.contains("option"),
        "{stderr}"
    );
}

/// `--eval-data` evaluates the current weights every `--eval-every` steps and at the end: a
/// report line and a metrics line each, the perplexity the loss's exponential.
#[test]
fn train_evaluates_held_out_data() {
    let dir = scratch("eval");
    let text = dir.join("held-out.txt");
    std::fs::write(&text, "held-out text, read as bytes. ".repeat(200)).unwrap();
    let metrics = dir.join("m.jsonl");
    let stdout = succeeds(
        "train",
        &[
            "--steps",
            "3",
            "--eval-data",
            utf8(&text),
            "--eval-every",
            "2",
            "--eval-batches",
            "1",
            "--metrics",
            utf8(&metrics),
            "--quiet",
        ],
    );
    for step in [2, 3] {
        assert!(
            stdout.contains(&format!("eval after step {step}: loss ")),
            "{stdout}"
        );
    }
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&metrics)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|v: &serde_json::Value| v.get("eval_loss").is_some())
        .collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    for v in &lines {
        let (loss, ppl) = (
            v["eval_loss"].as_f64().unwrap(),
            v["eval_perplexity"].as_f64().unwrap(),
        );
        assert!(
            loss.is_finite() && (ppl - loss.exp()).abs() < 1e-9 * ppl,
            "{v}"
        );
    }
    // On `--data`, evaluation needs its own held-out file.
    fails(
        "train",
        &["--data", utf8(&text), "--eval-every", "2"],
        2,
        &["`--eval-every`", "`--eval-data`"],
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// On synthetic batches `--eval-every` alone evaluates (on batches training never reads).
#[test]
fn train_evaluates_held_out_synthetic_batches() {
    let stdout = succeeds(
        "train",
        &[
            "--steps",
            "2",
            "--eval-every",
            "1",
            "--eval-batches",
            "1",
            "--quiet",
        ],
    );
    for step in [1, 2] {
        assert!(
            stdout.contains(&format!("eval after step {step}: loss ")),
            "{stdout}"
        );
    }
}

/// `--accumulate 2` of half the batch trains on the same windows of a token file as the whole
/// batch in one micro-batch, so every step's loss is the same to rounding; the data position
/// advances by the same amount.
#[test]
fn train_accumulates_micro_batches_into_the_whole_batch() {
    let dir = scratch("accumulate");
    let text = dir.join("train.txt");
    std::fs::write(&text, "accumulated micro-batches, one update. ".repeat(100)).unwrap();
    let run_with = |name: &str, extra: &[&str]| -> Vec<serde_json::Value> {
        let metrics = dir.join(name);
        let mut args = vec![
            "--steps",
            "3",
            "--seq",
            "16",
            "--data",
            utf8(&text),
            "--metrics",
            utf8(&metrics),
            "--quiet",
        ];
        args.extend_from_slice(extra);
        let stdout = succeeds("train", &args);
        if extra.contains(&"--accumulate") {
            assert!(
                stdout.contains("gradient accumulation: 2 micro-batches of 4 sequences"),
                "{stdout}"
            );
        }
        std::fs::read_to_string(&metrics)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let whole = run_with("whole.jsonl", &["--batch", "8"]);
    let micro = run_with("micro.jsonl", &["--batch", "4", "--accumulate", "2"]);
    assert_eq!(whole.len(), 3);
    assert_eq!(micro.len(), 3);
    for (w, m) in whole.iter().zip(&micro) {
        let (a, b) = (w["loss"].as_f64().unwrap(), m["loss"].as_f64().unwrap());
        assert!((a - b).abs() <= 1e-4 * a, "step {}: {a} vs {b}", w["step"]);
        assert_eq!(
            w["data_position"].as_u64().unwrap() * 2,
            m["data_position"].as_u64().unwrap()
        );
        assert_eq!(w["tokens"], m["tokens"]);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A run that trains succeeds; `--expect-loss-fall` makes a loss that did not fall a failure.
/// At a learning rate of 3 the tiny Llama diverges.
#[test]
fn the_loss_fell_check_is_asked_for() {
    let still = ["--steps", "6", "--lr", "3", "--quiet"];
    succeeds("train", &still);
    let mut expect = still.to_vec();
    expect.push("--expect-loss-fall");
    let out = run("train", &expect);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("did not fall"), "{stderr}");
    fails(
        "train",
        &["--weight-decay", "-1", "--steps", "1"],
        2,
        &["weight_decay"],
    );
}

/// Every command takes the model as `--model NAME` (`plan` and `params` also as their
/// positional); `train` takes the token shape as `bench` does.
#[test]
fn the_model_is_named_one_way_and_train_takes_batch_and_seq() {
    assert_eq!(
        succeeds("plan", &["--model", "deepseek3"]),
        succeeds("plan", &["deepseek3"])
    );
    assert_eq!(
        succeeds("params", &["--model", "qwen35", "--config", "tiny"]),
        succeeds("params", &["qwen35", "--config", "tiny"])
    );
    fails(
        "plan",
        &["deepseek3", "--model", "llama"],
        2,
        &["'[STACK]' cannot be used with '--model <NAME>'"],
    );
    let stdout = succeeds(
        "train",
        &[
            "--batch",
            "8",
            "--seq",
            "16",
            "--steps",
            "1",
            "--devices",
            "4",
        ],
    );
    assert!(
        stdout.contains("; 2 × 16 tokens per device on 4 cpu devices"),
        "{stdout}"
    );
    fails(
        "train",
        &["--batch", "6", "--devices", "4", "--steps", "1"],
        2,
        &["`--batch 6` does not split over `--devices 4`"],
    );
}

#[test]
fn plan_takes_the_stacks_own_options_and_says_which_flags_override_them() {
    // The declared Llama stack's attribute: prefetch and deferred reduce-scatter, unroll 2, at
    // Llama-3-8B's depth read from its config.
    let stdout = succeeds("plan", &["llama"]);
    assert!(
        stdout.contains("options from the `#[layer_stack]` attribute\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "llama: 32 layers, prefetch_fsdp_weights=true, defer_grad_reduce_scatter=true, unroll=2, precision=f32"
        ),
        "{stdout}"
    );
    let stdout = succeeds("plan", &["deepseek3", "--no-defer", "--unroll", "1"]);
    assert!(
        stdout.contains(
            "options from the `#[layer_stack]` attribute, overridden by --no-defer, --unroll 1"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "deepseek3: 61 layers, prefetch_fsdp_weights=true, defer_grad_reduce_scatter=false, unroll=1, precision=f32"
        ),
        "{stdout}"
    );
}

#[test]
fn plan_predicts_the_step_time_under_its_options() {
    let stdout = succeeds(
        "plan",
        &[
            "deepseek3",
            "--predict",
            "--hardware",
            "tpu7x",
            "--chips",
            "64",
            "--ep",
            "4",
        ],
    );
    let line = stdout
        .lines()
        .find(|l| l.starts_with("predicted step on 64 × TPU7x, EP 4: "))
        .unwrap_or_else(|| panic!("no prediction in:\n{stdout}"));
    // `…: <on> ms (…); prefetch off <off> ms (<change> %)`: on is faster than off.
    let number_after = |marker: &str| -> f64 {
        let rest = &line[line.find(marker).unwrap() + marker.len()..];
        rest.split_whitespace().next().unwrap().parse().unwrap()
    };
    let (on, off) = (number_after("EP 4: "), number_after("prefetch off "));
    assert!(on < off, "{line}");
    // Without prefetch the plan's own options are the baseline: no change.
    let stdout = succeeds(
        "plan",
        &["llama", "--no-prefetch", "--predict", "--chips", "8"],
    );
    assert!(stdout.contains("(+0.0 %)"), "{stdout}");
    fails(
        "plan",
        &["llama", "--predict", "--ep", "2"],
        1,
        &["`--ep 2`", "no experts"],
    );
    fails(
        "plan",
        &["llama", "--predict", "--chips", "x"],
        2,
        &["--chips"],
    );
    fails(
        "plan",
        &["llama", "--predict", "--chips", "0"],
        2,
        &["--chips"],
    );
    // The prediction's own flags need `--predict`; the chips and their hardware also say
    // what the memory estimate is per.
    fails("plan", &["llama", "--ep", "2"], 2, &["--predict"]);
    let stdout = succeeds("plan", &["llama", "--chips", "8"]);
    assert!(
        stdout.contains("memory per device, FSDP over 16 devices (8 tpu7x chips)"),
        "{stdout}"
    );
    // The simulator overlaps each prefetch with the layer before it: a prefetch issued
    // after the layer is not priced as if it did.
    fails(
        "plan",
        &["llama", "--predict", "--prefetch-issue", "after-compute"],
        2,
        &["`--predict`", "after-compute"],
    );
    // `timeline`'s counts are checked by the parser too.
    fails("timeline", &["--chips", "0"], 2, &["--chips"]);
    fails("timeline", &["--ep", "0"], 2, &["--ep"]);
    fails("timeline", &["--batch", "0"], 2, &["--batch"]);
    fails("timeline", &["--layers", "0"], 2, &["--layers"]);
}

/// `train --init-from` a Hugging Face directory, save, `export` the checkpoint as one, and
/// train from the export: the whole round trip through the command line.
#[test]
fn hugging_face_weights_in_and_out_through_the_command_line() {
    let dir = scratch("hf");
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf/llama");
    let (ckpt, hf) = (dir.join("ckpt"), dir.join("hf"));
    let stdout = succeeds(
        "train",
        &[
            "--init-from",
            utf8(&fixture),
            "--steps",
            "2",
            "--batch",
            "4",
            "--save-every",
            "2",
            "--checkpoint-dir",
            utf8(&ckpt),
            "--quiet",
        ],
    );
    assert!(stdout.contains("weights from"), "{stdout}");
    // The checkpoint records the model and the config read from the directory, its special
    // tokens included: the export needs neither `--model` nor `--config`, and writes them back.
    let stdout = succeeds("export", &["--checkpoint", utf8(&ckpt), "--to", utf8(&hf)]);
    assert!(stdout.contains("wrote 21 tensors"), "{stdout}");
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(hf.join("config.json")).unwrap()).unwrap();
    let theirs: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture.join("config.json")).unwrap())
            .unwrap();
    assert_eq!(written["architectures"][0], "LlamaForCausalLM");
    for key in ["num_hidden_layers", "bos_token_id", "eos_token_id"] {
        assert_eq!(written[key], theirs[key], "{key}");
    }
    succeeds(
        "train",
        &[
            "--init-from",
            utf8(&hf),
            "--steps",
            "1",
            "--batch",
            "4",
            "--quiet",
        ],
    );
    // A checkpoint of another model is refused naming both; a model without a map says so.
    fails(
        "export",
        &[
            "--model",
            "deepseek3",
            "--checkpoint",
            utf8(&ckpt),
            "--to",
            utf8(&hf),
        ],
        2,
        &["is of the model `llama`, not `deepseek3`"],
    );
    fails(
        "export",
        &[
            "--model",
            "llama",
            "--config",
            "tiny-swa",
            "--checkpoint",
            utf8(&ckpt),
            "--to",
            utf8(&hf),
        ],
        2,
        &["sliding window (16 positions) has no Hugging Face counterpart"],
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `eval` of a saved checkpoint reports the loss `train` reported for the same weights on the
/// same held-out batches; a Hugging Face directory evaluates too.
#[test]
fn eval_reports_the_loss_train_reported_for_the_same_weights() {
    let dir = scratch("evalcmd");
    let text = dir.join("held-out.txt");
    std::fs::write(&text, "held-out text for eval, read as bytes. ".repeat(200)).unwrap();
    let ckpt = dir.join("ckpt");
    let stdout = succeeds(
        "train",
        &[
            "--steps",
            "2",
            "--save-every",
            "2",
            "--checkpoint-dir",
            utf8(&ckpt),
            "--eval-data",
            utf8(&text),
            "--eval-batches",
            "3",
            "--quiet",
        ],
    );
    let reported = |out: &str, after: &str| -> f64 {
        let line = out
            .lines()
            .find(|l| l.contains(after))
            .unwrap_or_else(|| panic!("{out}"));
        let loss = line
            .split("loss ")
            .nth(1)
            .unwrap()
            .split(',')
            .next()
            .unwrap();
        loss.parse().unwrap()
    };
    let trained = reported(&stdout, "eval after step 2");
    let stdout = succeeds(
        "eval",
        &[
            "--checkpoint",
            utf8(&ckpt),
            "--data",
            utf8(&text),
            "--batches",
            "3",
        ],
    );
    let evaluated = reported(&stdout, "eval on");
    assert!(
        (trained - evaluated).abs() <= 1e-5,
        "{trained} vs {evaluated}"
    );
    // Its programs come from the compile cache: the second evaluation compiles nothing.
    let cache = dir.join("compile-cache");
    let eval_args = [
        "--checkpoint",
        utf8(&ckpt),
        "--data",
        utf8(&text),
        "--batches",
        "3",
    ];
    let first = run_with_cache("eval", &eval_args, &cache);
    assert!(first.status.success(), "{first:?}");
    // One program compiled and stored: the forward program, not the training step.
    let entries = std::fs::read_dir(&cache)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "xla"))
        })
        .count();
    assert_eq!(entries, 1, "eval compiled {entries} programs");
    let second = run_with_cache("eval", &eval_args, &cache);
    let second = String::from_utf8_lossy(&second.stdout);
    assert!(
        second.contains("loaded from the compile cache, nothing compiled")
            && reported(&second, "eval on") == evaluated,
        "{second}"
    );
    assert!(stdout.contains("perplexity"), "{stdout}");
    // A Hugging Face directory: the fixture's vocabulary is 64, so u16 ids below it.
    let ids: Vec<u8> = (0..400u16)
        .flat_map(|i| ((i * 7) % 64).to_le_bytes())
        .collect();
    let bin = dir.join("ids.bin");
    std::fs::write(&bin, ids).unwrap();
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf/llama");
    let stdout = succeeds(
        "eval",
        &[
            "--init-from",
            utf8(&fixture),
            "--data",
            utf8(&bin),
            "--batch",
            "4",
        ],
    );
    assert!(
        stdout.contains("eval on") && stdout.contains("4 batches of 4 × 8 tokens"),
        "{stdout}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--tokenizer` trains on text through a `tokenizer.json`; a missing tokenizer is one line
/// naming it.
#[test]
fn train_tokenizes_text_with_a_tokenizer() {
    let dir = scratch("tokenizer");
    let text = dir.join("corpus.txt");
    std::fs::write(
        &text,
        "the quick brown fox jumps over the lazy dog. the model reads tokens.\n".repeat(100),
    )
    .unwrap();
    let tokenizer = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/hf/tokenizer/tokenizer.json");
    let stdout = succeeds(
        "train",
        &[
            "--data",
            utf8(&text),
            "--tokenizer",
            utf8(&tokenizer),
            "--seq",
            "16",
            "--steps",
            "3",
            "--quiet",
        ],
    );
    assert!(
        stdout.contains("tokenized by") && stdout.contains("u16 tokens"),
        "{stdout}"
    );
    fails(
        "train",
        &[
            "--data",
            utf8(&text),
            "--tokenizer",
            "no-such-tokenizer.json",
        ],
        2,
        &["no-such-tokenizer.json"],
    );
    // Ids the model's vocabulary does not hold are named by the text they came from, not by
    // the token file the cache made of it.
    let small = dir.join("small-vocab.toml");
    std::fs::write(&small, "vocab = 16\n").unwrap();
    fails(
        "train",
        &[
            "--config",
            utf8(&small),
            "--data",
            utf8(&text),
            "--tokenizer",
            utf8(&tokenizer),
            "--seq",
            "16",
            "--quiet",
        ],
        2,
        &[
            &format!("`{}` tokenized by `{}`", utf8(&text), utf8(&tokenizer)),
            "16",
        ],
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
