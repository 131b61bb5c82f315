//! Every key a published `config.json` of a family may hold, and what its reader does with
//! it: read, held to the declared model, left aside because it changes nothing we compute, or
//! refused because we do not implement it. Each family's table ([`ConfigFile::HF_KEYS`]) and
//! [`COMMON`] together cover every key of `transformers`' own config class of the family and
//! of its published files (a test walks the lists `make.py` took from `transformers`), so a
//! key a new release adds cannot slip through unnoticed; `docs/checkpoints.md` prints the
//! tables ([`markdown`]).
//!
//! [`ConfigFile::HF_KEYS`]: crate::configs::ConfigFile::HF_KEYS

use serde_json::Value;
use stackscan::Result;

use super::invalid;

/// What a reader does with one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HfKey {
    /// Read into the config: the model computes with it.
    Read,
    /// Read and held to what the declared model computes: the reader refuses another value,
    /// naming the key and the reason given here.
    Held(&'static str),
    /// Must be absent, null or this value (JSON); another is refused, naming the key and the
    /// reason.
    Fixed(&'static str, &'static str),
    /// Not read: it changes neither the weights nor what a step computes (why).
    Ignored(&'static str),
    /// Not implemented: a file that sets it is refused, with this reason.
    Refused(&'static str),
}

/// The keys every `transformers` config carries (`PretrainedConfig`'s) or a published file
/// adds, for every family.
pub const COMMON: &[(&str, HfKey)] = &[
    ("architectures", HfKey::Read),
    ("model_type", HfKey::Read),
    (
        "_name_or_path",
        HfKey::Ignored("bookkeeping of the library that wrote the file"),
    ),
    (
        "transformers_version",
        HfKey::Ignored("bookkeeping of the library that wrote the file"),
    ),
    (
        "auto_map",
        HfKey::Ignored("where `transformers` finds remote modelling code"),
    ),
    (
        "dtype",
        HfKey::Ignored(
            "the type the weights were saved in: each tensor's own is read, into f32 masters",
        ),
    ),
    (
        "torch_dtype",
        HfKey::Ignored(
            "the type the weights were saved in: each tensor's own is read, into f32 masters",
        ),
    ),
    (
        "output_attentions",
        HfKey::Ignored("what a `transformers` forward returns"),
    ),
    (
        "output_hidden_states",
        HfKey::Ignored("what a `transformers` forward returns"),
    ),
    (
        "return_dict",
        HfKey::Ignored("what a `transformers` forward returns"),
    ),
    (
        "use_cache",
        HfKey::Ignored("generation's key/value cache; a training step keeps none"),
    ),
    (
        "chunk_size_feed_forward",
        HfKey::Ignored("a `transformers` memory option that leaves the result the same"),
    ),
    (
        "id2label",
        HfKey::Ignored("class labels of classification heads; a causal LM has none"),
    ),
    (
        "label2id",
        HfKey::Ignored("class labels of classification heads; a causal LM has none"),
    ),
    (
        "problem_type",
        HfKey::Ignored("the loss of classification heads; a causal LM has none"),
    ),
    (
        "is_encoder_decoder",
        HfKey::Fixed("false", "the declared models are decoder-only"),
    ),
    (
        "bos_token_id",
        HfKey::Ignored(
            "the tokenizer's: a step reads token ids as the data holds them; `export` writes it back",
        ),
    ),
    (
        "eos_token_id",
        HfKey::Ignored(
            "the tokenizer's: a step reads token ids as the data holds them; `export` writes it back",
        ),
    ),
    (
        "pad_token_id",
        HfKey::Ignored(
            "the tokenizer's: a step reads token ids as the data holds them; `export` writes it back",
        ),
    ),
    (
        "initializer_range",
        HfKey::Ignored(
            "the spread of `transformers`' random initialisation; imported weights replace it",
        ),
    ),
    (
        "attention_dropout",
        HfKey::Fixed("0.0", "the declared models train without dropout"),
    ),
    (
        "tie_word_embeddings",
        HfKey::Held("the LM head is a weight of its own, not the embedding's transpose"),
    ),
];

/// The keys a file's reader leaves aside but `export` writes back as the file had them:
/// the tokenizer's special tokens, which `transformers`' generation reads from `config.json`.
pub const WRITTEN_BACK: [&str; 3] = ["bos_token_id", "eos_token_id", "pad_token_id"];

/// The [`WRITTEN_BACK`] keys a `config.json`'s text sets (a nested `text_config`'s over the
/// top level's), with their values.
pub fn written_back(text: &str) -> serde_json::Map<String, Value> {
    let Ok(Value::Object(top)) = serde_json::from_str::<Value>(text) else {
        return serde_json::Map::new();
    };
    let nested = top.get("text_config").and_then(Value::as_object);
    WRITTEN_BACK
        .iter()
        .filter_map(|&k| {
            let v = nested.and_then(|t| t.get(k)).or_else(|| top.get(k))?;
            (!v.is_null()).then(|| (k.to_owned(), v.clone()))
        })
        .collect()
}

/// How `key` is handled by a family whose own table is `family` (then [`COMMON`]).
pub fn handling(family: &[(&str, HfKey)], key: &str) -> Option<HfKey> {
    family
        .iter()
        .chain(COMMON)
        .find(|(k, _)| *k == key)
        .map(|&(_, h)| h)
}

/// Refuses a file (its top level and a nested `text_config`) that sets a [`HfKey::Refused`]
/// key, or a [`HfKey::Fixed`] key to another value, naming the key and the reason.
pub(crate) fn check(text: &str, family: &[(&str, HfKey)]) -> Result<()> {
    let Ok(Value::Object(top)) = serde_json::from_str::<Value>(text) else {
        return Ok(());
    };
    let nested = top
        .get("text_config")
        .and_then(Value::as_object)
        .into_iter()
        .flatten();
    for (key, value) in top.iter().chain(nested) {
        if value.is_null() {
            continue;
        }
        match handling(family, key) {
            Some(HfKey::Refused(why)) => {
                return Err(invalid(format!("field `{key}` is set: {why}")));
            }
            Some(HfKey::Fixed(expected, why)) => {
                let expected: Value = serde_json::from_str(expected)
                    .map_err(|e| invalid(format!("the table's value of `{key}`: {e}")))?;
                if !same(value, &expected) {
                    return Err(invalid(format!(
                        "field `{key}` is {value}; {why} ({expected})"
                    )));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// JSON values equal as a reader compares them: numbers by value (`0` is `0.0`).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

/// The table of `family` and [`COMMON`] as Markdown rows, sorted by key: the key, and what the
/// reader does with it.
pub fn markdown(family: &[(&str, HfKey)]) -> String {
    let mut keys: Vec<&str> = family.iter().chain(COMMON).map(|(k, _)| *k).collect();
    keys.sort_unstable();
    keys.dedup();
    let mut out = String::from("| key | what the reader does |\n|---|---|\n");
    for key in keys {
        let what = match handling(family, key) {
            Some(HfKey::Read) => "read".to_owned(),
            Some(HfKey::Held(why)) => format!("read and held: {why}"),
            Some(HfKey::Fixed(value, why)) => format!("must be `{value}`: {why}"),
            Some(HfKey::Ignored(why)) => format!("ignored: {why}"),
            Some(HfKey::Refused(why)) => format!("refused: {why}"),
            None => continue,
        };
        out.push_str(&format!("| `{key}` | {what} |\n"));
    }
    out
}
