//! Hugging Face weights in and out. The fixtures under `tests/fixtures/hf/` are tiny random
//! models `transformers` saved, with the loss and logits it computed on a fixed batch
//! (`make.py` made them; CI has no torch). Imported onto 4 devices, each model's loss equals
//! `transformers`' within 1e-4 relative, one training step from it runs, and an export
//! re-imports bit-identically.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use std::path::{Path, PathBuf};

use stackscan::hf_map::Step;
use stackscan_models::jobs::ModelName;
use stackscan_models::registry::ModelConfig;
use stackscan_runtime::hf::{ExportDType, WeightFiles};
use stackscan_runtime::testing::cached_cpu_client;
use stackscan_runtime::testing::multi_step;
use stackscan_runtime::train::{HostInput, Trainer};
use stackscan_runtime::{Client, Mesh};

/// The target's directory for tests, where
/// [`cached_cpu_client`](stackscan_runtime::testing::cached_cpu_client) keeps its cache.
const TARGET_TMP: &str = env!("CARGO_TARGET_TMPDIR");

const DEVICES: usize = 4;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/hf")
        .join(name)
}

/// What `transformers` computed.
struct Expected {
    tokens: Vec<Vec<i32>>,
    labels: Vec<Vec<i32>>,
    loss: f64,
    /// The first sequence's logits at its first positions, `[positions, vocab]` row-major.
    logits: Vec<f64>,
}

fn expected(dir: &Path) -> Expected {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    let rows = |k: &str| -> Vec<Vec<i32>> { serde_json::from_value(v[k].clone()).unwrap() };
    Expected {
        tokens: rows("tokens"),
        labels: rows("labels"),
        loss: v["loss"].as_f64().unwrap(),
        logits: serde_json::from_value(v["logits"].clone()).unwrap(),
    }
}

/// The fixture's config at the batch's shape, its rows split over the devices.
fn config(model: &str, dir: &Path, e: &Expected) -> ModelConfig {
    let name: ModelName = model.parse().unwrap();
    name.load(dir.join("config.json").to_str().unwrap())
        .unwrap()
        .with_batch_per_device((e.tokens.len() / DEVICES) as i64)
        .with_seq(e.tokens[0].len() as i64)
}

/// A trainer of `c` that compiles its training step only if a test steps it (Adam's
/// defaults).
fn trainer(client: &Client, c: &ModelConfig) -> Trainer {
    let mesh = Mesh::new(client, "fsdp", DEVICES).unwrap();
    let (model, options) = c.build().unwrap();
    Trainer::for_evaluation(client, &mesh, &model, options).unwrap()
}

