//! `generate`: continue prompts with a model's weights (a training checkpoint or a Hugging
//! Face directory): the prompts prefilled as one batch, then one position at a time against
//! the layers' kept state ([`stackscan_runtime::generate`]), the tokens chosen greedily or
//! drawn at a temperature within a nucleus.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;
use stackscan::decode::DecodeModel;
use stackscan_models::registry::ModelConfig;
use stackscan_runtime::checkpoint::Checkpoint;
use stackscan_runtime::generate::{Generation, Generator, Sampling};
use stackscan_runtime::train::{check_checkpoint, check_hf_import, stored_weights, weight_names};
use stackscan_runtime::{AcceleratorOptions, Client, CompileCache, Plugin, hf, plugin};
use tokenizers::Tokenizer;

use super::CliError;
use super::args::WeightsArgs;

/// Arguments of `generate`.
#[derive(Clone, Debug, Args)]
pub struct GenerateArgs {
    /// The weights and the model they are of.
    #[command(flatten)]
    pub weights: WeightsArgs,
    /// A prompt, tokenized by `--tokenizer` (with its special tokens, as `transformers`
    /// does); give several for a batch.
    #[arg(long, value_name = "TEXT", required_unless_present = "prompt_tokens")]
    pub prompt: Vec<String>,
    /// Prompts as token ids: a file of one prompt per line, ids separated by spaces.
    #[arg(long, value_name = "FILE", conflicts_with = "prompt")]
    pub prompt_tokens: Option<PathBuf>,
    /// A Hugging Face `tokenizer.json` for `--prompt` and for printing the continuations
    /// (default: `--init-from`'s, when it has one).
    #[arg(long, value_name = "PATH")]
    pub tokenizer: Option<PathBuf>,
    /// New tokens per prompt.
    #[arg(long, default_value_t = 32, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_new_tokens: u32,
    /// Softmax temperature; 0 (the default) picks the most likely token (greedy).
    #[arg(long, default_value_t = 0.0, value_name = "T", value_parser = non_negative)]
    pub temperature: f64,
    /// Draw from the most likely tokens whose probability sums to at least this.
    #[arg(long, default_value_t = 1.0, value_name = "P", value_parser = share)]
    pub top_p: f64,
    /// Seed of the draws (with a temperature above 0).
    #[arg(long, default_value_t = 0, value_name = "S")]
    pub seed: u64,
    /// Stop a prompt's continuation after this token id (repeat for several).
    #[arg(long = "stop", value_name = "ID")]
    pub stop: Vec<i32>,
    /// PJRT plugin (as `train --plugin`); generation runs on its first device.
    #[arg(long, default_value = "cpu", value_name = "NAME|PATH")]
    pub plugin: String,
    /// Compile even if the persistent compile cache holds the programs, and store nothing.
    #[arg(long)]
    pub no_compile_cache: bool,
    /// Go on even if the weights and the layers' state are more than the machine (or the
    /// device) has.
    #[arg(long)]
    pub no_memory_check: bool,
}

fn non_negative(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(t) if t >= 0.0 && t.is_finite() => Ok(t),
        Ok(_) => Err("expected 0 (greedy) or a positive temperature".to_owned()),
        Err(e) => Err(format!("not a number: {e}")),
    }
}

fn share(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(p) if p > 0.0 && p <= 1.0 => Ok(p),
        Ok(_) => Err("expected a probability in (0, 1]".to_owned()),
        Err(e) => Err(format!("not a number: {e}")),
    }
}

impl GenerateArgs {
    /// The tokenizer asked for, or `--init-from`'s `tokenizer.json` when there is one.
    fn tokenizer_path(&self) -> Option<PathBuf> {
        self.tokenizer.clone().or_else(|| {
            let p = self.weights.init_from.as_ref()?.join("tokenizer.json");
            p.exists().then_some(p)
        })
    }
}

