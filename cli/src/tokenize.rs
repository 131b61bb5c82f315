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
    let mut ids = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let end = cut(tokenizer, rest, CHUNK)?;
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
pub fn tokenize_text(tokenizer: &Path, text: &Path) -> Result<Tokenized, TokenizeError> {
    let read = |p: &Path| {
        std::fs::read(p).map_err(|e| TokenizeError(format!("cannot read `{}`: {e}", p.display())))
    };
    let (tok_bytes, text_bytes) = (read(tokenizer)?, read(text)?);
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
    let mut h = Sha256::new();
    h.update((tok_bytes.len() as u64).to_le_bytes());
    h.update(&tok_bytes);
    h.update(&text_bytes);
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
    let text = std::str::from_utf8(&text_bytes).map_err(|e| {
        TokenizeError(format!(
            "`{}` is not UTF-8 text ({e}); a tokenizer reads text",
            text.display()
        ))
    })?;
    let ids = encode(&tok, text)?;
    let mut bytes = Vec::with_capacity(ids.len() * width as usize);
    for &id in &ids {
        match format {
            TokenFormat::U16 => {
                let id = u16::try_from(id)
                    .map_err(|_| TokenizeError(format!("id {id} of a {vocab}-token vocabulary")))?;
                bytes.extend_from_slice(&id.to_le_bytes());
            }
            _ => bytes.extend_from_slice(&id.to_le_bytes()),
        }
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| TokenizeError(format!("creating `{}`: {e}", dir.display())))?;
    }
    stackscan_runtime::checkpoint::write_atomic(&path, &bytes)
        .map_err(|e| TokenizeError(e.to_string()))?;
    Ok(Tokenized {
        path,
        format,
        tokens: ids.len() as u64,
        vocab,
        fresh: true,
    })
}
