//! The crate as its user runs it: every command of the generic command line for the model of
//! `src/main.rs`, and README's "Your own model" quoting that file whole.

use std::path::Path;
use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_my-model"))
        .args(args)
        .env("TF_CPP_MIN_LOG_LEVEL", "1")
        .env("STACKSCAN_COMPILE_CACHE", "off")
        .output()
        .expect("run my-model")
}

fn stdout_of(args: &[&str]) -> String {
    let out = run(args);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{args:?}: {stdout}\n{stderr}");
    stdout
}

#[test]
fn plan_and_params_describe_the_declared_stack() {
    let plan = stdout_of(&["plan"]);
    assert!(plan.contains("my-model: 48 layers"), "{plan}");
    assert!(
        plan.contains("[attention]") && plan.contains("[mlp 2]"),
        "{plan}"
    );
    let params = stdout_of(&["params", "--config", "tiny"]);
    for name in [
        "embed",
        "layers.attention.attn.wq",
        "layers.mlp.w_down",
        "lm_head",
    ] {
        assert!(params.contains(name), "{name}: {params}");
    }
}

#[test]
fn train_runs_the_model_and_its_loss_falls() {
    let dir = std::env::temp_dir().join(format!("my-model-train-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let metrics = dir.join("metrics.jsonl");
    let report = stdout_of(&[
        "train",
        "--devices",
        "2",
        "--steps",
        "12",
        "--quiet",
        "--metrics",
        metrics.to_str().unwrap(),
    ]);
    assert!(
        report.contains("my model: 6 layers of [attention, MLP, MLP]"),
        "{report}"
    );
    let losses: Vec<f64> = std::fs::read_to_string(&metrics)
        .unwrap()
        .lines()
        .map(|l| {
            let at = l.find("\"loss\":").unwrap() + 7;
            l[at..].split([',', '}']).next().unwrap().parse().unwrap()
        })
        .collect();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(losses.len(), 12);
    let first: f64 = losses[..3].iter().sum::<f64>() / 3.0;
    let last: f64 = losses[9..].iter().sum::<f64>() / 3.0;
    assert!(last < first - 0.1, "{losses:?}");
}

#[test]
fn timeline_prices_the_model_and_other_models_are_unknown() {
    let dir = std::env::temp_dir().join(format!("my-model-timeline-{}", std::process::id()));
    let out = stdout_of(&[
        "timeline",
        "--config",
        "tiny",
        "--hardware",
        "h200",
        "--chips",
        "4",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(out.contains("my-model"), "{out}");
    for file in ["forward.svg", "backward.svg", "schedule.json"] {
        assert!(dir.join(file).is_file(), "{file}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
    let refused = run(&["train", "--model", "llama"]);
    assert_eq!(refused.status.code(), Some(2));
    let e = String::from_utf8_lossy(&refused.stderr);
    assert!(
        e.contains("unknown model `llama`; expected one of `my-model`"),
        "{e}"
    );
}

#[test]
fn bench_measures_the_model() {
    let dir = std::env::temp_dir().join(format!("my-model-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("bench.json");
    stdout_of(&[
        "bench",
        "--layers",
        "3",
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
        "3",
        "--out",
        out.to_str().unwrap(),
    ]);
    let report = std::fs::read_to_string(&out).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    for field in [
        "\"model\": \"my-model\"",
        "\"layers\": 3",
        "\"seq\": 8",
        "\"mfu\"",
    ] {
        assert!(report.contains(field), "{field}: {report}");
    }
}

/// README's "Your own model" is this crate's `src/main.rs`, whole: a change to either
/// without the other fails here, naming the first line that differs. `BLESS=1` rewrites the
/// README's block from the file instead.
#[test]
fn the_readme_quotes_the_crate_verbatim() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme_path = root.join("../../README.md");
    let readme = std::fs::read_to_string(&readme_path).unwrap();
    let main = std::fs::read_to_string(root.join("src/main.rs")).unwrap();
    let (head, section) = readme
        .split_once("\n## Your own model\n")
        .expect("README has a section \"Your own model\"");
    let (intro, rest) = section
        .split_once("```rust\n")
        .expect("the section quotes the crate in a ```rust block");
    let (block, tail) = rest.split_once("\n```\n").expect("the ```rust block ends");
    if std::env::var_os("BLESS").is_some() {
        let blessed = format!(
            "{head}\n## Your own model\n{intro}```rust\n{}\n```\n{tail}",
            main.trim_end()
        );
        std::fs::write(&readme_path, blessed).unwrap();
        return;
    }
    let differs = block
        .lines()
        .zip(main.trim_end().lines())
        .enumerate()
        .find(|(_, (a, b))| a != b);
    assert!(
        differs.is_none() && block.lines().count() == main.trim_end().lines().count(),
        "README's \"Your own model\" and examples/my-model/src/main.rs differ (first at line \
         {:?}); `BLESS=1 cargo test -p my-model --test cli` copies the file into the README",
        differs.map(|(i, (a, b))| (i + 1, a, b))
    );
}
