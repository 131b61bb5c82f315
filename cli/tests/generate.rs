//! Generation (`stackscan generate`, [`Generator`]): greedy continuations of a batch of
//! prompts of different lengths equal to `transformers`' `generate` on each Llama,
//! DeepSeek-V3 and Qwen3.5 fixture
//! (`fixtures/hf/*/generate.json`, made by `generate.py`), and each step's logits from the
//! key/value cache equal to the whole sequence's forward program at that position, on a
//! random model, with causal and sliding-window attention.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan_models::registry::Architecture;
use std::path::{Path, PathBuf};
use std::process::Command;

use stackscan::decode::{DecodeModel, decode_kind};
use stackscan::model::logits_head;
use stackscan::plan::PlanOptions;
use stackscan::rng::Rng;
use stackscan::{Tensor, TensorType};
use stackscan_models::causal_lm::CausalLm;
use stackscan_models::gdn_layer::GdnForm;
use stackscan_models::jobs::ModelName;
use stackscan_models::llama::{Decoder, LlamaConfig, LlamaStack};
use stackscan_models::qwen35::{Gdn, Qwen35Config};
use stackscan_runtime::generate::{Generator, Sampling};
use stackscan_runtime::testing::cpu_client;
use stackscan_runtime::train::{check_hf_import, stored_weights};
use stackscan_runtime::{Client, Mesh, hf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/hf")
        .join(name)
}

/// `transformers`' greedy continuations of the fixture's prompts.
struct Expected {
    prompts: Vec<Vec<i32>>,
    greedy: Vec<Vec<i32>>,
}

fn expected(dir: &Path) -> Expected {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("generate.json")).unwrap()).unwrap();
    let rows = |k: &str| -> Vec<Vec<i32>> { serde_json::from_value(v[k].clone()).unwrap() };
    Expected {
        prompts: rows("prompts"),
        greedy: rows("greedy"),
    }
}

/// The fixture's model imported onto one device of `client`, ready to generate.
fn imported(client: &Client, model: &str, fixture_name: &str) -> Generator {
    let dir = fixture(fixture_name);
    let name: ModelName = model.parse().unwrap();
    let c = name
        .load(dir.join("config.json").to_str().unwrap())
        .unwrap();
    let decode = c.decode_model().unwrap();
    let map = c.hf_weights().unwrap();
    let files = check_hf_import(&map, &dir, &stored_weights(decode.model())).unwrap();
    Generator::load(client, decode, |j| Ok(hf::import(&map, &files, j)?.data)).unwrap()
}

/// Greedy decoding of the fixture's prompts, all in one batch, against `transformers`'
/// one-prompt-at-a-time continuations: every token equal.
fn greedy_matches_transformers(model: &str, fixture_name: &str) {
    let client = cpu_client(1);
    let mut g = imported(&client, model, fixture_name);
    let e = expected(&fixture(fixture_name));
    let new = e.greedy[0].len();
    let out = g.generate(&e.prompts, new, Sampling::GREEDY, &[]).unwrap();
    assert_eq!(out.tokens, e.greedy, "{fixture_name}: greedy tokens");
    assert_eq!(out.decode_steps, new - 1);
}

#[test]
fn llama_greedy_matches_transformers() {
    greedy_matches_transformers("llama", "llama");
}

#[test]
fn llama3_scaled_rope_greedy_matches_transformers() {
    greedy_matches_transformers("llama", "llama_llama3");
}

#[test]
fn tied_llama_greedy_matches_transformers() {
    greedy_matches_transformers("llama", "llama_tied");
}

#[test]
fn deepseek3_greedy_matches_transformers() {
    greedy_matches_transformers("deepseek3", "deepseek3");
}

#[test]
fn deepseek3_yarn_greedy_matches_transformers() {
    greedy_matches_transformers("deepseek3", "deepseek3_yarn");
}

#[test]
fn deepseek3_rotary_halves_greedy_matches_transformers() {
    greedy_matches_transformers("deepseek3", "deepseek3_halves");
}

/// DeepSeek-V3 as published, its weights FP8 with block scales: `transformers` ran on the
/// weights restored as the file declares them (`generate.py`), as the import restores them.
#[test]
fn deepseek3_fp8_greedy_matches_transformers() {
    greedy_matches_transformers("deepseek3", "deepseek3_fp8");
}

#[test]
fn qwen35_greedy_matches_transformers() {
    greedy_matches_transformers("qwen35", "qwen35");
}

#[test]
fn qwen35_as_published_greedy_matches_transformers() {
    greedy_matches_transformers("qwen35", "qwen35_vl");
}

