//! Text through a Hugging Face tokenizer (`tokenizer.json`) into the token files `--data`
//! reads: little-endian `u16` ids for vocabularies up to 65,536, else `u32`.
//!
//! A text file is tokenised once per tokenizer: the token file is kept in the cache under
//! the SHA-256 of both files, so the next run (or a resumed one) reads the same tokens
//! without tokenising again, and an edited text or tokenizer gets a file of its own.
//!
//! ```no_run
//! use std::path::Path;
//! use stackscan_cli::tokenize::tokenize_text;
//!
//! let t = tokenize_text(Path::new("tokenizer.json"), Path::new("corpus.txt"))?;
//! println!("{} tokens in {}", t.tokens, t.path.display());
//! # Ok::<(), stackscan_cli::tokenize::TokenizeError>(())
//! ```

use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use stackscan_runtime::tokens::TokenFormat;
use tokenizers::Tokenizer;

/// Why a text could not be tokenised.
#[derive(Debug)]
pub struct TokenizeError(pub String);

impl std::fmt::Display for TokenizeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TokenizeError {}

/// A tokenised text: where its token file is, in which format, how many tokens, and the
/// tokenizer's vocabulary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tokenized {
    /// The token file.
    pub path: PathBuf,
    /// Its format.
    pub format: TokenFormat,
    /// Tokens in it.
    pub tokens: u64,
    /// The tokenizer's vocabulary (added tokens included).
    pub vocab: usize,
    /// Whether this call tokenised the text (false: the cache had it).
    pub fresh: bool,
}

/// Text is encoded a chunk of about this many bytes at a time, so a corpus of gigabytes is
/// never one string in the tokenizer.
const CHUNK: usize = 1 << 20;

/// Bytes either side of a chunk's end within which [`cut`] looks for a safe place to end it.
const WINDOW: usize = 1 << 12;

/// The ids of `text` under `tokenizer`, without special tokens (a corpus is one stream):
/// exactly the ids of encoding `text` whole, found a chunk at a time ([`cut`]).
pub fn encode(tokenizer: &Tokenizer, text: &str) -> Result<Vec<u32>, TokenizeError> {
    encode_in(tokenizer, text, CHUNK)
}

/// [`encode`] a chunk of about `chunk` bytes at a time.
fn encode_in(tokenizer: &Tokenizer, text: &str, chunk: usize) -> Result<Vec<u32>, TokenizeError> {
    let mut ids = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let end = cut(tokenizer, rest, chunk)?;
        ids.extend(ids_of(tokenizer, &rest[..end])?);
        rest = &rest[end..];
    }
    Ok(ids)
}

fn ids_of(tokenizer: &Tokenizer, text: &str) -> Result<Vec<u32>, TokenizeError> {
    let enc = tokenizer
        .encode(text, false)
        .map_err(|e| TokenizeError(format!("tokenizing: {e}")))?;
    Ok(enc.get_ids().to_vec())
}

/// Where the chunk at the start of `text` ends: all of it when it is no longer than about
/// `chunk` bytes, else a token boundary near `chunk` at which tokenizing the two sides apart
/// gives what tokenizing them together gives, tried on the `WINDOW` bytes either side.
///
/// A pre-tokenizer's pattern can join what lies either side of a line break (Llama-3's and
/// Qwen's `\s*[\r\n]+` take a run of line breaks as one piece, GPT-2's `\s+(?!\S)` a line
/// break and the spaces after it), so no fixed character is a safe place to cut; the
/// tokenizer itself says where one is. A window without one (a run of whitespace longer than
/// it) moves the end on by a chunk.
fn cut(tokenizer: &Tokenizer, text: &str, chunk: usize) -> Result<usize, TokenizeError> {
    let mut at = chunk;
    while at + WINDOW < text.len() {
        let start = floor_char(text, at - WINDOW.min(at));
        let end = floor_char(text, at + WINDOW);
        let window = &text[start..end];
        let whole = tokenizer
            .encode(window, false)
            .map_err(|e| TokenizeError(format!("tokenizing: {e}")))?;
        let whole_ids = whole.get_ids();
        // Token starts in the window, nearest the preferred end first, the window's own edges
        // left out (a token there may continue outside it).
        let mut starts: Vec<usize> = whole
            .get_offsets()
            .iter()
            .map(|&(from, _)| from)
            .filter(|&o| o > 0 && o < window.len() && window.is_char_boundary(o))
            .collect();
        starts.dedup();
        starts.sort_by_key(|&o| (start + o).abs_diff(at));
        for o in starts.into_iter().take(64) {
            let mut apart = ids_of(tokenizer, &window[..o])?;
            apart.extend(ids_of(tokenizer, &window[o..])?);
            if apart == whole_ids {
                return Ok(start + o);
            }
        }
        at += chunk;
    }
    Ok(text.len())
}