/// Device `d`'s rows of the batch.
fn split(e: &Expected) -> Vec<Vec<HostInput>> {
    let per = e.tokens.len() / DEVICES;
    (0..DEVICES)
        .map(|d| {
            let rows = |m: &[Vec<i32>]| m[d * per..(d + 1) * per].concat();
            vec![
                HostInput::I32(rows(&e.tokens)),
                HostInput::I32(rows(&e.labels)),
            ]
        })
        .collect()
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("stackscan-hfw-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// What [`parity`] imported and checked.
struct Imported {
    t: Trainer,
    c: ModelConfig,
    map: stackscan::hf_map::HfMap,
    inputs: Vec<Vec<HostInput>>,
    loss: f64,
}

/// The `fixture` directory imported as `model` onto 4 devices: its loss within 1e-4 relative
/// of `transformers`', and the first sequence's first logits within 1e-4 of their scale.
fn parity(model: &str, fixture_name: &str, client: &Client) -> Imported {
    let dir = fixture(fixture_name);
    let e = expected(&dir);
    let c = config(model, &dir, &e);
    let map = c.hf_weights().unwrap();
    let mut t = trainer(client, &c);
    t.import_hf(&map, &dir).unwrap();
    let inputs = split(&e);
    let loss = f64::from(t.evaluate(&inputs).unwrap());
    eprintln!(
        "{fixture_name}: loss {loss:.7} vs transformers' {:.7} ({:.1e} relative)",
        e.loss,
        (loss - e.loss).abs() / e.loss
    );
    assert!(
        (loss - e.loss).abs() <= 1e-4 * e.loss,
        "{fixture_name}: loss {loss} vs transformers' {}",
        e.loss
    );

    // The logits of the first sequence's first positions, within 1e-4 of their scale.
    let head = c.logits_head().unwrap();
    let logits = t.logits(&head, &inputs).unwrap();
    let ours = &logits[0][..e.logits.len()];
    let scale = e.logits.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    let worst = ours
        .iter()
        .zip(&e.logits)
        .map(|(a, b)| (f64::from(*a) - b).abs())
        .fold(0.0f64, f64::max);
    eprintln!(
        "{fixture_name}: logits within {:.1e} of their scale {scale:.2}",
        worst / scale
    );
    assert!(
        worst <= 1e-4 * scale,
        "{fixture_name}: logits off by {worst} (scale {scale})"
    );
    Imported {
        t,
        c,
        map,
        inputs,
        loss,
    }
}

fn imports_matches_trains_and_round_trips(model: &str) {
    let dir = fixture(model);
    let client = cached_cpu_client(DEVICES, TARGET_TMP);
    let Imported {
        mut t,
        c,
        map,
        inputs,
        loss,
    } = parity(model, model, &client);

    // The export of the imported weights is the fixture's own tensors, bit for bit, but for
    // those the import skips (DeepSeek-V3's multi-token-prediction layer) and Qwen3.5's
    // `1 + w` norm scales, which hold `w + 1` in f32 here: rounded once, so within half an
    // ulp of `1 + w` there.
    let out = scratch(&format!("{model}-export"));
    t.export_hf(&map, &out, ExportDType::F32).unwrap();
    let (ours, theirs) = (
        WeightFiles::open(&out).unwrap(),
        WeightFiles::open(&dir).unwrap(),
    );
    let kept: Vec<&str> = theirs
        .names()
        .filter(|n| !map.skipped.iter().any(|(p, _)| n.starts_with(p.as_str())))
        .collect();
    assert_eq!(ours.names().collect::<Vec<_>>(), kept);
    let shifted: Vec<&str> = map
        .weights
        .iter()
        .flat_map(|w| &w.links)
        .filter(|l| l.steps.iter().any(|s| matches!(s, Step::Add(_))))
        .map(|l| l.theirs.as_str())
        .collect();
    for name in kept {
        let (a, b) = (ours.read(name).unwrap(), theirs.read(name).unwrap());
        if shifted.contains(&name) {
            assert_eq!(a.0, b.0, "{name}");
            for (x, y) in a.1.iter().zip(&b.1) {
                let half_ulp = (1.0 + y).abs() * f32::EPSILON / 2.0;
                assert!((x - y).abs() <= half_ulp, "{name}: {x} vs {y}");
            }
        } else {
            assert!(a == b, "{name}");
        }
    }

    // One step trains from it; its export re-imports bit-identically.
    let r = t.step(&inputs).unwrap();
    assert!(
        (f64::from(r.loss) - loss).abs() <= 1e-6 * loss,
        "{} vs {loss}",
        r.loss
    );
    t.export_hf(&map, &out, ExportDType::F32).unwrap();
    let mut back = trainer(&client, &c);
    back.import_hf(&map, &out).unwrap();
    let (a, b) = (multi_step::weights(&t), multi_step::weights(&back));
    assert!(a == b, "{model}: the re-imported weights differ");
    assert!(
        f64::from(back.evaluate(&inputs).unwrap()) < loss,
        "the step lowered the loss"
    );
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn llama_imports_matches_transformers_trains_and_round_trips() {
    imports_matches_trains_and_round_trips("llama");
}

#[test]
fn deepseek3_imports_matches_transformers_trains_and_round_trips() {
    imports_matches_trains_and_round_trips("deepseek3");
}

#[test]
fn qwen35_imports_matches_transformers_trains_and_round_trips() {
    imports_matches_trains_and_round_trips("qwen35");
}

/// A checkpoint of another size is refused before anything changes, the tensor named.
#[test]
fn a_checkpoint_of_another_size_is_refused_by_tensor() {
    let dir = fixture("llama");
    let e = expected(&dir);
    let mut c = config("llama", &dir, &e);
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    v["intermediate_size"] = 64.into();
    let other = scratch("other-size");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("config.json"), v.to_string()).unwrap();
    c = "llama"
        .parse::<ModelName>()
        .unwrap()
        .load(other.join("config.json").to_str().unwrap())
        .unwrap()
        .with_batch_per_device(c.batch_per_device());
    let client = cached_cpu_client(DEVICES, TARGET_TMP);
    let mut t = trainer(&client, &c);
    let before = multi_step::weights(&t);
    let err = t
        .import_hf(&c.hf_weights().unwrap(), &dir)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("tensor `model.layers.0.mlp.gate_proj.weight` is [48, 32]")
            && err.contains("[64, 32]"),
        "{err}"
    );
    assert!(
        multi_step::weights(&t) == before,
        "a refused import changed the weights"
    );
    std::fs::remove_dir_all(&other).unwrap();
}

/// `x` rounded to bf16 (nearest, ties to even) by its bits, back as f32 (finite `x`).
fn bf16_rounded(x: f32) -> f64 {
    let b = x.to_bits();
    let r = (b + 0x7fff + ((b >> 16) & 1)) & 0xffff_0000;
    f64::from(f32::from_bits(r))
}

/// A bf16 checkpoint loads into the f32 masters, each weight its bf16 value.
#[test]
fn a_bf16_checkpoint_loads_into_f32_masters() {
    let dir = fixture("llama");
    let e = expected(&dir);
    let c = config("llama", &dir, &e);
    let map = c.hf_weights().unwrap();
    let client = cached_cpu_client(DEVICES, TARGET_TMP);
    let mut t = trainer(&client, &c);
    t.import_hf(&map, &dir).unwrap();
    let out = scratch("bf16");
    t.export_hf(&map, &out, ExportDType::BF16).unwrap();
    let mut half = trainer(&client, &c);
    half.import_hf(&map, &out).unwrap();
    for (a, b) in multi_step::weights(&t)
        .iter()
        .zip(multi_step::weights(&half))
    {
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(*y, bf16_rounded(*x as f32), "{x}");
        }
    }
    let loss = f64::from(half.evaluate(&split(&e)).unwrap());
    assert!(
        (loss - e.loss).abs() <= 2e-2 * e.loss,
        "bf16 weights: {loss} vs {}",
        e.loss
    );
    std::fs::remove_dir_all(&out).unwrap();
}