/// Decoding kinds that do not match the stack's are refused, naming the kinds.
#[test]
fn decoding_kinds_must_match_the_stack() {
    let c = LlamaConfig::small(1);
    let model = Architecture::build(&c).unwrap().0;
    let head = logits_head::<CausalLm<Tensor, LlamaStack>>(&c);
    let e = DecodeModel::new(model.clone(), vec![], head.clone()).unwrap_err();
    assert!(
        e.to_string().contains("0 decoding kinds for a stack of 1"),
        "{e}"
    );
    let qwen = Qwen35Config::small(1, GdnForm::Recurrent);
    let e = DecodeModel::new(model, vec![decode_kind::<Gdn<Tensor>>(&qwen)], head).unwrap_err();
    assert!(e.to_string().contains("kind `layer`"), "{e}");
}

/// Random weights of `types`, seeded.
fn random_weights(types: &[TensorType], seed: u64) -> Vec<Vec<f32>> {
    let mut rng = Rng::new(seed);
    types
        .iter()
        .map(|t| {
            let n = t.dims.iter().product::<i64>() as usize;
            (0..n).map(|_| (rng.normal() * 0.3) as f32).collect()
        })
        .collect()
}

/// The whole sequence's logits `[len, vocab]` from the single-device forward program of the
/// training step at `c` with `weights` (the reference: no cache, every position at once).
fn full_forward(
    client: &Client,
    c: &LlamaConfig,
    weights: &[Vec<f32>],
    tokens: &[i32],
) -> Vec<f32> {
    let c = LlamaConfig {
        seq: tokens.len() as i64,
        batch_per_device: 1,
        ..*c
    };
    let (model, _) = Architecture::build(&c).unwrap();
    let head = logits_head::<CausalLm<Tensor, LlamaStack>>(&c);
    let mesh = Mesh::new(client, "fsdp", 1).unwrap();
    let program =
        stackscan::fsdp::forward_step_on(&model, PlanOptions::baseline(), mesh.layout(), &head)
            .unwrap();
    let exe = client.compile_program(&program, &mesh).unwrap();
    let device = &mesh.devices()[0];
    let dims = [1, tokens.len() as i64];
    let mut args = vec![
        client.buffer(tokens, &dims, device).unwrap(),
        client.buffer(tokens, &dims, device).unwrap(),
    ];
    let types = program.main().param_types();
    for (w, ty) in weights.iter().zip(&types[2..]) {
        args.push(client.buffer(w, &ty.dims, device).unwrap());
    }
    let refs: Vec<_> = args.iter().collect();
    exe.execute(&[refs]).unwrap()[0][0]
        .to_host::<f32>()
        .unwrap()
}

/// Each step's logits from the cache equal the whole sequence's at that position (1e-4 of
/// their scale), for three prompts of different lengths decoded as one batch.
fn cached_logits_equal_the_full_forward(window: Option<i64>) {
    let c = LlamaConfig {
        window,
        ..LlamaConfig::small(1)
    };
    let decode = DecodeModel::new(
        Architecture::build(&c).unwrap().0,
        vec![decode_kind::<Decoder<Tensor>>(&c)],
        logits_head::<CausalLm<Tensor, LlamaStack>>(&c),
    )
    .unwrap();
    let weights = random_weights(&decode.weight_types(), 5);
    let client = cpu_client(1);
    let mut g = Generator::new(&client, decode, &weights)
        .unwrap()
        .keeping_logits();
    let vocab = g.vocab() as usize;
    let prompts = vec![vec![3, 9, 1, 4, 1], vec![5], vec![2, 6, 5, 3, 5, 8, 9]];
    let new = 6;
    let out = g.generate(&prompts, new, Sampling::GREEDY, &[]).unwrap();
    assert_eq!(out.logits.len(), new);
    for (r, p) in prompts.iter().enumerate() {
        let mut seq = p.clone();
        seq.extend(&out.tokens[r][..new - 1]);
        let full = full_forward(&client, &c, &weights, &seq);
        for (step, logits) in out.logits.iter().enumerate() {
            let at = p.len() - 1 + step;
            let reference = &full[at * vocab..(at + 1) * vocab];
            let scale = reference.iter().fold(0.0f32, |m, x| m.max(x.abs()));
            let worst = logits[r]
                .iter()
                .zip(reference)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            assert!(
                worst <= 1e-4 * scale,
                "window {window:?}, prompt {r}, step {step}: logits off by {worst} (scale {scale})"
            );
        }
    }
}

#[test]
fn cached_logits_equal_the_full_forward_causal() {
    cached_logits_equal_the_full_forward(None);
}

#[test]
fn cached_logits_equal_the_full_forward_in_a_sliding_window() {
    cached_logits_equal_the_full_forward(Some(3));
}

/// A seeded draw repeats; a stop token ends its row's continuation.
#[test]
fn sampling_repeats_with_its_seed_and_stops_at_a_stop_token() {
    let client = cpu_client(1);
    let mut g = imported(&client, "llama", "llama");
    let prompts = vec![vec![1, 2, 3], vec![4]];
    let s = Sampling {
        temperature: 1.0,
        top_p: 0.9,
        seed: 11,
    };
    let a = g.generate(&prompts, 12, s, &[]).unwrap();
    let b = g.generate(&prompts, 12, s, &[]).unwrap();
    assert_eq!(a.tokens, b.tokens);
    assert!(a.tokens.iter().all(|t| t.len() == 12));
    let stop = a.tokens[0][3];
    let c = g.generate(&prompts, 12, s, &[stop]).unwrap();
    let first = a.tokens[0].iter().position(|&t| t == stop).unwrap();
    assert_eq!(c.tokens[0], a.tokens[0][..=first].to_vec());
}

