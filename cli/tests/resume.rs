//! `train --resume` on a checkpoint damaged after it was written: one flipped byte in a
//! tensor's data is refused in one line naming the tensor, before a step runs and before
//! anything is written (the checkpoint stays byte for byte as it was, no metrics file
//! appears); a checkpoint from before checksums resumes with a warning.

mod common;

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use common::{fails, run, succeeds};

/// A fresh directory for one test's files.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("stackscan-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn utf8(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

/// Trains one step of the tiny Llama on two devices, saving to `ckpt`; returns the file.
fn trained(ckpt: &Path) -> PathBuf {
    succeeds(
        "train",
        &[
            "--steps",
            "1",
            "--devices",
            "2",
            "--save-every",
            "1",
            "--checkpoint-dir",
            utf8(ckpt),
        ],
    );
    ckpt.join("latest.safetensors")
}

/// A safetensors file's header and where its data starts.
fn header(bytes: &[u8]) -> (Map<String, Value>, usize) {
    let len = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let header = serde_json::from_slice(&bytes[8..8 + len]).expect("a JSON header");
    (header, 8 + len)
}

/// The names in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_flipped_byte_in_a_tensor_stops_the_resume_before_anything_is_written() {
    let dir = scratch("resume-damaged");
    let (ckpt, metrics) = (dir.join("ckpt"), dir.join("metrics.jsonl"));
    let path = trained(&ckpt);
    let mut bytes = std::fs::read(&path).expect("the checkpoint");
    // The tensor holding the middle of the data, and in it the high byte (sign and exponent)
    // of an element: a weight of -0.0094 becomes one of about 1e17.
    let (header, data) = header(&bytes);
    let middle = (bytes.len() - data) / 2 / 4 * 4;
    let name = header
        .iter()
        .find(|(name, entry)| {
            let offsets = &entry["data_offsets"];
            *name != "__metadata__"
                && offsets[0].as_u64().expect("start") as usize <= middle
                && middle < offsets[1].as_u64().expect("end") as usize
        })
        .map(|(name, _)| name.clone())
        .expect("a tensor over the middle of the data");
    bytes[data + middle + 3] ^= 0x40;
    std::fs::write(&path, &bytes).expect("write the damaged checkpoint");

    fails(
        "train",
        &[
            "--steps",
            "3",
            "--devices",
            "2",
            "--save-every",
            "1",
            "--checkpoint-dir",
            utf8(&ckpt),
            "--metrics",
            utf8(&metrics),
            "--resume",
            utf8(&ckpt),
        ],
        2,
        &[
            "cannot resume",
            utf8(&path),
            &format!("tensor `{name}`"),
            "sha256",
        ],
    );
    assert_eq!(
        std::fs::read(&path).expect("the checkpoint"),
        bytes,
        "the refused checkpoint was overwritten"
    );
    assert_eq!(listing(&ckpt), ["latest.safetensors"]);
    assert!(!metrics.exists(), "a metrics file was written");
    std::fs::remove_dir_all(dir).expect("clean up");
}

#[test]
fn a_checkpoint_without_checksums_resumes_with_a_warning() {
    let dir = scratch("resume-old");
    let ckpt = dir.join("ckpt");
    let path = trained(&ckpt);
    let bytes = std::fs::read(&path).expect("the checkpoint");
    // The file as written before checksums: the same metadata and data without them.
    let (mut header, data) = header(&bytes);
    let meta = header
        .get_mut("__metadata__")
        .and_then(Value::as_object_mut)
        .expect("metadata");
    let before = meta.len();
    meta.retain(|k, _| !k.starts_with("stackscan.sha256."));
    assert!(meta.len() < before, "no checksums were written: {meta:?}");
    let mut json = Value::Object(header).to_string().into_bytes();
    while !json.len().is_multiple_of(8) {
        json.push(b' ');
    }
    let mut old = (json.len() as u64).to_le_bytes().to_vec();
    old.extend_from_slice(&json);
    old.extend_from_slice(&bytes[data..]);
    std::fs::write(&path, &old).expect("write the old checkpoint");

    let out = run(
        "train",
        &["--steps", "2", "--devices", "2", "--resume", utf8(&ckpt)],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}\n{stderr}", out.status);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("at step 1"),
        "{out:?}"
    );
    assert!(stderr.contains("has no checksums"), "{stderr}");
    std::fs::remove_dir_all(dir).expect("clean up");
}