/// The prompts of `--prompt-tokens`: one per non-empty line, ids separated by whitespace.
fn prompt_file(path: &Path) -> Result<Vec<Vec<i32>>, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::Usage(format!("cannot read `{}`: {e}", path.display())))?;
    let mut prompts = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let ids = line
            .split_whitespace()
            .map(|w| {
                w.parse::<i32>().map_err(|_| {
                    CliError::Usage(format!(
                        "`{}` line {}: `{w}` is not a token id",
                        path.display(),
                        n + 1
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        prompts.push(ids);
    }
    if prompts.is_empty() {
        return Err(CliError::Usage(format!(
            "`{}` holds no prompt",
            path.display()
        )));
    }
    Ok(prompts)
}

/// Where the weights come from, their headers checked before anything loads or compiles.
enum Source {
    Checkpoint(PathBuf, Box<Checkpoint>),
    Hf(stackscan::hf_map::HfMap, hf::WeightFiles),
}

impl Source {
    /// `--checkpoint` (of the model `c` is a config of) or `--init-from`, checked against
    /// `model`'s weights.
    fn checked(
        a: &GenerateArgs,
        c: &ModelConfig,
        model: &stackscan::fsdp::StackModel,
    ) -> Result<Source, CliError> {
        match (a.weights.checkpoint_file(), &a.weights.init_from) {
            (Some(path), _) => {
                super::recorded::check_model(&path, c.model())?;
                let ckpt = Checkpoint::read(&path).map_err(|e| CliError::Usage(e.to_string()))?;
                check_checkpoint(&ckpt, &path, model)
                    .map_err(|e| CliError::Usage(format!("cannot generate: {e}")))?;
                Ok(Source::Checkpoint(path, Box::new(ckpt)))
            }
            (None, Some(dir)) => {
                let map = c.hf_weights().map_err(|e| CliError::Usage(e.to_string()))?;
                let files = check_hf_import(&map, dir, &stored_weights(model)).map_err(|e| {
                    CliError::Usage(format!("cannot import `{}`: {e}", dir.display()))
                })?;
                Ok(Source::Hf(map, files))
            }
            (None, None) => Err(CliError::Usage(
                "give `--checkpoint` or `--init-from`".into(),
            )),
        }
    }

    /// A generator of `decode` on `client`, its weights read from here.
    fn load(&self, client: &Client, decode: DecodeModel) -> Result<Generator, CliError> {
        let model = decode.model();
        let names = weight_names(model);
        let shapes: Vec<Vec<i64>> = stored_weights(model).into_iter().map(|(_, s)| s).collect();
        Ok(match self {
            Source::Checkpoint(path, ckpt) => Generator::load(client, decode, |j| {
                Ok(ckpt.tensor(&names[j], &shapes[j], path)?.data.clone())
            })?,
            Source::Hf(map, files) => {
                Generator::load(client, decode, |j| Ok(hf::import(map, files, j)?.data))?
            }
        })
    }
}

/// The prompts: `--prompt-tokens`' ids, or each `--prompt` tokenized by `tokenizer`.
fn prompts(a: &GenerateArgs, tokenizer: Option<&Tokenizer>) -> Result<Vec<Vec<i32>>, CliError> {
    match (&a.prompt_tokens, tokenizer) {
        (Some(path), _) => prompt_file(path),
        (None, Some(t)) => a
            .prompt
            .iter()
            .map(|text| {
                t.encode(text.as_str(), true)
                    .map(|e| e.get_ids().iter().map(|&id| id as i32).collect())
                    .map_err(|e| CliError::Usage(format!("tokenizing the prompt: {e}")))
            })
            .collect(),
        (None, None) => Err(CliError::Usage(
            "`--prompt` needs a tokenizer: give `--tokenizer` (or an `--init-from` \
             directory with a tokenizer.json), or the ids with `--prompt-tokens`"
                .into(),
        )),
    }
}

/// Refuses an empty prompt or a token outside `decode`'s vocabulary, naming the prompt.
fn check_prompts(prompts: &[Vec<i32>], decode: &DecodeModel) -> Result<(), CliError> {
    let vocab = decode
        .model()
        .inputs
        .first()
        .and_then(|i| i.values.clone())
        .map_or(0, |r| r.end);
    for (r, p) in prompts.iter().enumerate() {
        if p.is_empty() {
            return Err(CliError::Usage(format!("prompt {r} has no tokens")));
        }
        if let Some(bad) = p.iter().find(|&&t| t < 0 || i64::from(t) >= vocab) {
            return Err(CliError::Usage(format!(
                "prompt {r}: token {bad} is outside the model's vocabulary of {vocab}"
            )));
        }
    }
    Ok(())
}

/// Each prompt and its continuation (as text with a tokenizer, else as ids), then the counts
/// and rates.
fn print(
    out: &mut dyn Write,
    prompts: &[Vec<i32>],
    g: &Generation,
    tokenizer: Option<&Tokenizer>,
) -> Result<(), CliError> {
    for (p, new) in prompts.iter().zip(&g.tokens) {
        match tokenizer {
            Some(t) => {
                let ids = |v: &[i32]| v.iter().map(|&i| i as u32).collect::<Vec<_>>();
                let text = |v: &[i32]| {
                    t.decode(&ids(v), false)
                        .map_err(|e| CliError::failed(format!("decoding the tokens: {e}")))
                };
                writeln!(out, "{}{}", text(p)?, text(new)?)?;
            }
            None => {
                let join = |v: &[i32]| v.iter().map(i32::to_string).collect::<Vec<_>>().join(" ");
                writeln!(out, "{} | {}", join(p), join(new))?;
            }
        }
    }
    let made: usize = g.tokens.iter().map(Vec::len).sum();
    let rate = |n: f64, s: f64| if s > 0.0 { n / s } else { 0.0 };
    let prompt_tokens: usize = prompts.iter().map(Vec::len).sum();
    writeln!(
        out,
        "{made} new tokens for {} prompts: prefill {prompt_tokens} tokens in {:.3} s ({:.0} tokens/s), \
         decode {} steps in {:.3} s ({:.1} tokens/s); compiled in {:.2} s",
        prompts.len(),
        g.prefill_seconds,
        rate(prompt_tokens as f64, g.prefill_seconds),
        g.decode_steps,
        g.decode_seconds,
        rate((made - prompts.len().min(made)) as f64, g.decode_seconds),
        g.compile_seconds
    )?;
    Ok(())
}

/// Runs `generate`.
pub fn run(a: &GenerateArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let c = a.weights.config(None, None, 1)?;
    let decode = c
        .decode_model()
        .map_err(|e| CliError::Usage(e.to_string()))?;
    let tokenizer = match a.tokenizer_path() {
        Some(p) => Some(crate::tokenize::load(&p).map_err(|e| CliError::Usage(e.to_string()))?),
        None => None,
    };
    let prompts = prompts(a, tokenizer.as_ref())?;
    check_prompts(&prompts, &decode)?;
    // The weights whole and every layer's state for the longest prompt and the new tokens,
    // against the machine's memory now and the device's once its client reports it.
    let rows = prompts.len() as i64;
    let capacity =
        prompts.iter().map(Vec::len).max().unwrap_or(0) as i64 + i64::from(a.max_new_tokens);
    let refused = |e: stackscan::Error| {
        CliError::Usage(format!(
            "cannot generate here: {}",
            stackscan_models::memory::reason(e)
        ))
    };
    let on_host = matches!(
        super::args::devices_kind(&a.plugin, 1),
        stackscan_models::memory::Devices::Host(_)
    );
    if on_host && !a.no_memory_check {
        stackscan_models::memory::check_generation(&decode, rows, capacity, None)
            .map_err(refused)?;
    }
    let source = Source::checked(a, &c, decode.model())?;
    let plugin = Plugin::load(plugin::resolve(&a.plugin)?)?;
    let cache = CompileCache::from_env().filter(|_| !a.no_compile_cache);
    let client = Client::for_devices_with(&plugin, 1, AcceleratorOptions::default())?
        .with_compile_cache(cache);
    if let (false, Some(limit)) = (a.no_memory_check, client.device_memory_limit()) {
        stackscan_models::memory::check_generation(&decode, rows, capacity, Some(limit))
            .map_err(refused)?;
    }
    let mut generator = source.load(&client, decode)?;
    let sampling = Sampling {
        temperature: a.temperature,
        top_p: a.top_p,
        seed: a.seed,
    };
    let g = generator.generate(&prompts, a.max_new_tokens as usize, sampling, &a.stop)?;
    print(out, &prompts, &g, tokenizer.as_ref())
}
