//! The `config.json` readers against files the project writes from the published sizes.

use super::*;
use crate::deepseek3::DeepSeek3Config;
use crate::llama::LlamaConfig;
use crate::qwen35::Qwen35Config;

const DEEPSEEK: &str = include_str!("../../configs/hf/deepseek-v3.json");
const QWEN: &str = include_str!("../../configs/hf/qwen3.5-35b-a3b.json");
const LLAMA: &str = include_str!("../../configs/hf/llama-3-8b.json");

/// The published presets as a file reads them: the sizes are the presets', the capacity the
/// files' default, no dropping (the presets' 1.25 is our choice for priced compute).
/// The published preset as its `config.json` reads: dropless, and without the sequence-wise
/// loss the file does not declare (`transformers` has none; the preset takes the report's α).
fn published_deepseek3() -> DeepSeek3Config {
    DeepSeek3Config {
        capacity_factor: CAPACITY_FACTOR,
        aux_loss_alpha: 0.0,
        ..DeepSeek3Config::deepseek3()
    }
}

fn published_qwen35() -> Qwen35Config {
    Qwen35Config {
        capacity_factor: CAPACITY_FACTOR,
        ..Qwen35Config::qwen35_35b_a3b()
    }
}

#[test]
fn the_published_files_read_into_the_published_configs() {
    assert_eq!(
        DeepSeek3Config::from_hf(DEEPSEEK).unwrap(),
        published_deepseek3()
    );
    assert_eq!(Qwen35Config::from_hf(QWEN).unwrap(), published_qwen35());
    assert_eq!(
        LlamaConfig::from_hf(LLAMA).unwrap(),
        crate::llama::LlamaConfig::llama3_8b()
    );
    // Whichever model a file is, the registry's list says, through each model's own reader.
    for (text, model) in [(DEEPSEEK, "deepseek3"), (QWEN, "qwen35"), (LLAMA, "llama")] {
        let c = parse(text).unwrap();
        assert_eq!(c.model().as_str(), model);
        assert_eq!(c, c.model().parse_hf_config(text).unwrap());
    }
    assert_eq!(
        parse(DEEPSEEK).unwrap().get::<DeepSeek3Config>(),
        Some(&published_deepseek3())
    );
}

#[test]
fn full_attention_interval_stands_in_for_layer_types() {
    let v: serde_json::Value = serde_json::from_str(QWEN).unwrap();
    let mut text = v["text_config"].clone();
    text.as_object_mut().unwrap().remove("layer_types");
    text["full_attention_interval"] = 4.into();
    assert_eq!(
        Qwen35Config::from_hf(&text.to_string()).unwrap(),
        published_qwen35()
    );
}

fn edited(text: &str, path: &[&str], value: Option<serde_json::Value>) -> String {
    let mut v: serde_json::Value = serde_json::from_str(text).unwrap();
    let mut at = &mut v;
    for p in &path[..path.len() - 1] {
        at = &mut at[*p];
    }
    let last = path[path.len() - 1];
    match (value, last.parse::<usize>()) {
        (Some(x), Ok(i)) => at[i] = x,
        (Some(x), Err(_)) => at[last] = x,
        (None, _) => {
            at.as_object_mut().unwrap().remove(last);
        }
    }
    v.to_string()
}