/// Bad requests are refused by name before anything runs.
#[test]
fn bad_prompts_are_refused_by_name() {
    let client = cpu_client(1);
    let mut g = imported(&client, "llama", "llama");
    let e = g
        .generate(&[vec![1, 64]], 4, Sampling::GREEDY, &[])
        .unwrap_err();
    assert!(e.to_string().contains("prompt 0, token 1: 64"), "{e}");
    let e = g.generate(&[vec![]], 4, Sampling::GREEDY, &[]).unwrap_err();
    assert!(e.to_string().contains("prompt 0 is empty"), "{e}");
}

/// The command: ids in, the fixture's greedy continuations out, with its tokens per second.
#[test]
fn the_command_continues_token_prompts() {
    let dir = fixture("llama");
    let e = expected(&dir);
    let prompts =
        std::env::temp_dir().join(format!("stackscan-prompts-{}.txt", std::process::id()));
    let lines: Vec<String> = e
        .prompts
        .iter()
        .map(|p| p.iter().map(i32::to_string).collect::<Vec<_>>().join(" "))
        .collect();
    std::fs::write(&prompts, lines.join("\n")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_stackscan"))
        .args(["generate", "--init-from"])
        .arg(&dir)
        .arg("--prompt-tokens")
        .arg(&prompts)
        .args(["--max-new-tokens", &e.greedy[0].len().to_string()])
        .output()
        .unwrap();
    std::fs::remove_file(&prompts).ok();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (line, new) in lines.iter().zip(&e.greedy) {
        let joined = new.iter().map(i32::to_string).collect::<Vec<_>>().join(" ");
        assert!(stdout.contains(&format!("{line} | {joined}")), "{stdout}");
    }
    assert!(stdout.contains("tokens/s"), "{stdout}");
    // A prompt outside the vocabulary is a usage error, before anything compiles.
    std::fs::write(&prompts, "1 2 999").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_stackscan"))
        .args(["generate", "--init-from"])
        .arg(&dir)
        .arg("--prompt-tokens")
        .arg(&prompts)
        .output()
        .unwrap();
    std::fs::remove_file(&prompts).ok();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("token 999"));
    // More state than the machine has: refused before anything loads, with what it needs.
    std::fs::write(&prompts, "1 2 3\n".repeat(4000)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_stackscan"))
        .args(["generate", "--init-from"])
        .arg(&dir)
        .arg("--prompt-tokens")
        .arg(&prompts)
        .args(["--max-new-tokens", "1000000"])
        .output()
        .unwrap();
    std::fs::remove_file(&prompts).ok();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("generating 4000 sequences of up to 1000003 positions needs about"),
        "{stderr}"
    );
}

/// `--prompt TEXT` through a tokenizer: a checkpoint of the tiny Llama (random weights, saved
/// without compiling anything), prompts encoded by the fixture tokenizer, and the prompt's
/// text printed with its continuation decoded.
#[test]
fn the_command_tokenizes_text_prompts_and_prints_text() {
    use stackscan_runtime::train::{Progress, Trainer};
    let dir = std::env::temp_dir().join(format!("stackscan-generate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let name: ModelName = "llama".parse().unwrap();
    let c = name.load("tiny").unwrap();
    let (model, options) = c.build().unwrap();
    let client = cpu_client(1);
    let mesh = Mesh::new(&client, "fsdp", 1).unwrap();
    let t = Trainer::for_evaluation(&client, &mesh, &model, options).unwrap();
    let ckpt = dir.join("latest.safetensors");
    t.save(
        &ckpt,
        Progress {
            data_position: 0,
            rng_state: 0,
        },
    )
    .unwrap();
    let tokenizer = fixture("tokenizer").join("tokenizer.json");
    let out = Command::new(env!("CARGO_BIN_EXE_stackscan"))
        .args(["generate", "--checkpoint"])
        .arg(&ckpt)
        .arg("--tokenizer")
        .arg(&tokenizer)
        .args([
            "--prompt",
            "the model reads",
            "--prompt",
            "tokens",
            "--max-new-tokens",
            "5",
        ])
        .args(["--temperature", "0.8", "--top-p", "0.9", "--seed", "4"])
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).ok();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("the model reads"), "{stdout}");
    assert!(lines[1].starts_with("tokens"), "{stdout}");
    assert!(lines[2].contains("10 new tokens for 2 prompts"), "{stdout}");
    // Without a tokenizer, text is refused before anything loads.
    let out = Command::new(env!("CARGO_BIN_EXE_stackscan"))
        .args(["generate", "--checkpoint", "nowhere", "--prompt", "hi"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("`--prompt` needs a tokenizer"));
}
