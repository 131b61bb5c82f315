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

/// Text is encoded a chunk at a time, each ending at a line break (kept in its chunk), so a
/// corpus of gigabytes is never one string in the tokenizer.
const CHUNK: usize = 1 << 20;

/// The ids of `text` under `tokenizer`, without special tokens (a corpus is one stream).
pub fn encode(tokenizer: &Tokenizer, text: &str) -> Result<Vec<u32>, TokenizeError> {
    let mut ids = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut end = rest.len().min(CHUNK);
        while !rest.is_char_boundary(end) {
            end += 1;
        }
        if end < rest.len()
            && let Some(nl) = rest[..end].rfind('\n')
        {
            end = nl + 1;
        }
        let chunk = &rest[..end];
        let enc = tokenizer
            .encode(chunk, false)
            .map_err(|e| TokenizeError(format!("tokenizing: {e}")))?;
        ids.extend_from_slice(enc.get_ids());
        rest = &rest[end..];
    }
    Ok(ids)
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
