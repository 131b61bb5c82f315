//! The crate as its user runs it: every command of the generic command line for the model of
//! `src/main.rs`, and `docs/declaring-a-model.md` naming the file's items.

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

/// `docs/declaring-a-model.md`'s "Your own model" points at this crate's `src/main.rs` and
/// lists its items, one bullet each, the bullet's names first (`` - `Name`: … `` or
/// `` - `A` and `B`: … ``): every name a bullet gives is declared in the file, and every
/// public type and function the file declares has its bullet, so the page and the file
/// cannot drift apart.
#[test]
fn the_docs_page_names_every_item_of_the_crate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(root.join("../../docs/declaring-a-model.md")).unwrap();
    let main = std::fs::read_to_string(root.join("src/main.rs")).unwrap();
    let section = page
        .split_once("\n## Your own model\n")
        .expect("docs/declaring-a-model.md has a section \"Your own model\"")
        .1;
    let section = section.split("\n## ").next().unwrap_or(section);
    assert!(
        section.contains("(../examples/my-model/src/main.rs)"),
        "the section must link examples/my-model/src/main.rs"
    );
    // The names each bullet starts with, before its colon.
    let listed: Vec<&str> = section
        .lines()
        .filter_map(|l| l.strip_prefix("- `"))
        .filter_map(|l| l.split_once(':').map(|(head, _)| head))
        .flat_map(|head| head.split('`').step_by(2))
        .filter(|name| !name.is_empty())
        .collect();
    assert!(listed.len() >= 5, "too few items listed: {listed:?}");
    let declares = |name: &str| {
        // An impl is listed as it is written (`impl Architecture for MyConfig`).
        if name.starts_with("impl ") {
            return main
                .lines()
                .any(|l| l.starts_with(name) && l[name.len()..].starts_with(" {"));
        }
        ["struct", "enum", "fn", "const", "static", "type"]
            .iter()
            .any(|kind| {
                main.lines().any(|l| {
                    let l = l.trim_start().trim_start_matches("pub ");
                    l.strip_prefix(kind)
                        .and_then(|rest| rest.strip_prefix(' '))
                        .is_some_and(|rest| {
                            rest.strip_prefix(name).is_some_and(|after| {
                                !after.starts_with(|c: char| c.is_alphanumeric() || c == '_')
                            })
                        })
                })
            })
    };
    let undeclared: Vec<&&str> = listed.iter().filter(|n| !declares(n)).collect();
    assert!(
        undeclared.is_empty(),
        "docs/declaring-a-model.md lists items examples/my-model/src/main.rs does not declare: \
         {undeclared:?}"
    );
    // Every public type, and `main`, has its bullet.
    let items: Vec<&str> = main
        .lines()
        .filter_map(|l| {
            l.strip_prefix("pub struct ")
                .or_else(|| l.strip_prefix("pub enum "))
                .or_else(|| l.strip_prefix("fn "))
        })
        .map(|rest| {
            rest.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .next()
                .unwrap_or(rest)
        })
        .collect();
    assert!(items.contains(&"main"), "{items:?}");
    let unlisted: Vec<&&str> = items.iter().filter(|i| !listed.contains(i)).collect();
    assert!(
        unlisted.is_empty(),
        "examples/my-model/src/main.rs declares items docs/declaring-a-model.md does not list: \
         {unlisted:?}"
    );
}

/// The f32 tensor `name` of the safetensors file `path`: its shape and values.
fn tensor(path: &Path, name: &str) -> (Vec<usize>, Vec<f32>) {
    let bytes = std::fs::read(path).unwrap();
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let t = file.tensor(name).unwrap();
    let values = t
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    (t.shape().to_vec(), values)
}

/// The model's Hugging Face side, all in `src/main.rs`: `export` writes a checkpoint as
/// `config.json` and `model.safetensors` in the model's own names and `[out, in]` layout,
/// `timeline` recognises that `config.json` among the registered models' files, and `train
/// --init-from` reads the directory back, every tensor checked against the declared model.
#[test]
fn a_hugging_face_export_is_read_back_through_the_registry() {
    let dir = std::env::temp_dir().join(format!("my-model-hf-{}", std::process::id()));
    let (ck, hf) = (dir.join("ck"), dir.join("hf"));
    let path = |p: &Path| p.to_str().unwrap().to_owned();
    stdout_of(&[
        "train",
        "--devices",
        "2",
        "--steps",
        "2",
        "--save-every",
        "2",
        "--checkpoint-dir",
        &path(&ck),
        "--quiet",
    ]);
    let report = stdout_of(&["export", "--checkpoint", &path(&ck), "--to", &path(&hf)]);
    assert!(report.contains("wrote 25 tensors"), "{report}");

    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(hf.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["model_type"], "my_model");
    assert_eq!(config["num_hidden_layers"], 6);
    // Their projections are ours transposed: the head, and the second attention layer's query
    // (stack layer 3, our stacked `wq`'s row 1).
    let saved = ck.join("latest.safetensors");
    let exported = hf.join("model.safetensors");
    let (d, vocab) = (64, 256);
    let (shape, ours) = tensor(&saved, "lm_head");
    let (their_shape, theirs) = tensor(&exported, "lm_head.weight");
    assert_eq!((shape, their_shape), (vec![d, vocab], vec![vocab, d]));
    for (i, j) in [(0, 0), (5, 17), (63, 255)] {
        assert_eq!(ours[i * vocab + j], theirs[j * d + i]);
    }
    let (_, wq) = tensor(&saved, "layers.attention.attn.wq");
    let (_, q_proj) = tensor(&exported, "model.layers.3.q_proj.weight");
    let row = &wq[d * d..2 * d * d];
    assert_eq!(row[2 * d + 7], q_proj[7 * d + 2]);

    let timeline = stdout_of(&[
        "timeline",
        "--model",
        &path(&hf.join("config.json")),
        "--chips",
        "2",
        "--out",
        &path(&dir.join("timelines")),
    ]);
    assert!(timeline.contains("predicted step"), "{timeline}");
    let imported = stdout_of(&[
        "train",
        "--devices",
        "2",
        "--steps",
        "1",
        "--batch",
        "2",
        "--init-from",
        &path(&hf),
        "--quiet",
    ]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(imported.contains("(Hugging Face)"), "{imported}");
}
