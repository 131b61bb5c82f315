//! The presets, the TOML reading over a base and the one loading path of every command.

use super::*;
use crate::deepseek3::DeepSeek3Config;
use crate::llama::LlamaConfig;
use crate::qwen35::Qwen35Config;

/// The presets are the one source of the sizes (the Rust constructors read them): each
/// parses, and holds the published figures (model cards and `config.json`s) and the design's
/// tiny sizes, written here by hand.
#[test]
fn every_preset_parses_and_names_its_model() {
    fn all<C: ConfigFile>() {
        for (name, _) in C::PRESETS {
            assert!(
                matches!(preset::<C>(name), Some(Ok(_))),
                "{}: {name}",
                C::MODEL
            );
        }
    }
    all::<LlamaConfig>();
    all::<Qwen35Config>();
    all::<DeepSeek3Config>();
    let l = LlamaConfig::llama3_8b();
    assert_eq!(
        (l.vocab, l.d_model, l.layers, l.heads, l.kv_heads, l.ffn),
        (128_256, 4096, 32, 32, 8, 14_336)
    );
    let t = LlamaConfig::tiny();
    assert_eq!(
        (t.vocab, t.d_model, t.layers, t.heads, t.kv_heads),
        (512, 256, 4, 8, 2)
    );
    let q = Qwen35Config::qwen35_35b_a3b();
    assert_eq!(
        (
            q.vocab,
            q.d_model,
            q.layers,
            q.experts,
            q.top_k,
            q.expert_width
        ),
        (248_320, 2048, 40, 256, 8, 512)
    );
    let q = Qwen35Config::tiny();
    assert_eq!((q.d_model, q.layers, q.experts, q.top_k), (128, 8, 16, 4));
    let d = DeepSeek3Config::deepseek3();
    assert_eq!(
        (
            d.vocab,
            d.d,
            d.layers,
            d.dense_layers,
            d.experts,
            d.top_k,
            d.dense_ffn
        ),
        (129_280, 7168, 61, 3, 256, 8, 18_432)
    );
    let d = DeepSeek3Config::tiny();
    assert_eq!((d.d, d.layers, d.dense_layers, d.experts), (128, 8, 3, 16));
}

#[test]
fn qwen35_tables_default_per_field_and_refuse_unknown_ones() {
    use crate::gdn_layer::GdnForm;
    use crate::qwen35::Qwen35Config;
    let c: Qwen35Config = from_toml(
        "layers = 40\n[gdn]\nform = \"recurrent\"\n[attention]\nheads = 16",
        "inline",
    )
    .unwrap();
    let tiny = Qwen35Config::tiny();
    assert_eq!(c.layers, 40);
    assert_eq!(c.gdn.form, GdnForm::Recurrent);
    assert_eq!(c.gdn.key_heads, tiny.gdn.key_heads);
    assert_eq!((c.attention.heads, c.attention.kv_heads), (16, 1));
    let chunk: Qwen35Config = from_toml("[gdn]\nform = { chunked = 8 }", "inline").unwrap();
    assert_eq!(chunk.gdn.form, GdnForm::Chunked(8));
    let e = from_toml::<Qwen35Config>("[gdn]\nd_model = 64", "q.toml").unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("`q.toml`") && msg.contains("unknown field `d_model`"),
        "{msg}"
    );
    let e = from_toml::<Qwen35Config>("[gdn]\nform = \"chunky\"", "q.toml").unwrap_err();
    assert!(e.to_string().contains("unknown variant `chunky`"), "{e}");
    let e = Qwen35Config::load("no-such").unwrap_err().to_string();
    assert!(
        e.contains("neither a built-in config (tiny, qwen35-35b-a3b)"),
        "{e}"
    );
}

