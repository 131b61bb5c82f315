//! `--tokenizer`: a Hugging Face `tokenizer.json` run by the `tokenizers` crate gives the ids
//! the Python `tokenizers` library gave when it made the fixture (`make.py`), and a text
//! becomes a cached token file of them.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use std::path::{Path, PathBuf};

use stackscan_cli::tokenize::{encode, load, tokenize_text, tokenize_text_in_chunks};
use stackscan_runtime::tokens::{TokenFile, TokenFormat};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf/tokenizer")
}

#[test]
fn ids_are_those_the_python_library_gave() {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture().join("expected.json")).unwrap())
            .unwrap();
    let tok = load(&fixture().join("tokenizer.json")).unwrap();
    let want: Vec<u32> = serde_json::from_value(v["ids"].clone()).unwrap();
    assert_eq!(encode(&tok, v["sentence"].as_str().unwrap()).unwrap(), want);
    assert_eq!(
        tok.get_vocab_size(true),
        v["vocab_size"].as_u64().unwrap() as usize
    );
}

#[test]
fn a_text_becomes_a_cached_token_file_of_its_ids() {
    let dir = std::env::temp_dir().join(format!("stackscan-tokenize-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text = dir.join("corpus.txt");
    // Past one encoding chunk (1 MiB), so the chunked encoding is exercised.
    let line = "the model reads tokens and predicts the next one.\n";
    std::fs::write(&text, line.repeat((1 << 20) / line.len() + 10)).unwrap();
    let tokenizer = fixture().join("tokenizer.json");
    let first = tokenize_text(&tokenizer, &text).unwrap();
    assert_eq!(first.format, TokenFormat::U16);
    // The file holds the ids of the whole text, as one encoding of it gives them.
    let tok = load(&tokenizer).unwrap();
    let whole = encode(&tok, &std::fs::read_to_string(&text).unwrap()).unwrap();
    let line_ids = tok.encode(line, false).unwrap().get_ids().to_vec();
    assert_eq!(whole.len(), line_ids.len() * (whole.len() / line_ids.len()));
    let file = TokenFile::open(&first.path, first.format).unwrap();
    assert_eq!(file.len(), whole.len() as u64);
    assert_eq!(first.tokens, whole.len() as u64);
    let stored: Vec<u32> = std::fs::read(&first.path)
        .unwrap()
        .chunks_exact(2)
        .map(|b| u32::from(u16::from_le_bytes([b[0], b[1]])))
        .collect();
    assert!(stored == whole, "the token file holds other ids");
    // The second call reads the cache.
    let again = tokenize_text(&tokenizer, &text).unwrap();
    assert!(!again.fresh && again.path == first.path);
    // Not UTF-8: refused by name.
    let binary = dir.join("binary.txt");
    std::fs::write(&binary, [0xff, 0xfe, 0x00]).unwrap();
    let e = tokenize_text(&tokenizer, &binary).unwrap_err().to_string();
    assert!(e.contains("binary.txt") && e.contains("not UTF-8"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A byte-level BPE tokenizer as Llama-3's and Qwen's are built: their pre-tokenizer pattern,
/// which takes a run of line breaks (and the whitespace before it) as one piece, then bytes as
/// characters, with merges that join two line breaks and two spaces.
fn byte_level_tokenizer() -> tokenizers::Tokenizer {
    use tokenizers::pre_tokenizers::byte_level::ByteLevel;
    let mut vocab: std::collections::BTreeMap<String, u32> = ByteLevel::alphabet()
        .into_iter()
        .map(String::from)
        .zip(0..)
        .collect();
    let merges = [("Ċ", "Ċ"), ("Ġ", "Ġ"), ("Ġ", "a")];
    for (a, b) in merges {
        let next = vocab.len() as u32;
        vocab.insert(format!("{a}{b}"), next);
    }
    let json = serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [],
        "normalizer": null,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {
                    "type": "Split",
                    "pattern": {"Regex": "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
                    "behavior": "Isolated",
                    "invert": false
                },
                {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}
            ]
        },
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {
            "type": "BPE",
            "dropout": null,
            "unk_token": null,
            "continuing_subword_prefix": null,
            "end_of_word_suffix": null,
            "fuse_unk": false,
            "byte_fallback": false,
            "ignore_merges": false,
            "vocab": vocab,
            "merges": merges.iter().map(|(a, b)| format!("{a} {b}")).collect::<Vec<_>>()
        }
    });
    json.to_string().parse().unwrap()
}

/// Texts of several encoding chunks give exactly the ids of one encoding of the whole text,
/// whatever lies where a chunk would end: two line breaks there (one piece to the
/// pre-tokenizer, one token after the merge), or a line break followed by spaces.
#[test]
fn chunked_encoding_is_the_whole_texts_at_every_chunk_end() {
    let tok = byte_level_tokenizer();
    let mib = 1 << 20;
    for straddle in ["\n\n", "\n  a", "  \n\n\n  "] {
        // Words and single line breaks up to just before the first chunk's end, so the
        // straddling run begins one byte before it; then more of the same past a second end.
        let filler = "a bb ccc\nd ";
        let mut text = filler.repeat(mib / filler.len());
        text.truncate(mib - 1);
        text.push_str(straddle);
        while text.len() < 2 * mib + 100 {
            text.push_str(filler);
            text.push_str(straddle);
        }
        let whole = tok.encode(text.as_str(), false).unwrap().get_ids().to_vec();
        let chunked = encode(&tok, &text).unwrap();
        let first = whole.iter().zip(&chunked).position(|(a, b)| a != b);
        assert!(
            chunked == whole,
            "{straddle:?}: {} ids chunked, {} whole, first different at {first:?}",
            chunked.len(),
            whole.len()
        );
    }
}

/// The byte-level tokenizer with Llama 3's end-of-text token added as special, written to a
/// fresh directory as `tokenizer.json`; with `config`, a `tokenizer_config.json` beside it.
fn tokenizer_dir(name: &str, config: Option<&str>) -> (std::path::PathBuf, tokenizers::Tokenizer) {
    let dir = std::env::temp_dir().join(format!("stackscan-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut tok = byte_level_tokenizer();
    tok.add_special_tokens([tokenizers::AddedToken::from("<|end_of_text|>", true)])
        .unwrap();
    tok.save(dir.join("tokenizer.json"), false).unwrap();
    if let Some(c) = config {
        std::fs::write(dir.join("tokenizer_config.json"), c).unwrap();
    }
    (dir, tok)
}

fn stored(t: &stackscan_cli::tokenize::Tokenized) -> Vec<u32> {
    assert_eq!(t.format, TokenFormat::U16);
    std::fs::read(&t.path)
        .unwrap()
        .chunks_exact(2)
        .map(|b| u32::from(u16::from_le_bytes([b[0], b[1]])))
        .collect()
}

/// Plain text read a piece at a time (pieces of 10,000 bytes here, so a 200 kB text is read
/// in many, each cut where the tokenizer says it is safe) holds the ids of one encoding of the
/// whole text, then the end-of-document token the tokenizer knows (Llama 3's, found among its
/// special tokens without a `tokenizer_config.json`).
#[test]
fn streamed_text_is_the_whole_texts_ids_then_the_end_of_document() {
    let (dir, tok) = tokenizer_dir("streamed", None);
    let mut text = String::new();
    while text.len() < 200_000 {
        text.push_str("a bb ccc\nd \n\n  é ");
    }
    let path = dir.join("corpus.txt");
    std::fs::write(&path, &text).unwrap();
    let t = tokenize_text_in_chunks(&dir.join("tokenizer.json"), &path, 10_000).unwrap();
    let mut want = tok.encode(text.as_str(), false).unwrap().get_ids().to_vec();
    let eod = tok.token_to_id("<|end_of_text|>").unwrap();
    want.push(eod);
    let got = stored(&t);
    let first = want.iter().zip(&got).position(|(a, b)| a != b);
    assert!(
        got == want,
        "{} ids, {} wanted, first different at {first:?}",
        got.len(),
        want.len()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A `.jsonl` file is documents, one a line: each document's ids, then the end-of-document
/// token its `tokenizer_config.json` names; a line without a `"text"` is refused by number, and
/// a config naming a token the tokenizer lacks by name.
#[test]
fn each_document_of_a_jsonl_file_ends_in_the_end_of_document_token() {
    let (dir, tok) = tokenizer_dir(
        "jsonl",
        Some(r#"{"eos_token": {"content": "<|end_of_text|>", "special": true}}"#),
    );
    let docs = [
        "first document\n\nwith two lines",
        "zweites Dokument: é",
        "third",
    ];
    let lines: Vec<String> = docs
        .iter()
        .map(|d| serde_json::json!({ "text": d, "id": 7 }).to_string())
        .collect();
    let path = dir.join("docs.jsonl");
    std::fs::write(&path, lines.join("\n") + "\n\n").unwrap();
    let t = tokenize_text(&dir.join("tokenizer.json"), &path).unwrap();
    let eod = tok.token_to_id("<|end_of_text|>").unwrap();
    let want: Vec<u32> = docs
        .iter()
        .flat_map(|d| {
            let mut ids = tok.encode(*d, false).unwrap().get_ids().to_vec();
            ids.push(eod);
            ids
        })
        .collect();
    assert_eq!(stored(&t), want);
    assert_eq!(t.tokens, want.len() as u64);
    let bad = dir.join("bad.jsonl");
    std::fs::write(&bad, format!("{}\n{{\"body\": \"x\"}}\n", lines[0])).unwrap();
    let e = tokenize_text(&dir.join("tokenizer.json"), &bad)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("bad.jsonl` line 2") && e.contains("`text`"),
        "{e}"
    );
    std::fs::write(
        dir.join("tokenizer_config.json"),
        r#"{"eos_token": "<eot>"}"#,
    )
    .unwrap();
    let e = tokenize_text(&dir.join("tokenizer.json"), &path)
        .unwrap_err()
        .to_string();
    assert!(e.contains("`<eot>`") && e.contains("does not have"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}