/// JSON values equal as `transformers` reads them: numbers by value (`10000` is `10000.0`),
/// objects key by key.
fn same(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(v, w)| same(v, w))
        }
        _ => a == b,
    }
}

/// The rotary table of a `config.json` as `transformers` 5 reads it: `rope_parameters`, or
/// the legacy `rope_scaling` (its `type` spelled `rope_type`) with `rope_theta` beside it.
fn rope_table(v: &serde_json::Value) -> serde_json::Value {
    if let Some(p) = v.get("rope_parameters") {
        return p.clone();
    }
    let mut table = v
        .get("rope_scaling")
        .and_then(|s| s.as_object().cloned())
        .unwrap_or_else(|| {
            let mut m = serde_json::Map::new();
            m.insert("rope_type".into(), "default".into());
            m
        });
    if let Some(kind) = table.remove("type") {
        table.insert("rope_type".into(), kind);
    }
    if let Some(theta) = v.get("rope_theta") {
        table.insert("rope_theta".into(), theta.clone());
    }
    serde_json::Value::Object(table)
}

/// A published variant of `model` saved by `transformers` (`fixture_name`): its loss and
/// logits as `transformers` computes them, and the `config.json` an export writes holds each
/// of its keys at the fixture's value, the rotary table included (a vision-language file's
/// text model's, under `text_config`; the export is the text model's, so its class and type
/// are the text model's own).
fn variant_matches_transformers(model: &str, fixture_name: &str) {
    let client = cached_cpu_client(DEVICES, TARGET_TMP);
    let imported = parity(model, fixture_name, &client);
    let ours = imported.c.hf_config_json().unwrap();
    let path = fixture(fixture_name).join("config.json");
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let nested = file.get("text_config").is_some();
    // A vision-language file's keys, the text model's over the file's own.
    let mut theirs = file.clone();
    if let Some(text) = file.get("text_config").and_then(|t| t.as_object()) {
        for (k, v) in text {
            theirs[k] = v.clone();
        }
    }
    for (key, value) in ours.as_object().unwrap() {
        let renamed = nested && matches!(key.as_str(), "architectures" | "model_type");
        if renamed
            || matches!(
                key.as_str(),
                "rope_scaling" | "rope_theta" | "rope_parameters"
            )
        {
            continue;
        }
        assert!(
            same(value, &theirs[key]),
            "{fixture_name}: export writes `{key}` = {value}, the file has {}",
            theirs[key]
        );
    }
    assert!(
        same(&rope_table(&ours), &rope_table(&theirs)),
        "{fixture_name}: export writes the rotary table {}, the file has {}",
        rope_table(&ours),
        rope_table(&theirs)
    );
    // The special tokens, which the model leaves aside, are written back as the file had them.
    for key in stackscan_models::hf_config::keys::WRITTEN_BACK {
        if !theirs[key].is_null() {
            assert!(
                same(&ours[key], &theirs[key]),
                "{fixture_name}: export writes `{key}` = {}, the file has {}",
                ours[key],
                theirs[key]
            );
        }
    }

    // The same file in the legacy form (`rope_theta` beside a `rope_scaling` table, as
    // `transformers` 4 wrote it) reads as the same config, so it computes the same loss.
    let mut legacy = file.clone();
    let text = match legacy.get_mut("text_config") {
        Some(t) => t,
        None => &mut legacy,
    };
    let table = text
        .as_object_mut()
        .unwrap()
        .remove("rope_parameters")
        .unwrap();
    let mut table = table.as_object().unwrap().clone();
    text["rope_theta"] = table.remove("rope_theta").unwrap();
    if let Some(partial) = table.remove("partial_rotary_factor") {
        text["partial_rotary_factor"] = partial;
    }
    text["rope_scaling"] = serde_json::Value::Object(table);
    let dir = scratch(&format!("{fixture_name}-legacy"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config.json");
    std::fs::write(&path, serde_json::to_vec(&legacy).unwrap()).unwrap();
    let name: ModelName = model.parse().unwrap();
    let read = |p: &Path| name.load(p.to_str().unwrap()).unwrap();
    assert_eq!(
        read(&path),
        read(&fixture(fixture_name).join("config.json")),
        "{fixture_name}: the legacy form reads as another config"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn llama_with_llama3_rope_scaling_matches_transformers() {
    variant_matches_transformers("llama", "llama_llama3");
}

#[test]
fn deepseek3_with_yarn_matches_transformers() {
    variant_matches_transformers("deepseek3", "deepseek3_yarn");
}

#[test]
fn deepseek3_with_rotary_halves_matches_transformers() {
    variant_matches_transformers("deepseek3", "deepseek3_halves");
}

/// Qwen3.5 as published, the vision-language model: the text model's tensors read from under
/// `model.language_model.`, the vision tower skipped.
#[test]
fn qwen35_as_the_published_vision_language_model_matches_transformers() {
    variant_matches_transformers("qwen35", "qwen35_vl");
}

/// The Llama as Llama 3.2 1B and 3B publish it, its LM head tied to the embedding: one
/// tensor in the file, the loss and logits `transformers` computes, and after one Adam step
/// the loss `transformers` reaches with the same step (the embedding's update needs the
/// gradient of both its uses: the lookup and the head).
#[test]
fn llama_with_tied_embeddings_matches_transformers_and_steps_as_it_does() {
    variant_matches_transformers("llama", "llama_tied");
    let dir = fixture("llama_tied");
    let e = expected(&dir);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    let after = v["loss_after_adam_step"].as_f64().unwrap();
    let client = cached_cpu_client(DEVICES, TARGET_TMP);
    let Imported {
        mut t, map, inputs, ..
    } = parity("llama", "llama_tied", &client);
    assert!(
        map.weights.iter().all(|w| w.name != "lm_head"),
        "a tied model has no head of its own"
    );
    t.step(&inputs).unwrap();
    let ours = f64::from(t.evaluate(&inputs).unwrap());
    eprintln!("llama_tied: after one Adam step {ours:.7} vs transformers' {after:.7}");
    assert!(
        (ours - after).abs() <= 1e-4 * after,
        "after one step: {ours} vs transformers' {after} (from {})",
        e.loss
    );
}

/// DeepSeek-V3 as published: its projections FP8 (e4m3) with block scales, dequantized on
/// import into the f32 masters, to the loss and logits `transformers` computes on the
/// dequantized weights.
#[test]
fn deepseek3_with_fp8_block_quantized_weights_matches_transformers() {
    variant_matches_transformers("deepseek3", "deepseek3_fp8");
}

/// Qwen3.5 with its router's balancing loss on: a step reports the language model's loss
/// apart from the balancing term (equal to `transformers`' cross-entropy, where the term used
/// to be added in), and the term weighted as `transformers` weights it, the coefficient on
/// the mean over the layers (not on their sum, which was `layers` times as much). Its
/// statistics are per sequence and per layer here (so a sharded step computes the same),
/// pooled over the batch and the layers there: the term equals the per-sequence, per-layer
/// form computed from `transformers`' own router logits, and comes within 10 % of the pooled
/// one.
#[test]
fn qwen35_reports_its_balancing_loss_apart_weighted_as_published() {
    let dir = fixture("qwen35_aux");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    let coef = v["router_aux_loss_coef"].as_f64().unwrap();
    let pooled = v["aux_loss"].as_f64().unwrap() * coef;
    let per_sequence = v["aux_loss_per_sequence_and_layer"].as_f64().unwrap() * coef;
    let client = cached_cpu_client(DEVICES, TARGET_TMP);
    let Imported {
        mut t,
        inputs,
        loss,
        ..
    } = parity("qwen35", "qwen35_aux", &client);
    let r = t.step(&inputs).unwrap();
    let ours = f64::from(r.aux(stackscan_models::moe::AUX_LOSS).unwrap());
    eprintln!(
        "qwen35_aux: balancing term {ours:.6}; per sequence and layer {per_sequence:.6}, \
         pooled {pooled:.6}"
    );
    assert!(
        (f64::from(r.loss) - loss).abs() <= 1e-6 * loss,
        "the step reports {} where the model's loss is {loss}",
        r.loss
    );
    assert!(
        (ours - per_sequence).abs() <= 1e-4 * per_sequence,
        "balancing term {ours} vs {per_sequence} from transformers' router logits"
    );
    assert!(
        (ours - pooled).abs() <= 0.1 * pooled,
        "balancing term {ours} vs transformers' pooled {pooled}"
    );
}

/// The export a tensor at a time ([`export_to`](stackscan_runtime::hf::export_to)) writes the
/// files the whole-model export writes, byte for byte, for every built-in model, in one file
/// and in shards; it asks for each of our weights once, in the map's order (so it holds about
/// one at a time).
#[test]
fn the_export_a_tensor_at_a_time_writes_the_whole_exports_files() {
    use stackscan_runtime::checkpoint::Tensor;
    use stackscan_runtime::hf::{export, export_to, write_shards};
    for model in ["llama", "deepseek3", "qwen35"] {
        let name: ModelName = model.parse().unwrap();
        let c = name.load("tiny").unwrap();
        let map = c.hf_weights().unwrap();
        let mut rng = stackscan::rng::Rng::new(3);
        let ours: Vec<Tensor> = map
            .weights
            .iter()
            .map(|w| Tensor {
                name: w.name.clone(),
                shape: w.shape.clone(),
                data: (0..w.shape.iter().product::<i64>())
                    .map(|_| rng.normal() as f32)
                    .collect(),
            })
            .collect();
        let theirs = export(&map, &ours).unwrap();
        for shard in [None, Some(200_000)] {
            let (whole, streamed) = (scratch("whole"), scratch("streamed"));
            write_shards(&whole, &theirs, ExportDType::BF16, shard).unwrap();
            let mut asked = Vec::new();
            let n = export_to(&streamed, &map, ExportDType::BF16, shard, |j| {
                asked.push(j);
                Ok(ours[j].data.clone())
            })
            .unwrap();
            assert_eq!(n, theirs.len(), "{model}");
            assert_eq!(asked, (0..ours.len()).collect::<Vec<_>>(), "{model}");
            let files = |d: &Path| {
                let mut v: Vec<_> = std::fs::read_dir(d)
                    .unwrap()
                    .map(|e| e.unwrap().path())
                    .collect();
                v.sort();
                v
            };
            let (a, b) = (files(&whole), files(&streamed));
            assert_eq!(a.len(), b.len(), "{model} {shard:?}");
            assert!(shard.is_none() || a.len() > 2, "{model}: {} files", a.len());
            for (x, y) in a.iter().zip(&b) {
                assert_eq!(x.file_name(), y.file_name());
                assert!(
                    std::fs::read(x).unwrap() == std::fs::read(y).unwrap(),
                    "{model}: {} differs",
                    y.display()
                );
            }
            std::fs::remove_dir_all(&whole).unwrap();
            std::fs::remove_dir_all(&streamed).unwrap();
        }
    }
}