/// The largest char boundary of `text` at or below `i`.
fn floor_char(text: &str, mut i: usize) -> usize {
    i = i.min(text.len());
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Loads the tokenizer at `path` (a `tokenizer.json`).
pub fn load(path: &Path) -> Result<Tokenizer, TokenizeError> {
    Tokenizer::from_file(path).map_err(|e| {
        TokenizeError(format!(
            "cannot read the tokenizer `{}`: {e}",
            path.display()
        ))
    })
}

/// The token file of `text` (UTF-8) under the tokenizer at `tokenizer`: from the cache when
/// it has it, else tokenised and written there (atomically).
///
/// The text is read a piece at a time, never whole: a plain text file is one document, read
/// in chunks of about `CHUNK` bytes cut where the tokenizer says it is safe ([`encode`]); a `.jsonl`
/// file is one document per line, each a JSON object's `"text"`. Every document is followed
/// by the tokenizer's end-of-document token ([`end_of_document`]), so a sequence that spans
/// two documents sees where one ends. From `BAR_FROM` bytes of text a progress bar runs on
/// stderr.
pub fn tokenize_text(tokenizer: &Path, text: &Path) -> Result<Tokenized, TokenizeError> {
    tokenize_text_in_chunks(tokenizer, text, CHUNK)
}

/// [`tokenize_text`] reading plain text `chunk` bytes at a time (tests use small chunks).
#[doc(hidden)]
pub fn tokenize_text_in_chunks(
    tokenizer: &Path,
    text: &Path,
    chunk: usize,
) -> Result<Tokenized, TokenizeError> {
    let tok_bytes = std::fs::read(tokenizer)
        .map_err(|e| TokenizeError(format!("cannot read `{}`: {e}", tokenizer.display())))?;
    let tok = Tokenizer::from_bytes(&tok_bytes).map_err(|e| {
        TokenizeError(format!(
            "cannot read the tokenizer `{}`: {e}",
            tokenizer.display()
        ))
    })?;
    let vocab = tok.get_vocab_size(true);
    let format = if vocab <= 1 << 16 {
        TokenFormat::U16
    } else {
        TokenFormat::U32
    };
    let eod = end_of_document(&tok, tokenizer)?;
    let lines = text.extension().is_some_and(|x| x == "jsonl");
    if eod.is_none() && lines {
        tracing::warn!(
            "the tokenizer `{}` names no end-of-document token (no `eos_token` in a \
             tokenizer_config.json beside it, none of the usual ones among its special \
             tokens): the documents of `{}` are joined without one",
            tokenizer.display(),
            text.display()
        );
    }
    // The key: the tokenizer, the text (read once, a piece at a time), how it is split into
    // documents and the token that ends each.
    let mut h = Sha256::new();
    h.update(b"stackscan tokens 2\n");
    h.update((tok_bytes.len() as u64).to_le_bytes());
    h.update(&tok_bytes);
    h.update([u8::from(lines)]);
    h.update(eod.map_or(-1i64, i64::from).to_le_bytes());
    let size = hash_file(&mut h, text)?;
    let key: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    let ext = if format == TokenFormat::U16 {
        "u16"
    } else {
        "u32"
    };
    let path = stackscan_runtime::plugin::cache_dir()
        .join("tokens")
        .join(format!("{key}.{ext}"));
    let width = if format == TokenFormat::U16 { 2 } else { 4 };
    if let Ok(meta) = std::fs::metadata(&path) {
        return Ok(Tokenized {
            tokens: meta.len() / width,
            path,
            format,
            vocab,
            fresh: false,
        });
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| TokenizeError(format!("creating `{}`: {e}", dir.display())))?;
    }
    let bar = (size >= BAR_FROM).then(|| {
        let bar = indicatif::ProgressBar::with_draw_target(
            Some(size),
            indicatif::ProgressDrawTarget::stderr(),
        );
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "tokenizing {msg} {bar:30} {bytes}/{total_bytes} ({bytes_per_sec}, eta {eta})",
        ) {
            bar.set_style(style);
        }
        bar.set_message(text.display().to_string());
        bar
    });
    let mut out = Ids {
        format,
        vocab,
        written: 0,
        failed: None,
    };
    let wrote = stackscan_runtime::checkpoint::write_atomic_with(&path, |file| {
        let mut w = std::io::BufWriter::new(file);
        let read = if lines {
            documents(text, &tok, eod, &mut out, &mut w, bar.as_ref())
        } else {
            stream(text, &tok, eod, chunk, &mut out, &mut w, bar.as_ref())
        };
        match read {
            Ok(()) => w.flush(),
            Err(e) => {
                out.failed = Some(e);
                Err(std::io::Error::other("tokenizing failed"))
            }
        }
    });
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    if let Some(e) = out.failed {
        return Err(e);
    }
    wrote.map_err(|e| TokenizeError(e.to_string()))?;
    Ok(Tokenized {
        path,
        format,
        tokens: out.written,
        vocab,
        fresh: true,
    })
}