#[test]
fn a_qwen35_config_that_does_not_fit_names_its_field() {
    use crate::qwen35::Qwen35Config;
    use crate::registry::Architecture;
    let bad = |text: &str| Architecture::build(&from_toml::<Qwen35Config>(text, "q").unwrap());
    // Any whole number of blocks is a depth; 10 layers are not.
    assert!(bad("layers = 12").is_ok());
    let e = bad("layers = 10").unwrap_err().to_string();
    assert!(e.contains("`Qwen35Config.layers` is 10"), "{e}");
    let e = bad("[attention]\nkv_heads = 3").unwrap_err().to_string();
    assert!(e.contains("`attention.kv_heads` (3)"), "{e}");
    let e = bad("[gdn]\nkey_heads = 3").unwrap_err().to_string();
    assert!(e.contains("`gdn.key_heads` (3)"), "{e}");
    let e = bad("[attention]\nrotary_dim = 7").unwrap_err().to_string();
    assert!(e.contains("`attention.rotary_dim` (7)"), "{e}");
}

#[test]
fn deepseek3_tables_default_per_field_and_refuse_unknown_ones() {
    use crate::deepseek3::DeepSeek3Config;
    // A nested table defaults field by field; an unknown field in it is named.
    let c: DeepSeek3Config = from_toml("layers = 8\n[mla]\nheads = 8", "inline").unwrap();
    assert_eq!((c.mla.heads, c.mla.q_lora), (8, 48));
    let e = from_toml::<DeepSeek3Config>("[mla]\nq_rank = 4", "ds.toml").unwrap_err();
    assert!(e.to_string().contains("unknown field `q_rank`"), "{e}");
    // The expert-parallel mesh is a run setting (`--ep`), not data.
    let e = from_toml::<DeepSeek3Config>("expert_mesh = 4", "ds.toml").unwrap_err();
    assert!(e.to_string().contains("unknown field `expert_mesh`"), "{e}");
    // What serde writes (the TOML writer is not built in; JSON is) reads back the same.
    for c in [DeepSeek3Config::tiny(), DeepSeek3Config::deepseek3()] {
        let text = serde_json::to_string(&c).unwrap();
        let back: DeepSeek3Config = serde_json::from_str(&text).unwrap();
        assert_eq!(back, c, "{text}");
    }
    let e = DeepSeek3Config::load("llama3-8b").unwrap_err().to_string();
    assert!(
        e.contains("neither a built-in config (tiny, deepseek3)"),
        "{e}"
    );
}

#[test]
fn left_out_fields_default_to_tiny_and_unknown_ones_are_errors() {
    let c: LlamaConfig = from_toml("layers = 8\nd_model = 128", "inline").unwrap();
    assert_eq!(
        c,
        LlamaConfig {
            layers: 8,
            d_model: 128,
            ..LlamaConfig::tiny()
        }
    );
    let e = from_toml::<LlamaConfig>("layers = 8\nheadz = 4", "my.toml").unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("`my.toml`"), "{msg}");
    assert!(msg.contains("unknown field `headz`"), "{msg}");
    assert!(msg.contains("`heads`"), "lists the valid fields: {msg}");
    let e = from_toml::<LlamaConfig>("layers = \"four\"", "my.toml").unwrap_err();
    assert!(e.to_string().contains("invalid type"), "{e}");
    let e = LlamaConfig::load("no-such-config").unwrap_err().to_string();
    assert!(
        e.contains(
            "neither a built-in config (tiny, llama3-8b, llama3.2-1b, tiny-swa, mistral-7b)"
        ),
        "{e}"
    );
}

/// The keys of a TOML table, nested ones as dotted paths.
fn keys(t: &toml::Table, prefix: &str, out: &mut Vec<String>) {
    for (k, v) in t {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Table(inner) if !path.ends_with(".form") => keys(inner, &path, out),
            _ => out.push(path),
        }
    }
}

