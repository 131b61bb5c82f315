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

/// README's "Your own model" is this crate's `src/main.rs`, whole: a change to either
/// without the other fails here.
#[test]
fn the_readme_quotes_the_crate_verbatim() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("../../README.md")).unwrap();
    let main = std::fs::read_to_string(root.join("src/main.rs")).unwrap();
    let section = readme
        .split("\n## Your own model\n")
        .nth(1)
        .expect("README has a section \"Your own model\"");
    let block = section
        .split("```rust\n")
        .nth(1)
        .and_then(|b| b.split("\n```\n").next())
        .expect("the section quotes the crate in a ```rust block");
    assert_eq!(
        block.trim_end(),
        main.trim_end(),
        "README's \"Your own model\" and examples/my-model/src/main.rs differ"
    );
}
