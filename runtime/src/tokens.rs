//! Training data from a flat token file: the little-endian `u16` (or `u32`) arrays that
//! nanoGPT-style pipelines write (`train.bin`), or a plain text file read as byte-level tokens.
//! The file is memory-mapped, checked against the vocabulary once when it is opened, and cut
//! into batches that are a pure function of their index, so a run resumed from a checkpoint's
//! data position sees exactly the batches an uninterrupted run would have.
//!
//! ```
//! use stackscan_runtime::tokens::{TokenBatches, TokenFile, TokenFormat};
//!
//! let path = std::env::temp_dir().join(format!("doc-tokens-{}.bin", std::process::id()));
//! let ids: Vec<u8> = (0u16..10).flat_map(|t| t.to_le_bytes()).collect();
//! std::fs::write(&path, ids)?;
//! let file = TokenFile::open(&path, TokenFormat::U16)?;
//! // Vocabulary 16, 2 sequences of 3 tokens per batch.
//! let data = TokenBatches::new(file, 16, 2, 3)?;
//! let (tokens, labels) = data.batch(0);
//! assert_eq!(tokens, [0, 1, 2, 3, 4, 5]);
//! assert_eq!(labels, [1, 2, 3, 4, 5, 6]);
//! # std::fs::remove_file(&path)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::error::{Error, Result};
use crate::pjrt::os::MappedFile;

/// How a token file stores its ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenFormat {
    /// Little-endian `u16` per token (nanoGPT's `train.bin`, vocabularies up to 65,536).
    U16,
    /// Little-endian `u32` per token.
    U32,
    /// One byte per token: a plain text file, tokenised at the byte level (ids 0..=255).
    Bytes,
}

impl TokenFormat {
    /// Every format, in the order the help text lists them.
    pub const ALL: [TokenFormat; 3] = [TokenFormat::U16, TokenFormat::U32, TokenFormat::Bytes];

    /// The format a file's name suggests: text (`.txt`, `.md`, `.text`) is read as bytes,
    /// anything else as `u16`, what nanoGPT-style pipelines write.
    pub fn for_path(path: &Path) -> TokenFormat {
        let text = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| ["txt", "md", "text"].contains(&e.to_ascii_lowercase().as_str()));
        if text {
            TokenFormat::Bytes
        } else {
            TokenFormat::U16
        }
    }

    /// Bytes per token.
    pub const fn width(self) -> usize {
        match self {
            TokenFormat::U16 => 2,
            TokenFormat::U32 => 4,
            TokenFormat::Bytes => 1,
        }
    }

    /// The name as written on the command line.
    pub const fn as_str(self) -> &'static str {
        match self {
            TokenFormat::U16 => "u16",
            TokenFormat::U32 => "u32",
            TokenFormat::Bytes => "bytes",
        }
    }
}

impl fmt::Display for TokenFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TokenFormat {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        TokenFormat::ALL
            .into_iter()
            .find(|f| f.as_str() == s)
            .ok_or_else(|| format!("unknown token format `{s}`; expected `u16`, `u32` or `bytes`"))
    }
}

/// A mapped token file.
#[derive(Debug)]
pub struct TokenFile {
    path: PathBuf,
    map: MappedFile,
    format: TokenFormat,
}