#[test]
fn a_missing_or_bad_field_is_named() {
    let cases = [
        (
            edited(DEEPSEEK, &["kv_lora_rank"], None),
            "missing field `kv_lora_rank`",
        ),
        (
            edited(DEEPSEEK, &["q_lora_rank"], Some(0.into())),
            "field `q_lora_rank` must be positive",
        ),
        (
            edited(DEEPSEEK, &["n_group"], Some(7.into())),
            "`n_group` = 7",
        ),
        (
            edited(DEEPSEEK, &["first_k_dense_replace"], Some(1.into())),
            "`first_k_dense_replace` = 1",
        ),
        (
            edited(QWEN, &["text_config", "num_experts"], None),
            "missing field `num_experts`",
        ),
        (
            edited(
                QWEN,
                &["text_config", "layer_types", "0"],
                Some("full_attention".into()),
            ),
            "`layer_types`",
        ),
        (
            edited(
                QWEN,
                &["text_config", "layer_types", "1"],
                Some("sliding".into()),
            ),
            "holds `sliding`",
        ),
        (
            edited(QWEN, &["text_config", "model_type"], Some("mistral".into())),
            "`model_type` is `mistral` (Qwen3_5MoeForConditionalGeneration); expected `llama`",
        ),
        (
            edited(LLAMA, &["intermediate_size"], None),
            "missing field `intermediate_size`",
        ),
        (
            edited(LLAMA, &["hidden_act"], Some("gelu".into())),
            "field `hidden_act` is `gelu`",
        ),
        (
            edited(LLAMA, &["mlp_bias"], Some(true.into())),
            "field `mlp_bias` is true",
        ),
        (
            edited(LLAMA, &["rms_norm_eps"], Some((-1e-6).into())),
            "field `rms_norm_eps` must be a positive number",
        ),
        (
            edited(LLAMA, &["num_key_value_heads"], Some(5.into())),
            "not a multiple of `num_key_value_heads` = 5",
        ),
        (
            edited(DEEPSEEK, &["tie_word_embeddings"], Some(true.into())),
            "field `tie_word_embeddings` is true",
        ),
        (
            edited(
                &edited(DEEPSEEK, &["model_type"], None),
                &["architectures"],
                None,
            ),
            "missing field `model_type`",
        ),
        ("{".to_owned(), "not a config.json"),
        (
            edited(DEEPSEEK, &["hidden_size"], Some("wide".into())),
            "field `hidden_size`: invalid type: string \"wide\"",
        ),
        (
            edited(QWEN, &["text_config", "num_experts"], Some((-1).into())),
            "field `text_config.num_experts`: invalid value",
        ),
    ];
    for (text, expected) in cases {
        let e = parse(&text).unwrap_err().to_string();
        assert!(e.contains(expected), "expected `{expected}` in: {e}");
    }
}

#[test]
fn transformers_defaults_fill_what_a_llama_file_may_leave_out() {
    let mut text = edited(LLAMA, &["num_key_value_heads"], None);
    text = edited(&text, &["rope_theta"], None);
    text = edited(&text, &["max_position_embeddings"], None);
    let c = LlamaConfig::from_hf(&text).unwrap();
    // Multi-head attention, heads splitting the width, RoPE base 10⁴, our default sequence.
    assert_eq!((c.heads, c.kv_heads, c.head_dim), (32, 32, 128));
    assert_eq!((c.rope_theta, c.seq), (10_000.0, SEQ));
    // A depth other than Llama-3-8B's is a depth of the one declared stack.
    let c = LlamaConfig::from_hf(&edited(LLAMA, &["num_hidden_layers"], Some(2.into()))).unwrap();
    assert_eq!(c.layers, 2);
}

#[test]
fn a_file_of_another_architecture_names_both() {
    for (model, text, found) in [
        (
            (|t: &str| LlamaConfig::from_hf(t).map(|_| ())) as fn(&str) -> Result<()>,
            DEEPSEEK,
            "model_type `deepseek_v3` (DeepseekV3ForCausalLM) is a `deepseek3` config, not a \
             `llama` one (model_type `llama` (LlamaForCausalLM))",
        ),
        (
            (|t: &str| DeepSeek3Config::from_hf(t).map(|_| ())) as fn(&str) -> Result<()>,
            QWEN,
            "model_type `qwen3_5_moe` (Qwen3_5MoeForConditionalGeneration) is a `qwen35` \
             config, not a `deepseek3` one",
        ),
        (
            (|t: &str| Qwen35Config::from_hf(t).map(|_| ())) as fn(&str) -> Result<()>,
            LLAMA,
            "model_type `llama` (LlamaForCausalLM) is a `llama` config, not a `qwen35` one \
             (model_type `qwen3_5_moe` or `qwen3_5_moe_text` \
             (Qwen3_5MoeForConditionalGeneration, Qwen3_5MoeForCausalLM))",
        ),
    ] {
        let e = model(text).unwrap_err().to_string();
        assert!(e.contains(found), "{e}");
    }
    // Without `model_type`, the class in `architectures` says which model a file is.
    let text = edited(LLAMA, &["model_type"], None);
    assert!(LlamaConfig::from_hf(&text).is_ok());
    assert_eq!(parse(&text).unwrap().model().as_str(), "llama");
    let e = LlamaConfig::from_hf(&edited(&text, &["architectures"], None))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(
            "missing field `model_type`; a `llama` config has model_type `llama` \
             (LlamaForCausalLM)"
        ),
        "{e}"
    );
}