/// Texts of at least this many bytes tokenise under a progress bar.
const BAR_FROM: u64 = 16 << 20;

/// Hashes the file at `path` into `h` a block at a time; returns its size.
fn hash_file(h: &mut Sha256, path: &Path) -> Result<u64, TokenizeError> {
    let mut f = std::fs::File::open(path)
        .map_err(|e| TokenizeError(format!("cannot read `{}`: {e}", path.display())))?;
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = f
            .read(&mut buf)
            .map_err(|e| TokenizeError(format!("reading `{}`: {e}", path.display())))?;
        if n == 0 {
            return Ok(size);
        }
        h.update(&buf[..n]);
        size += n as u64;
    }
}

/// Where the ids go: their format, how many were written, and why writing stopped.
struct Ids {
    format: TokenFormat,
    vocab: usize,
    written: u64,
    failed: Option<TokenizeError>,
}

impl Ids {
    fn write(&mut self, w: &mut impl Write, ids: &[u32]) -> Result<(), TokenizeError> {
        for &id in ids {
            let r = match self.format {
                TokenFormat::U16 => {
                    let id = u16::try_from(id).map_err(|_| {
                        TokenizeError(format!("id {id} of a {}-token vocabulary", self.vocab))
                    })?;
                    w.write_all(&id.to_le_bytes())
                }
                _ => w.write_all(&id.to_le_bytes()),
            };
            r.map_err(|e| TokenizeError(format!("writing the token file: {e}")))?;
        }
        self.written += ids.len() as u64;
        Ok(())
    }
}