/// A checkpoint of another model, and a Hugging Face directory of another size, are refused
/// before the plugin loads or anything compiles: exit 2, one line naming the tensor at fault,
/// nothing on stdout (the run's first line, the model on its devices, comes after the plugin
/// loads; the compile after that).
#[test]
fn another_models_weights_are_refused_before_anything_compiles() {
    let dir = scratch("refused-before-compile");
    let ckpt = dir.join("ckpt");
    trained(&ckpt);
    let resume = run(
        "train",
        &[
            "--model",
            "deepseek3",
            "--devices",
            "2",
            "--resume",
            utf8(&ckpt),
        ],
    );
    let stderr = String::from_utf8_lossy(&resume.stderr);
    assert_eq!(resume.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("is of the model `llama`, not `deepseek3`"),
        "{stderr}"
    );
    assert!(resume.stdout.is_empty(), "{resume:?}");

    // The tiny Hugging Face Llama, its config saying one layer more than its weights hold.
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf/llama");
    let hf = dir.join("hf");
    std::fs::create_dir_all(&hf).expect("hf dir");
    std::fs::copy(
        fixture.join("model.safetensors"),
        hf.join("model.safetensors"),
    )
    .expect("copy the weights");
    let mut config: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture.join("config.json")).expect("config.json"),
    )
    .expect("JSON");
    let layers = config["num_hidden_layers"].as_u64().expect("layers");
    config["num_hidden_layers"] = (layers + 1).into();
    std::fs::write(hf.join("config.json"), config.to_string()).expect("write config.json");
    let import = run(
        "train",
        &["--init-from", utf8(&hf), "--batch", "4", "--steps", "1"],
    );
    let stderr = String::from_utf8_lossy(&import.stderr);
    assert_eq!(import.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("error: cannot import")
            && stderr.contains(&format!("model.layers.{layers}."))
            && stderr.contains("is missing"),
        "{stderr}"
    );
    assert!(import.stdout.is_empty(), "{import:?}");
    std::fs::remove_dir_all(dir).expect("clean up");
}

/// A checkpoint records the model and config of the run that wrote it: `eval` and `export`
/// read it without `--model` or `--config` (a two-layer Llama of a TOML file here, which the
/// tiny preset's four layers would not load), `train --resume` continues it the same way,
/// and a resume as another model is refused by both names.
#[test]
fn a_checkpoint_records_its_model_and_config() {
    let dir = scratch("recorded");
    let config = dir.join("two-layers.toml");
    std::fs::write(&config, "layers = 2\nno_decay = [\"*norm*\"]\n").expect("config");
    let ckpt = dir.join("ckpt");
    let train = |extra: &[&str]| {
        let mut args = vec!["--devices", "2", "--save-every", "1"];
        args.extend_from_slice(extra);
        succeeds("train", &args)
    };
    train(&[
        "--config",
        utf8(&config),
        "--steps",
        "1",
        "--checkpoint-dir",
        utf8(&ckpt),
    ]);
    // The config's own keys are recorded with it: the weights its decay spares.
    let recorded = stackscan_cli::cli::recorded::recorded(&ckpt.join("latest.safetensors"))
        .expect("a readable record")
        .expect("a recorded config");
    assert_eq!(recorded.no_decay(), ["*norm*"]);
    let data = dir.join("held-out.u16");
    std::fs::write(&data, vec![0u8; 1 << 16]).expect("tokens");
    let evaluated = succeeds(
        "eval",
        &[
            "--checkpoint",
            utf8(&ckpt),
            "--data",
            utf8(&data),
            "--devices",
            "2",
        ],
    );
    assert!(evaluated.contains("2 layers"), "{evaluated}");
    let hf = dir.join("hf");
    succeeds("export", &["--checkpoint", utf8(&ckpt), "--to", utf8(&hf)]);
    let written: Value = serde_json::from_str(
        &std::fs::read_to_string(hf.join("config.json")).expect("config.json"),
    )
    .expect("JSON");
    assert_eq!(written["num_hidden_layers"], 2);
    let resumed = train(&[
        "--resume",
        utf8(&ckpt),
        "--checkpoint-dir",
        utf8(&ckpt),
        "--steps",
        "2",
    ]);
    assert!(resumed.contains("2 layers"), "{resumed}");
    fails(
        "train",
        &[
            "--model",
            "deepseek3",
            "--devices",
            "2",
            "--resume",
            utf8(&ckpt),
        ],
        2,
        &["is of the model `llama`, not `deepseek3`"],
    );
}