impl TokenFile {
    /// Maps the file at `path`, whose size must be a whole number of tokens.
    pub fn open(path: &Path, format: TokenFormat) -> Result<TokenFile> {
        let map = MappedFile::open(path)?;
        let size = map.bytes().len();
        if size % format.width() != 0 {
            return Err(Error::TokenFile {
                path: path.to_path_buf(),
                reason: format!(
                    "its {size} bytes are not a whole number of {format} tokens ({} bytes each)",
                    format.width()
                ),
            });
        }
        Ok(TokenFile {
            path: path.to_path_buf(),
            map,
            format,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's format.
    pub fn format(&self) -> TokenFormat {
        self.format
    }

    /// The number of tokens.
    pub fn len(&self) -> u64 {
        (self.map.bytes().len() / self.format.width()) as u64
    }

    /// Whether the file holds no token.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Token `i`; `i` must be below [`TokenFile::len`].
    fn token(&self, i: usize) -> u32 {
        let b = self.map.bytes();
        match self.format {
            TokenFormat::Bytes => u32::from(b[i]),
            TokenFormat::U16 => u32::from(u16::from_le_bytes([b[2 * i], b[2 * i + 1]])),
            TokenFormat::U32 => {
                u32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
            }
        }
    }

    /// The first token outside `0..vocab`, as [`Error::TokenOutOfRange`] with its position.
    pub fn check_vocab(&self, vocab: usize) -> Result<()> {
        let max = match self.format {
            TokenFormat::Bytes => 1 << 8,
            TokenFormat::U16 => 1 << 16,
            TokenFormat::U32 => usize::MAX,
        };
        if vocab >= max {
            // No id this format can hold is out of range: nothing to read.
            return Ok(());
        }
        let len = self.map.bytes().len() / self.format.width();
        match (0..len).find(|&i| self.token(i) as usize >= vocab) {
            None => Ok(()),
            Some(i) => Err(Error::TokenOutOfRange {
                path: self.path.clone(),
                position: i as u64,
                value: self.token(i),
                vocab,
            }),
        }
    }
}

/// Next-token batches from a token file: `batch` sequences of `seq` tokens each, their labels
/// the same tokens shifted by one.
///
/// The file is cut into non-overlapping windows of `seq + 1` tokens (stride `seq`), and batch
/// `i` holds windows `i·batch … i·batch + batch − 1`, wrapping around at the end of the file
/// (a new epoch, same order). With one batch per device and step, device `d` of step `s` on
/// `n` devices reads batch `s·n + d`: each device its own slice, the same on every run.
#[derive(Debug)]
pub struct TokenBatches {
    file: TokenFile,
    batch: usize,
    seq: usize,
    windows: u64,
}

impl TokenBatches {
    /// Checks `file` against the vocabulary (every token, once) and that it holds at least one
    /// sequence with its label.
    pub fn new(file: TokenFile, vocab: usize, batch: usize, seq: usize) -> Result<TokenBatches> {
        if batch == 0 || seq == 0 {
            return Err(Error::TokenFile {
                path: file.path.clone(),
                reason: format!("batches of {batch} × {seq} tokens hold nothing"),
            });
        }
        if file.len() < seq as u64 + 1 {
            return Err(Error::TokenFile {
                path: file.path.clone(),
                reason: format!(
                    "it holds {} tokens ({}), fewer than the {} that one sequence of {seq} and its last label need",
                    file.len(),
                    file.format,
                    seq + 1
                ),
            });
        }
        file.check_vocab(vocab)?;
        let windows = (file.len() - 1) / seq as u64;
        Ok(TokenBatches {
            file,
            batch,
            seq,
            windows,
        })
    }

    /// The underlying file.
    pub fn file(&self) -> &TokenFile {
        &self.file
    }

    /// Sequences in one pass over the file.
    pub fn windows(&self) -> u64 {
        self.windows
    }

    /// Batch `index`: `(tokens, labels)`, each `batch × seq` ids in row-major order.
    pub fn batch(&self, index: u64) -> (Vec<i32>, Vec<i32>) {
        let n = self.batch * self.seq;
        let (mut tokens, mut labels) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for b in 0..self.batch as u64 {
            let window = index.wrapping_mul(self.batch as u64).wrapping_add(b) % self.windows;
            // In range: window < windows = (len − 1) / seq, so start + seq ≤ len − 1.
            let start = (window * self.seq as u64) as usize;
            // Ids are below the checked vocabulary, itself a device-side i32 count.
            tokens.extend((start..start + self.seq).map(|i| self.file.token(i) as i32));
            labels.extend((start + 1..start + self.seq + 1).map(|i| self.file.token(i) as i32));
        }
        (tokens, labels)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(name: &str, bytes: &[u8]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("stackscan-tokens-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let p = dir.join(name);
        std::fs::write(&p, bytes).expect("write");
        p
    }

    #[test]
    fn reads_each_format_little_endian() {
        let p = write("le.u32", &[1, 0, 0, 0, 0, 1, 0, 0, 7, 0, 0, 0]);
        let f = TokenFile::open(&p, TokenFormat::U32).expect("open");
        assert_eq!(f.len(), 3);
        assert_eq!((0..3).map(|i| f.token(i)).collect::<Vec<_>>(), [1, 256, 7]);
        let f = TokenFile::open(&p, TokenFormat::U16).expect("open");
        assert_eq!(f.len(), 6);
        assert_eq!(f.token(2), 256);
        let t = write("hi.txt", b"hi!");
        assert_eq!(TokenFormat::for_path(&t), TokenFormat::Bytes);
        assert_eq!(
            TokenFormat::for_path(Path::new("train.bin")),
            TokenFormat::U16
        );
        let f = TokenFile::open(&t, TokenFormat::Bytes).expect("open");
        assert_eq!(
            (0..3).map(|i| f.token(i)).collect::<Vec<_>>(),
            [104, 105, 33]
        );
    }

    #[test]
    fn a_partial_token_or_a_short_file_is_refused() {
        let p = write("odd.bin", &[1, 0, 2]);
        let e = TokenFile::open(&p, TokenFormat::U16).expect_err("3 bytes");
        assert!(
            e.to_string().contains("not a whole number of u16 tokens"),
            "{e}"
        );
        let p = write("short.bin", &[1, 0, 2, 0]);
        let f = TokenFile::open(&p, TokenFormat::U16).expect("open");
        let e = TokenBatches::new(f, 8, 1, 2).expect_err("2 tokens, 3 needed");
        assert!(matches!(e, Error::TokenFile { .. }), "{e}");
    }

    #[test]
    fn names_the_first_token_outside_the_vocabulary() {
        let ids: Vec<u8> = [3u16, 1, 9, 12, 2]
            .iter()
            .flat_map(|t| t.to_le_bytes())
            .collect();
        let p = write("vocab.bin", &ids);
        let f = TokenFile::open(&p, TokenFormat::U16).expect("open");
        match TokenBatches::new(f, 9, 1, 2) {
            Err(Error::TokenOutOfRange {
                position,
                value,
                vocab,
                ..
            }) => assert_eq!((position, value, vocab), (2, 9, 9)),
            other => panic!("expected TokenOutOfRange, got {other:?}"),
        }
        let f = TokenFile::open(&p, TokenFormat::U16).expect("open");
        TokenBatches::new(f, 13, 1, 2).expect("every id below 13");
    }

    #[test]
    fn batches_are_consecutive_windows_that_wrap() {
        // 11 tokens, windows of 3 + 1: [0..4), [3..7), [6..10); 3 windows.
        let ids: Vec<u8> = (0u16..11).flat_map(|t| t.to_le_bytes()).collect();
        let p = write("wrap.bin", &ids);
        let f = TokenFile::open(&p, TokenFormat::U16).expect("open");
        let d = TokenBatches::new(f, 100, 2, 3).expect("batches");
        assert_eq!(d.windows(), 3);
        assert_eq!(d.batch(0), (vec![0, 1, 2, 3, 4, 5], vec![1, 2, 3, 4, 5, 6]));
        // Batch 1: windows 2 and 0 (wrapped).
        assert_eq!(d.batch(1), (vec![6, 7, 8, 0, 1, 2], vec![7, 8, 9, 1, 2, 3]));
        assert_eq!(
            d.batch(1),
            d.batch(4),
            "a pure function of the index, period 3"
        );
    }
}