fn presets_are_complete<C: ConfigFile + PartialEq + std::fmt::Debug>() {
    for (name, text) in C::PRESETS {
        // Read with no base and no serde default: a preset must give every field.
        let c: C = toml::from_str(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let filled = read_toml::<C>(text, name).unwrap();
        assert_eq!(filled.config, c, "{name}");
        assert!(
            filled.from_base.is_empty(),
            "{name}: {:?}",
            filled.from_base
        );
        // The tables listed in `TABLES` are exactly the preset's struct tables, but for
        // Llama's `rope_scaling`: an optional table, given whole or not at all, so replaced
        // rather than completed from the base.
        let table: toml::Table = toml::from_str(text).unwrap();
        let mut nested: Vec<&str> = table
            .iter()
            .filter(|(k, v)| v.is_table() && k.as_str() != "rope_scaling")
            .map(|(k, _)| k.as_str())
            .collect();
        let mut listed = C::TABLES.to_vec();
        nested.sort_unstable();
        listed.sort_unstable();
        assert_eq!(nested, listed, "{name}");
    }
}

#[test]
fn every_preset_gives_every_field_and_lists_its_tables() {
    presets_are_complete::<LlamaConfig>();
    presets_are_complete::<crate::deepseek3::DeepSeek3Config>();
    presets_are_complete::<crate::qwen35::Qwen35Config>();
}

#[test]
fn a_file_extending_the_published_qwen35_keeps_its_sub_dims() {
    use crate::qwen35::Qwen35Config;
    let full = Qwen35Config::qwen35_35b_a3b();
    let filled = read_toml::<Qwen35Config>(
        "extends = \"qwen35-35b-a3b\"\nlayers = 8\n[gdn]\nkey_heads = 8",
        "q.toml",
    )
    .unwrap();
    assert_eq!(filled.base, "qwen35-35b-a3b");
    let mut expected = full;
    expected.layers = 8;
    expected.gdn.key_heads = 8;
    assert_eq!(filled.config, expected);
    // Every field not written is named as the base's, nested ones by their path.
    let mut all = Vec::new();
    keys(
        &toml::from_str(Qwen35Config::PRESETS[1].1).unwrap(),
        "",
        &mut all,
    );
    // A table the file does not write is the base's whole, named once.
    let written = ["layers", "gdn.key_heads"];
    let mut from_base = filled.from_base.clone();
    from_base.sort();
    let mut want: Vec<String> = all
        .into_iter()
        .filter(|k| !written.contains(&k.as_str()) && !k.starts_with("attention."))
        .chain(["attention".to_owned()])
        .collect();
    want.sort();
    assert_eq!(from_base, want);
    assert!(filled.from_base.contains(&"gdn.key_dim".to_owned()));
    // An enum written as a table is replaced whole, not merged with the base's variant.
    let c: Qwen35Config = from_toml(
        "extends = \"qwen35-35b-a3b\"\n[gdn]\nform = \"recurrent\"",
        "q.toml",
    )
    .unwrap();
    assert_eq!(c.gdn.form, crate::gdn_layer::GdnForm::Recurrent);
    assert_eq!(c.gdn.key_dim, full.gdn.key_dim);
}

#[test]
fn extends_defaults_to_the_tiny_preset_and_names_unknown_presets() {
    use crate::deepseek3::DeepSeek3Config;
    use crate::qwen35::Qwen35Config;
    // Files written before `extends` read as they did.
    let filled = read_toml::<Qwen35Config>("layers = 4", "q.toml").unwrap();
    assert_eq!(filled.base, "tiny");
    assert_eq!(
        filled.config,
        Qwen35Config {
            layers: 4,
            ..Qwen35Config::tiny()
        }
    );
    let e = from_toml::<Qwen35Config>("extends = \"qwen3-next\"", "q.toml")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`q.toml`: `extends = \"qwen3-next\"` is not a preset of `qwen35`")
            && e.contains("`tiny`, `qwen35-35b-a3b`"),
        "{e}"
    );
    let e = from_toml::<Qwen35Config>("extends = 3", "q.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("`extends` is integer, not a preset name"), "{e}");
    // A preset of another model is not one of this model's.
    let e = from_toml::<DeepSeek3Config>("extends = \"qwen35-35b-a3b\"", "d.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("`tiny`, `deepseek3`"), "{e}");
    // A field of the base's tables stays checked: misspelt in a partial table, it is named.
    let e = from_toml::<DeepSeek3Config>("extends = \"deepseek3\"\n[mla]\nhead = 4", "d.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown field `head`"), "{e}");
    let c: DeepSeek3Config = from_toml(
        "extends = \"deepseek3\"\nlayers = 8\n[mla]\nheads = 64",
        "d.toml",
    )
    .unwrap();
    assert_eq!(
        (c.layers, c.mla.heads, c.mla.q_lora, c.d),
        (8, 64, 1536, 7168)
    );
    // A syntax error says the line.
    let e = from_toml::<LlamaConfig>("layers = 4\nd_model = = 3", "l.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("`l.toml` (line 2)"), "{e}");
}

#[test]
fn one_loading_path_takes_presets_toml_files_and_config_json_files() {
    use crate::registry::{ModelConfig, ModelName, Preset};
    let [llama, deepseek3, qwen35]: [ModelName; 3] =
        ["llama", "deepseek3", "qwen35"].map(|n| n.parse().unwrap());
    let dir = std::env::temp_dir().join(format!("stackscan-configs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let toml_path = dir.join("eight.toml");
    std::fs::write(&toml_path, "extends = \"llama3-8b\"\nlayers = 8\n").unwrap();
    let hf = concat!(env!("CARGO_MANIFEST_DIR"), "/configs/hf/llama-3-8b.json");
    let ds = concat!(env!("CARGO_MANIFEST_DIR"), "/configs/hf/deepseek-v3.json");
    let spec = toml_path.to_str().unwrap();
    assert_eq!(
        llama.load(spec),
        Ok(ModelConfig::new(LlamaConfig {
            layers: 8,
            ..LlamaConfig::llama3_8b()
        }))
    );
    assert_eq!(llama.load(hf), Ok(llama.preset(Preset::Published).unwrap()));
    // A `config.json` has no capacity factor (the published models' dropless routing) and
    // DeepSeek-V3's declares no sequence-wise loss.
    assert_eq!(
        deepseek3.load(ds),
        Ok(ModelConfig::new(DeepSeek3Config {
            capacity_factor: crate::moe::NO_DROP,
            aux_loss_alpha: 0.0,
            ..DeepSeek3Config::deepseek3()
        }))
    );
    assert_eq!(
        qwen35.load("qwen35-35b-a3b"),
        Ok(qwen35.preset(Preset::Published).unwrap())
    );
    // The run-time overrides of `timeline` (`--batch`, `--layers`).
    let c = qwen35
        .preset(Preset::Tiny)
        .unwrap()
        .with_layers(12)
        .with_batch_per_device(3);
    assert_eq!((c.layers(), c.batch_per_device()), (12, 3));
    // Another architecture's file names both, and the file.
    let e = qwen35.load(ds).unwrap_err().to_string();
    assert!(
        e.contains(ds) && e.contains("is a `deepseek3` config, not a `qwen35` one"),
        "{e}"
    );
    // A missing field of a config.json is one line naming the field and the file.
    let broken = dir.join("config.json");
    std::fs::write(&broken, r#"{"model_type": "llama", "hidden_size": 64}"#).unwrap();
    let e = llama
        .load(broken.to_str().unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(broken.to_str().unwrap()) && e.contains("missing field `num_attention_heads`"),
        "{e}"
    );
    assert!(!e.contains('\n'), "{e}");
    // A model directory is read through its `config.json`.
    let e = llama.load(dir.to_str().unwrap()).unwrap_err().to_string();
    assert!(e.contains("missing field `num_attention_heads`"), "{e}");
    // A directory without one is neither.
    let e = llama
        .load(concat!(env!("CARGO_MANIFEST_DIR"), "/configs/hf"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("is a directory without a `config.json`"), "{e}");
    let e = llama.load("no-such.json").unwrap_err().to_string();
    assert!(
        e.contains(
            "neither a built-in config (tiny, llama3-8b, llama3.2-1b, tiny-swa, mistral-7b)"
        ),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_value_of_the_wrong_type_names_its_field() {
    let e = from_toml::<LlamaConfig>("layers = -1", "neg.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("`neg.toml`: field `layers`"), "{e}");
    assert!(e.contains("-1"), "{e}");
    // A nested field by its dotted path.
    let e = from_toml::<DeepSeek3Config>("[mla]\nrope = \"sixteen\"", "ds.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("field `mla.rope`"), "{e}");
}

#[test]
fn a_directory_without_config_json_says_so() {
    let dir = std::env::temp_dir().join(format!("stackscan-empty-model-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let e = LlamaConfig::load(dir.to_str().unwrap())
        .unwrap_err()
        .to_string();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(e.contains("is a directory without a `config.json`"), "{e}");
}

#[test]
fn a_file_declares_its_precision_beside_its_config() {
    let filled = read_toml::<LlamaConfig>("layers = 2\nprecision = \"bf16\"", "inline").unwrap();
    assert_eq!(filled.precision, Some(Precision::BF16));
    assert_eq!(filled.config.layers, 2);
    let plain = read_toml::<LlamaConfig>("layers = 2", "inline").unwrap();
    assert_eq!(plain.precision, None);
    let e = read_toml::<LlamaConfig>("precision = \"fp8\"", "inline")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`inline`") && e.contains("`fp8`") && e.contains("bf16"),
        "{e}"
    );
    let e = read_toml::<LlamaConfig>("precision = 16", "inline")
        .unwrap_err()
        .to_string();
    assert!(e.contains("`precision` is integer"), "{e}");
    // Through the registry: the config's policy is the model's, over the attribute's, and
    // a reshaped copy keeps it.
    let dir = std::env::temp_dir().join(format!("stackscan-precision-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bf16.toml");
    std::fs::write(&path, "precision = \"bf16-reduce-bf16\"").unwrap();
    let llama: crate::registry::ModelName = "llama".parse().unwrap();
    let c = llama.load(path.to_str().unwrap()).unwrap().with_seq(32);
    assert_eq!(c.build().unwrap().1.precision, Precision::BF16_REDUCE_BF16);
    let tiny = llama.load("tiny").unwrap();
    assert_eq!(tiny.build().unwrap().1.precision, Precision::F32);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_file_names_the_weights_decay_spares() {
    let filled =
        read_toml::<LlamaConfig>("no_decay = [\"layers.attn.*\", \"embed\"]", "inline").unwrap();
    assert_eq!(filled.no_decay, ["layers.attn.*", "embed"]);
    assert!(
        read_toml::<LlamaConfig>("layers = 2", "inline")
            .unwrap()
            .no_decay
            .is_empty()
    );
    let e = read_toml::<LlamaConfig>("no_decay = \"embed\"", "inline")
        .unwrap_err()
        .to_string();
    assert!(e.contains("`no_decay` is string, not a list"), "{e}");
    // Through the registry: the build marks the weights, a reshaped copy keeps the patterns,
    // and a pattern that names no weight is refused when the model is built.
    let dir = std::env::temp_dir().join(format!("stackscan-no-decay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("spare.toml");
    std::fs::write(&path, "no_decay = [\"layers.attn.*\"]").unwrap();
    let llama: crate::registry::ModelName = "llama".parse().unwrap();
    let c = llama.load(path.to_str().unwrap()).unwrap().with_seq(32);
    assert_eq!(c.no_decay(), ["layers.attn.*"]);
    let (model, _) = c.build().unwrap();
    for ((spec, _), name) in model.weights().iter().zip(model.weight_names()) {
        let spared = name.starts_with("layers.attn.");
        assert_eq!(spec.decay, spared.then_some(false), "{name}");
    }
    std::fs::write(&path, "no_decay = [\"layers.atn.*\"]").unwrap();
    let e = llama
        .load(path.to_str().unwrap())
        .unwrap()
        .build()
        .unwrap_err()
        .to_string();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        e.contains("`no_decay` entry `layers.atn.*` names no weight")
            && e.contains("layers.attn.wq"),
        "{e}"
    );
}