#[test]
fn depths_of_the_declared_patterns_read_and_others_are_named() {
    let c = DeepSeek3Config::from_hf(&edited(DEEPSEEK, &["num_hidden_layers"], Some(8.into())))
        .unwrap();
    assert_eq!((c.layers, c.dense_layers), (8, 3));
    let v: serde_json::Value = serde_json::from_str(QWEN).unwrap();
    let mut text = v["text_config"].clone();
    text.as_object_mut().unwrap().remove("layer_types");
    text["num_hidden_layers"] = 8.into();
    let c = Qwen35Config::from_hf(&text.to_string()).unwrap();
    assert_eq!(c.layers, 8);
    text["num_hidden_layers"] = 10.into();
    let e = parse(&text.to_string()).unwrap_err().to_string();
    assert!(e.contains("`num_hidden_layers` = 10"), "{e}");
}

#[test]
fn deepseek_yarn_reads_and_other_scalings_are_refused() {
    let c = DeepSeek3Config::from_hf(DEEPSEEK).unwrap();
    assert_eq!(c.mla.rope_scaling, Some(crate::yarn::Yarn::deepseek3()));
    // Without `rope_scaling`, plain RoPE.
    let plain = edited(DEEPSEEK, &["rope_scaling"], None);
    let c = DeepSeek3Config::from_hf(&plain).unwrap();
    assert_eq!(c.mla.rope_scaling, None);
    // YaRN's optional fields default as the published model's code has them.
    let short = edited(
        DEEPSEEK,
        &["rope_scaling"],
        Some(serde_json::json!({"type": "yarn", "factor": 4,
            "original_max_position_embeddings": 2048})),
    );
    let c = DeepSeek3Config::from_hf(&short).unwrap();
    let y = c.mla.rope_scaling.unwrap();
    assert_eq!(
        (y.factor, y.original_context, y.beta_fast, y.beta_slow),
        (4.0, 2048.0, 32.0, 1.0)
    );
    assert_eq!((y.mscale, y.mscale_all_dim), (1.0, 0.0));
    for (value, named) in [
        (
            serde_json::json!({"type": "dynamic", "factor": 2.0}),
            "type `dynamic`",
        ),
        (
            serde_json::json!({"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096, "alpha": 1}),
            "`rope_scaling.alpha`",
        ),
        (
            serde_json::json!({"type": "yarn", "factor": 40}),
            "`rope_scaling.original_max_position_embeddings`",
        ),
        (
            serde_json::json!({"type": "yarn", "factor": 0, "original_max_position_embeddings": 4096}),
            "`rope_scaling.factor`",
        ),
    ] {
        let err = parse(&edited(DEEPSEEK, &["rope_scaling"], Some(value)))
            .unwrap_err()
            .to_string();
        assert!(err.contains(named), "{err}");
    }
}

/// The Llama reads its norms' epsilon from the file (and writes it back); DeepSeek-V3 and
/// Qwen3.5 hold theirs to the published 1e-6.
#[test]
fn a_llama_reads_its_norm_epsilon_and_the_others_hold_theirs() {
    let llama = parse(&edited(LLAMA, &["rms_norm_eps"], Some(1e-6.into()))).unwrap();
    let c: &LlamaConfig = llama.get().unwrap();
    assert_eq!(c.norm_eps, 1e-6);
    assert_eq!(crate::llama::hf::config_json(c)["rms_norm_eps"], 1e-6);
    let (model, _) = llama.build().unwrap();
    let (default, _) = parse(LLAMA).unwrap().build().unwrap();
    assert_ne!(
        stackscan::fsdp::train_step(
            &model,
            stackscan::plan::PlanOptions::baseline(),
            &stackscan::Axis::new("fsdp", 1)
        )
        .unwrap()
        .program
        .emit()
        .unwrap(),
        stackscan::fsdp::train_step(
            &default,
            stackscan::plan::PlanOptions::baseline(),
            &stackscan::Axis::new("fsdp", 1)
        )
        .unwrap()
        .program
        .emit()
        .unwrap(),
        "the epsilon reaches the program"
    );
    let deepseek = edited(DEEPSEEK, &["rms_norm_eps"], Some(1e-5.into()));
    let err = parse(&deepseek).unwrap_err().to_string();
    assert!(
        err.contains("`rms_norm_eps` is 0.00001") && err.contains("DeepSeek-V3"),
        "{err}"
    );
    let qwen = edited(QWEN, &["text_config", "rms_norm_eps"], Some(1e-5.into()));
    let err = parse(&qwen).unwrap_err().to_string();
    assert!(
        err.contains("`rms_norm_eps`") && err.contains("Qwen3.5"),
        "{err}"
    );
    // The MLA latent norms keep 1e-6 whatever the file says of the layers' norms.
    let c = DeepSeek3Config::from_hf(DEEPSEEK).unwrap();
    assert_eq!(c.mla.eps, crate::deepseek3::NORM_EPS);
}

/// A file's capacity factor and balancing coefficients are read; without them the published
/// models' dropless routing ([`CAPACITY_FACTOR`]) and the documented defaults apply; a bad
/// value is an error naming the field.
#[test]
fn capacity_and_balancing_come_from_the_file_or_documented_defaults() {
    let c = DeepSeek3Config::from_hf(DEEPSEEK).unwrap();
    assert_eq!(c.capacity_factor, crate::moe::NO_DROP);
    assert_eq!(c.capacity_factor, CAPACITY_FACTOR);
    assert_eq!(
        (c.bias_update_speed, c.aux_loss_alpha),
        (BIAS_UPDATE_SPEED, 0.0)
    );
    let c = Qwen35Config::from_hf(QWEN).unwrap();
    assert_eq!(c.capacity_factor, crate::moe::NO_DROP);
    assert_eq!(c.router_aux_loss_coef, 0.001);
    let text = edited(DEEPSEEK, &["capacity_factor"], Some(2.0.into()));
    let text = edited(&text, &["aux_loss_alpha"], Some(0.0001.into()));
    let c = DeepSeek3Config::from_hf(&text).unwrap();
    assert_eq!((c.capacity_factor, c.aux_loss_alpha), (2.0, 0.0001));
    let text = edited(
        QWEN,
        &["text_config", "router_aux_loss_coef"],
        Some(0.0.into()),
    );
    let c = Qwen35Config::from_hf(&text).unwrap();
    assert_eq!(c.router_aux_loss_coef, 0.0);
    for (field, value) in [("capacity_factor", -1.0), ("aux_loss_alpha", -0.5)] {
        let e = parse(&edited(DEEPSEEK, &[field], Some(value.into())))
            .unwrap_err()
            .to_string();
        assert!(e.contains(&format!("field `{field}`")), "{e}");
    }
}

/// `transformers` 5 writes RoPE's base under `rope_parameters`; it is read from there.
#[test]
fn rope_parameters_of_transformers_5_are_read() {
    let mut text = edited(LLAMA, &["rope_theta"], None);
    text = edited(
        &text,
        &["rope_parameters"],
        Some(serde_json::json!({"rope_theta": 123456.0, "rope_type": "default"})),
    );
    let c = LlamaConfig::from_hf(&text).unwrap();
    assert_eq!(c.rope_theta, 123_456.0);
}

/// Llama 3.1's `rope_scaling` is Llama 3's scaling, read in the legacy form and in the form
/// `transformers` 5 writes (`rope_parameters`), and written back by export; a scaling the
/// declared Llama does not implement is refused by its type, not run unscaled.
#[test]
fn llama3_rope_scaling_is_read_in_both_forms_and_other_types_are_refused() {
    use crate::llama::Llama3RopeScaling;
    let scaling = serde_json::json!({
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192
    });
    let legacy = edited(LLAMA, &["rope_scaling"], Some(scaling.clone()));
    let c = LlamaConfig::from_hf(&legacy).unwrap();
    assert_eq!(c.rope_scaling, Some(Llama3RopeScaling::llama3_1()));
    let mut parameters = scaling.clone();
    parameters["rope_theta"] = 500_000.0.into();
    let v5 = edited(
        &edited(
            &edited(LLAMA, &["rope_scaling"], None),
            &["rope_theta"],
            None,
        ),
        &["rope_parameters"],
        Some(parameters),
    );
    assert_eq!(LlamaConfig::from_hf(&v5).unwrap(), c);
    // Export writes it back; the written file reads as the same config.
    let written = crate::llama::hf::config_json(&c).to_string();
    assert_eq!(
        LlamaConfig::from_hf(&written).unwrap().rope_scaling,
        c.rope_scaling
    );
    // `default` is no scaling; another type is refused by name in either form.
    let none = edited(
        LLAMA,
        &["rope_scaling"],
        Some(serde_json::json!({"rope_type": "default"})),
    );
    assert_eq!(LlamaConfig::from_hf(&none).unwrap().rope_scaling, None);
    for text in [
        edited(
            LLAMA,
            &["rope_scaling"],
            Some(serde_json::json!({"type": "linear", "factor": 2.0})),
        ),
        edited(
            LLAMA,
            &["rope_parameters"],
            Some(serde_json::json!({"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4})),
        ),
    ] {
        let e = LlamaConfig::from_hf(&text).unwrap_err().to_string();
        assert!(e.contains("`rope_scaling` has type `linear`"), "{e}");
    }
    let mut unknown = scaling;
    unknown["beta_fast"] = 32.into();
    let e = LlamaConfig::from_hf(&edited(LLAMA, &["rope_scaling"], Some(unknown)))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`rope_scaling.beta_fast` is not part of `llama3`"),
        "{e}"
    );
}

/// DeepSeek-V3's YaRN in the form `transformers` 5 writes (`rope_parameters`) is the YaRN of
/// the legacy `rope_scaling`; Qwen3.5, which implements none, refuses a scaling by its type.
#[test]
fn rope_parameters_carry_a_scaling_as_rope_scaling_does() {
    let legacy = DeepSeek3Config::from_hf(DEEPSEEK).unwrap();
    assert!(legacy.mla.rope_scaling.is_some());
    let v: serde_json::Value = serde_json::from_str(DEEPSEEK).unwrap();
    let mut parameters = v["rope_scaling"].clone();
    parameters["rope_theta"] = v["rope_theta"].clone();
    let v5 = edited(
        &edited(
            &edited(DEEPSEEK, &["rope_scaling"], None),
            &["rope_theta"],
            None,
        ),
        &["rope_parameters"],
        Some(parameters),
    );
    assert_eq!(DeepSeek3Config::from_hf(&v5).unwrap(), legacy);
    // Export writes the YaRN back; the written file reads as the same config.
    let written = crate::deepseek3::hf::config_json(&legacy).to_string();
    assert_eq!(DeepSeek3Config::from_hf(&written).unwrap().mla, legacy.mla);
    // Both forms, disagreeing, are refused.
    let both = edited(
        DEEPSEEK,
        &["rope_parameters"],
        Some(
            serde_json::json!({"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 4096}),
        ),
    );
    let e = DeepSeek3Config::from_hf(&both).unwrap_err().to_string();
    assert!(e.contains("describe two RoPE scalings"), "{e}");
    let qwen = edited(
        QWEN,
        &["text_config", "rope_scaling"],
        Some(
            serde_json::json!({"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 32768}),
        ),
    );
    let e = Qwen35Config::from_hf(&qwen).unwrap_err().to_string();
    assert!(
        e.contains("`rope_scaling` has type `yarn`") && e.contains("Qwen3.5"),
        "{e}"
    );
}

/// Every key of each family's `transformers` config classes and published files
/// (`transformers_keys.json`, made by `cli/tests/fixtures/hf/make.py`) has a row in the
/// family's table or [`keys::COMMON`]: a key a new release adds fails here until its reader
/// says what it does with it.
#[test]
fn every_published_key_of_each_family_is_read_held_ignored_or_refused() {
    let listed: serde_json::Value =
        serde_json::from_str(include_str!("transformers_keys.json")).unwrap();
    for (family, table) in [
        ("llama", LlamaConfig::HF_KEYS),
        ("deepseek3", DeepSeek3Config::HF_KEYS),
        ("qwen35", Qwen35Config::HF_KEYS),
    ] {
        let missing: Vec<&str> = listed[family]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k.as_str().unwrap())
            .filter(|k| keys::handling(table, k).is_none())
            .collect();
        assert!(
            missing.is_empty(),
            "{family}: no row for {missing:?} in its `KEYS` or `keys::COMMON`"
        );
    }
}

/// A fixed key is named with its reason when it holds another value; a null is as good as
/// absent.
#[test]
fn fixed_keys_are_named_when_set_otherwise() {
    // The published FP8 file reads: its weights are dequantized on import.
    let fp8 = edited(
        DEEPSEEK,
        &["quantization_config"],
        Some(serde_json::json!({"quant_method": "fp8", "weight_block_size": [128, 128]})),
    );
    assert!(parse(&fp8).is_ok());
    let softmax = edited(DEEPSEEK, &["scoring_func"], Some("softmax".into()));
    let e = parse(&softmax).unwrap_err().to_string();
    assert!(
        e.contains("field `scoring_func` is \"softmax\"") && e.contains("sigmoid"),
        "{e}"
    );
    let dropout = edited(LLAMA, &["attention_dropout"], Some(0.1.into()));
    let e = parse(&dropout).unwrap_err().to_string();
    assert!(e.contains("field `attention_dropout` is 0.1"), "{e}");
    // The published values, spelled as integers or left null, pass.
    assert!(parse(&edited(LLAMA, &["attention_dropout"], Some(0.into()))).is_ok());
    assert!(
        parse(&edited(
            DEEPSEEK,
            &["quantization_config"],
            Some(serde_json::Value::Null)
        ))
        .is_ok()
    );
}

/// `docs/checkpoints.md` prints each family's table as [`keys::markdown`] writes it.
#[test]
fn the_checkpoints_page_prints_each_familys_key_table() {
    let page = include_str!("../../../docs/checkpoints.md");
    for (family, table) in [
        ("Llama", LlamaConfig::HF_KEYS),
        ("DeepSeek-V3", DeepSeek3Config::HF_KEYS),
        ("Qwen3.5", Qwen35Config::HF_KEYS),
    ] {
        assert!(
            page.contains(&keys::markdown(table)),
            "docs/checkpoints.md lacks {family}'s key table; it is:\n{}",
            keys::markdown(table)
        );
    }
}

/// Llama reads a tied head (Llama 3.2 1B and 3B), and writes it back.
#[test]
fn a_llama_file_with_tied_embeddings_reads_as_the_tied_model() {
    let tied = parse(&edited(LLAMA, &["tie_word_embeddings"], Some(true.into()))).unwrap();
    let c: &LlamaConfig = tied.get().unwrap();
    assert!(c.tie_embeddings);
    let (model, _) = tied.build().unwrap();
    let names: Vec<&str> = model.outer_params.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["embed", "final_norm"]);
    assert_eq!(
        crate::llama::hf::config_json(c)["tie_word_embeddings"],
        true
    );
    let untied = parse(LLAMA).unwrap();
    assert!(!untied.get::<LlamaConfig>().unwrap().tie_embeddings);
}