/// A plain text file as one document, read `chunk` bytes at a time: each piece encoded up to
/// a place [`cut`] finds safe, the rest carried into the next.
fn stream(
    path: &Path,
    tok: &Tokenizer,
    eod: Option<u32>,
    chunk: usize,
    out: &mut Ids,
    w: &mut impl Write,
    bar: Option<&indicatif::ProgressBar>,
) -> Result<(), TokenizeError> {
    let not_utf8 = |e: std::str::Utf8Error| {
        TokenizeError(format!(
            "`{}` is not UTF-8 text ({e}); a tokenizer reads text",
            path.display()
        ))
    };
    let mut f = std::fs::File::open(path)
        .map_err(|e| TokenizeError(format!("cannot read `{}`: {e}", path.display())))?;
    let mut text = String::new();
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; chunk.max(1)];
    let mut at_end = false;
    // Two chunks and a window ahead, so a cut near the first chunk's end sees what follows
    // it; more while no safe place is found.
    let mut want = 2 * chunk + WINDOW;
    while !at_end || !text.is_empty() {
        while !at_end && text.len() < want {
            let n = f
                .read(&mut buf)
                .map_err(|e| TokenizeError(format!("reading `{}`: {e}", path.display())))?;
            if n == 0 {
                at_end = true;
                if let Err(e) = std::str::from_utf8(&pending) {
                    // The file ends inside a character.
                    return Err(not_utf8(e));
                }
                break;
            }
            if let Some(bar) = bar {
                bar.inc(n as u64);
            }
            pending.extend_from_slice(&buf[..n]);
            // Whole characters move to the text; a character split by the read waits.
            let valid = match std::str::from_utf8(&pending) {
                Ok(s) => s.len(),
                Err(e) if e.error_len().is_none() => e.valid_up_to(),
                Err(e) => return Err(not_utf8(e)),
            };
            text.push_str(std::str::from_utf8(&pending[..valid]).map_err(not_utf8)?);
            pending.drain(..valid);
        }
        let end = if at_end {
            text.len()
        } else {
            let end = cut(tok, &text, chunk)?;
            if end == text.len() {
                // No safe place within reach: read on.
                want += chunk;
                continue;
            }
            want = 2 * chunk + WINDOW;
            end
        };
        out.write(w, &encode_in(tok, &text[..end], chunk)?)?;
        text.drain(..end);
    }
    if let Some(eod) = eod {
        out.write(w, &[eod])?;
    }
    Ok(())
}

/// A `.jsonl` file as documents, one per line: each line a JSON object whose `"text"` is the
/// document, followed by the end-of-document token.
fn documents(
    path: &Path,
    tok: &Tokenizer,
    eod: Option<u32>,
    out: &mut Ids,
    w: &mut impl Write,
    bar: Option<&indicatif::ProgressBar>,
) -> Result<(), TokenizeError> {
    let f = std::fs::File::open(path)
        .map_err(|e| TokenizeError(format!("cannot read `{}`: {e}", path.display())))?;
    for (n, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line =
            line.map_err(|e| TokenizeError(format!("`{}` line {}: {e}", path.display(), n + 1)))?;
        if let Some(bar) = bar {
            bar.inc(line.len() as u64 + 1);
        }
        if line.trim().is_empty() {
            continue;
        }
        let bad =
            |why: String| TokenizeError(format!("`{}` line {}: {why}", path.display(), n + 1));
        let doc: serde_json::Value =
            serde_json::from_str(&line).map_err(|e| bad(format!("not JSON: {e}")))?;
        let text = doc
            .get("text")
            .and_then(serde_json::Value::as_str)
            .ok_or_else(|| bad("no string field `text` (one document per line)".into()))?;
        out.write(w, &encode(tok, text)?)?;
        if let Some(eod) = eod {
            out.write(w, &[eod])?;
        }
    }
    Ok(())
}

/// The tokens that end a document in the tokenizers people publish, tried in this order
/// when no `tokenizer_config.json` names one: GPT-2's and Qwen's, Llama 3's, Llama 2's and
/// Mistral's, Gemma's.
const KNOWN_END_OF_DOCUMENT: [&str; 4] = ["<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"];

/// The id that ends a document under `tok` (loaded from `path`): the `eos_token` of a
/// `tokenizer_config.json` beside it (as the Hub lays a model out), else the first of
/// `KNOWN_END_OF_DOCUMENT` it has; `None` when neither. A config that names a token the
/// tokenizer lacks is refused by name.
pub fn end_of_document(tok: &Tokenizer, path: &Path) -> Result<Option<u32>, TokenizeError> {
    let config = path.with_file_name("tokenizer_config.json");
    if let Ok(text) = std::fs::read_to_string(&config) {
        let v: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| TokenizeError(format!("`{}` is not JSON: {e}", config.display())))?;
        let named = match &v["eos_token"] {
            serde_json::Value::String(s) => Some(s.as_str()),
            other => other.get("content").and_then(serde_json::Value::as_str),
        };
        if let Some(name) = named {
            return tok.token_to_id(name).map(Some).ok_or_else(|| {
                TokenizeError(format!(
                    "`{}` names the end-of-document token `{name}`, which `{}` does not have",
                    config.display(),
                    path.display()
                ))
            });
        }
    }
    Ok(KNOWN_END_OF_DOCUMENT
        .iter()
        .find_map(|name| tok.token_to_id(name)))
}
