//! Bad inputs a command can see without compiling anything, each run through the command line:
//! a Hugging Face directory with a tensor missing, of another shape or of another dtype, or a
//! `config.json` field of the wrong type; a `--resume` of another model's checkpoint, of one
//! with a tensor of another shape, or of one without its step; a text whose tokens fall outside
//! the model's vocabulary. Each is refused with exit status 2 in one line that names the
//! tensor, field or file at fault, and nothing reaches stdout, where a run's first line names
//! the devices once the plugin has loaded: nothing was loaded or compiled.
//!
//! The flags refused in combination and the value errors that name their flag are in
//! `binaries.rs` (`train_rejects_bad_arguments_in_one_line`), the memory check in
//! `memory_check.rs`, a damaged checkpoint in `resume.rs`.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

mod common;

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};
use stackscan_models::registry::{ModelName, Preset};
use stackscan_runtime::checkpoint::{Checkpoint, Tensor};
use stackscan_runtime::train::stored_weights;

fn scratch(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("stackscan-refusals-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A file of zero tokens (`u16`) in `dir`, long enough for `eval`'s batches.
fn tokens(dir: &Path) -> PathBuf {
    let path = dir.join("tokens.u16");
    std::fs::write(&path, vec![0u8; 1 << 16]).unwrap();
    path
}

fn utf8(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Runs `bin` with `args`, requires the refusal (exit 2, one line holding each of `says`) and
/// nothing on stdout.
fn refused(bin: &str, args: &[&str], says: &[&str]) {
    common::fails(bin, args, 2, says);
    let out = common::run(bin, args);
    assert!(
        out.stdout.is_empty(),
        "`{bin} {}` printed {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout)
    );
}

/// One tensor of a safetensors file: its header entry and its bytes.
struct Stored {
    name: String,
    entry: Map<String, Value>,
    bytes: Vec<u8>,
}

/// The tensors and metadata of the safetensors file at `path`.
fn read_safetensors(path: &Path) -> (Vec<Stored>, Option<Value>) {
    let file = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(file[..8].try_into().unwrap()) as usize;
    let header: Map<String, Value> = serde_json::from_slice(&file[8..8 + n]).unwrap();
    let data = &file[8 + n..];
    let mut tensors = Vec::new();
    let mut metadata = None;
    for (name, entry) in header {
        if name == "__metadata__" {
            metadata = Some(entry);
            continue;
        }
        let entry = entry.as_object().unwrap().clone();
        let at = |i: usize| entry["data_offsets"][i].as_u64().unwrap() as usize;
        let bytes = data[at(0)..at(1)].to_vec();
        tensors.push(Stored { name, entry, bytes });
    }
    (tensors, metadata)
}

/// Writes `tensors` as a safetensors file at `path`, their data in order.
fn write_safetensors(path: &Path, tensors: &[Stored], metadata: Option<&Value>) {
    let mut header = Map::new();
    if let Some(m) = metadata {
        header.insert("__metadata__".into(), m.clone());
    }
    let mut data = Vec::new();
    for t in tensors {
        let mut entry = t.entry.clone();
        let start = data.len();
        data.extend_from_slice(&t.bytes);
        entry.insert(
            "data_offsets".into(),
            serde_json::json!([start, data.len()]),
        );
        header.insert(t.name.clone(), Value::Object(entry));
    }
    let text = serde_json::to_vec(&Value::Object(header)).unwrap();
    let mut file = (text.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(&text);
    file.extend_from_slice(&data);
    std::fs::write(path, file).unwrap();
}

/// A copy of the tiny Llama fixture `transformers` saved, its tensors changed by `change`.
fn hf_copy(name: &str, change: impl FnOnce(&mut Vec<Stored>)) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf/llama");
    let dir = scratch(name);
    std::fs::copy(src.join("config.json"), dir.join("config.json")).unwrap();
    let (mut tensors, metadata) = read_safetensors(&src.join("model.safetensors"));
    change(&mut tensors);
    write_safetensors(&dir.join("model.safetensors"), &tensors, metadata.as_ref());
    dir
}

fn tensor<'a>(tensors: &'a mut [Stored], name: &str) -> &'a mut Stored {
    tensors.iter_mut().find(|t| t.name == name).unwrap()
}

#[test]
fn a_hugging_face_directory_is_checked_tensor_by_tensor_before_anything_loads() {
    let missing = "model.layers.1.mlp.up_proj.weight";
    let dir = hf_copy("missing", |t| t.retain(|t| t.name != missing));
    refused("train", &["--init-from", utf8(&dir)], &[missing]);

    // The same bytes read as another shape.
    let reshaped = "model.layers.0.self_attn.q_proj.weight";
    let dir = hf_copy("shape", |t| {
        let e = &mut tensor(t, reshaped).entry;
        e.insert("shape".into(), serde_json::json!([16, 64]));
    });
    refused(
        "train",
        &["--init-from", utf8(&dir)],
        &[reshaped, "[16, 64]"],
    );
    let data = tokens(&dir);
    refused(
        "eval",
        &["--init-from", utf8(&dir), "--data", utf8(&data)],
        &[reshaped],
    );

    // The same bytes as integers.
    let retyped = "model.norm.weight";
    let dir = hf_copy("dtype", |t| {
        tensor(t, retyped)
            .entry
            .insert("dtype".into(), Value::from("I32"));
    });
    refused("train", &["--init-from", utf8(&dir)], &[retyped, "I32"]);
}

#[test]
fn a_config_json_field_of_the_wrong_type_is_named_by_its_path() {
    let dir = hf_copy("config", |_| {});
    let path = dir.join("config.json");
    let mut config: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    config["hidden_size"] = Value::from("thirty-two");
    std::fs::write(&path, serde_json::to_vec(&config).unwrap()).unwrap();
    refused("train", &["--init-from", utf8(&dir)], &["hidden_size"]);
    refused(
        "train",
        &["--config", utf8(&path)],
        &["hidden_size", "config.json"],
    );
}

/// A checkpoint holding every tensor a resume of `model`'s tiny config reads, at `shape_of`
/// each name's shape, with the step and data metadata unless `without` names one of them.
fn checkpoint(
    dir: &Path,
    model: &str,
    shape_of: impl Fn(&str, Vec<i64>) -> Vec<i64>,
    without: Option<&str>,
) {
    let name: ModelName = model.parse().unwrap();
    let (m, _) = name.preset(Preset::Tiny).unwrap().build().unwrap();
    let mut tensors = Vec::new();
    for prefix in ["", "adam.m.", "adam.v."] {
        for (name, shape) in stored_weights(&m) {
            let shape = shape_of(&name, shape);
            let n = shape.iter().product::<i64>() as usize;
            tensors.push(Tensor {
                name: format!("{prefix}{name}"),
                shape,
                data: vec![0.0; n],
            });
        }
    }
    let mut ckpt = Checkpoint {
        tensors,
        ..Checkpoint::default()
    };
    for key in ["step", "data_position", "rng_state"] {
        if without != Some(key) {
            ckpt.metadata.insert(key.into(), "1".into());
        }
    }
    ckpt.write(&dir.join("latest.safetensors")).unwrap();
}

#[test]
fn a_resume_is_checked_against_the_model_before_anything_loads() {
    // Another model's checkpoint: the first tensor the Llama reads is missing.
    let dir = scratch("other-model");
    checkpoint(&dir, "deepseek3", |_, s| s, None);
    refused(
        "train",
        &["--resume", utf8(&dir)],
        &["cannot resume", "`embed`"],
    );

    // The Llama's own names, one of another shape.
    let dir = scratch("shape");
    checkpoint(
        &dir,
        "llama",
        |name, mut s| {
            if name == "embed" {
                s[0] += 1;
            }
            s
        },
        None,
    );
    refused("train", &["--resume", utf8(&dir)], &["`embed`", "shape"]);

    // Every tensor right, the step missing from the metadata.
    let dir = scratch("metadata");
    checkpoint(&dir, "llama", |_, s| s, Some("step"));
    refused("train", &["--resume", utf8(&dir)], &["`step`"]);
    let data = tokens(&dir);
    refused(
        "eval",
        &["--checkpoint", utf8(&dir), "--data", utf8(&data)],
        &["`step`"],
    );
}

#[test]
fn a_texts_tokens_outside_the_vocabulary_name_the_text() {
    let dir = scratch("text");
    let text = dir.join("corpus.txt");
    std::fs::write(
        &text,
        "the quick brown fox jumps over the lazy dog. ".repeat(200),
    )
    .unwrap();
    // The fixture's byte-level tokenizer gives ids up to 121; this Llama reads 64.
    let config = dir.join("vocab64.toml");
    std::fs::write(&config, "vocab = 64\n").unwrap();
    let tokenizer =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf/tokenizer/tokenizer.json");
    let args = [
        "--config",
        utf8(&config),
        "--tokenizer",
        utf8(&tokenizer),
        "--data",
        utf8(&text),
    ];
    // Tokenizing says what it made on stderr first; the refusal is the last line.
    let (stderr, shown) = common::exits("train", &args, 2);
    let last = stderr.trim_end().lines().last().unwrap_or("");
    for s in [
        "corpus.txt",
        "tokenizer.json",
        "outside the vocabulary of 64",
    ] {
        assert!(last.contains(s), "no `{s}` in the last line of {shown}");
    }
    assert!(common::run("train", &args).stdout.is_empty(), "{shown}");
}
