//! Checkpoints in the safetensors format, read and written with the format's own crate: an
//! 8-byte little-endian header length, a JSON header naming each tensor's dtype, shape and
//! byte range, then the raw little-endian data (tensors in name order, as the crate lays
//! them out).
//!
//! Files are written atomically ([`write_atomic`]): a crash mid-write leaves the previous
//! checkpoint as it was. Each tensor's SHA-256 is recorded in the metadata
//! (`stackscan.sha256.{tensor}`), so a flipped bit in the data, which no header check can see,
//! is caught too. Reading checks everything a damaged or mismatched file can get wrong
//! (length, header, byte ranges, checksums, dtype, shape, missing tensors) and names the
//! tensor at fault: a file the crate refuses is walked once more to say which tensor and
//! what ([`diagnose`]). Nothing is uploaded until every tensor has been checked. A file
//! written before checksums were recorded still loads, with a warning.
//!
//! ```
//! use std::path::Path;
//! use stackscan_runtime::Error;
//! use stackscan_runtime::checkpoint::{Checkpoint, Tensor};
//!
//! let c = Checkpoint {
//!     tensors: vec![Tensor { name: "w".into(), shape: vec![2], data: vec![1.0, -2.0] }],
//!     ..Checkpoint::default()
//! };
//! let mut bytes = c.to_bytes()?;
//! let path = Path::new("latest.safetensors");
//! assert_eq!(Checkpoint::from_bytes(&bytes, path)?, c);
//! // One bit of `w`'s last element flipped: refused, naming the tensor.
//! let last = bytes.len() - 1;
//! bytes[last] ^= 0x01;
//! let err = Checkpoint::from_bytes(&bytes, path).unwrap_err();
//! assert!(matches!(err, Error::CheckpointChecksum { ref tensor, .. } if tensor == "w"));
//! # Ok::<(), Error>(())
//! ```

mod atomic;
mod checksum;
mod reader;

use std::collections::BTreeMap;
use std::path::Path;

use std::collections::HashMap;

use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use serde_json::Value;

use crate::error::{Error, Result};

pub use atomic::{write_atomic, write_atomic_with};
pub use reader::CheckpointReader;

/// One f32 tensor of a checkpoint, in natural (unsharded, row-major) layout.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    /// The name, e.g. `layers.attn.wq` or `adam.m.layers.attn.wq`.
    pub name: String,
    /// Its full shape.
    pub shape: Vec<i64>,
    /// Its elements.
    pub data: Vec<f32>,
}

/// The tensors and string metadata (`__metadata__`) of one safetensors file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Checkpoint {
    /// Tensors; a file holds them in name order (the safetensors crate's), and reading
    /// one gives them in that order.
    pub tensors: Vec<Tensor>,
    /// Free-form metadata: step, data position, RNG state. Keys starting with
    /// `stackscan.sha256.` are the file's checksums: [`Checkpoint::to_bytes`] writes its own
    /// in their place and [`Checkpoint::from_bytes`] checks them and leaves them out.
    pub metadata: BTreeMap<String, String>,
}

impl Checkpoint {
    /// The file's bytes, each tensor's checksum in the metadata.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut meta: HashMap<String, String> = self
            .metadata
            .iter()
            .filter(|(k, _)| checksum::tensor_of(k).is_none())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let raw: Vec<(&str, Vec<u8>, Vec<usize>)> = self
            .tensors
            .iter()
            .map(|t| {
                meta.insert(checksum::key(&t.name), checksum::of_f32(&t.data));
                let bytes = t.data.iter().flat_map(|x| x.to_le_bytes()).collect();
                let shape = t.shape.iter().map(|&d| d.max(0) as usize).collect();
                (t.name.as_str(), bytes, shape)
            })
            .collect();
        let views = raw
            .iter()
            .map(|(name, bytes, shape)| {
                TensorView::new(Dtype::F32, shape.clone(), bytes)
                    .map(|v| (*name, v))
                    .map_err(|e| Error::Program(format!("checkpoint tensor `{name}`: {e}")))
            })
            .collect::<Result<Vec<_>>>()?;
        let mut out = safetensors::serialize(views, Some(meta))
            .map_err(|e| Error::Program(format!("writing a checkpoint: {e}")))?;
        canonical_header(&mut out);
        Ok(out)
    }

    /// Parses a file's bytes and checks each tensor's data against its checksum; `path` only
    /// names the file in errors. A file without checksums loads with a warning; one with a
    /// checksum for a tensor it lacks, or a tensor without one, is refused.
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Checkpoint> {
        let st = match SafeTensors::deserialize(bytes) {
            Ok(st) => st,
            Err(e) => return Err(diagnose(bytes, path, &e.to_string())),
        };
        let (_, header) =
            SafeTensors::read_metadata(bytes).map_err(|e| diagnose(bytes, path, &e.to_string()))?;
        let mut metadata = BTreeMap::new();
        let mut sums = checksum::Checksums::new();
        for (k, v) in header.metadata().iter().flatten() {
            match checksum::tensor_of(k) {
                Some(tensor) => sums.insert(tensor.to_owned(), v.clone()),
                None => metadata.insert(k.clone(), v.clone()),
            };
        }
        let mut views = st.tensors();
        // In file order.
        views.sort_by_key(|(name, _)| header.info(name).map_or(0, |i| i.data_offsets.0));
        for (name, view) in &views {
            if !matches!(view.dtype(), Dtype::F32 | Dtype::BF16 | Dtype::F16) {
                return Err(Error::CheckpointDType {
                    tensor: name.clone(),
                    expected: LOADABLE.into(),
                    actual: format!("{:?}", view.dtype()),
                });
            }
        }
        checksum::match_tensors(&sums, views.iter().map(|(n, _)| n.as_str()), path)?;
        let mut tensors = Vec::with_capacity(views.len());
        for (name, view) in views {
            checksum::verify(&sums, &name, view.data(), path)?;
            let data = widened(view.dtype(), view.data());
            let shape = view.shape().iter().map(|&d| d as i64).collect();
            tensors.push(Tensor { name, shape, data });
        }
        Ok(Checkpoint { tensors, metadata })
    }

    /// The metadata of the file at `path` (its checksums left out), read from its header
    /// alone: what a command needs of a checkpoint before it reads and hashes every tensor
    /// (the model and config it records). A file too short for its header, or one whose
    /// header does not parse, is refused as [`Checkpoint::read`] refuses it.
    pub fn metadata_of(path: &Path) -> Result<BTreeMap<String, String>> {
        use std::io::Read;
        let io = |source| Error::Io {
            context: format!("reading checkpoint `{}`", path.display()),
            source,
        };
        let mut file = std::fs::File::open(path).map_err(io)?;
        let mut len = [0u8; 8];
        let mut head = Vec::new();
        if file.read_exact(&mut len).is_ok() {
            let n = u64::from_le_bytes(len);
            // A header longer than the file is the truncation `read` reports.
            let size = file.metadata().map_err(io)?.len();
            if n <= size.saturating_sub(8) {
                head = vec![0u8; n as usize];
                file.read_exact(&mut head).map_err(io)?;
            }
        }
        let header: serde_json::Map<String, Value> = match serde_json::from_slice(&head) {
            Ok(Value::Object(h)) => h,
            _ => return Checkpoint::read(path).map(|c| c.metadata),
        };
        Ok(header
            .get("__metadata__")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter(|(k, _)| checksum::tensor_of(k).is_none())
            .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
            .collect())
    }

    /// Reads and parses the file at `path`, checking its checksums ([`Checkpoint::from_bytes`]).
    pub fn read(path: &Path) -> Result<Checkpoint> {
        let bytes = std::fs::read(path).map_err(|source| Error::Io {
            context: format!("reading checkpoint `{}`", path.display()),
            source,
        })?;
        Checkpoint::from_bytes(&bytes, path)
    }

    /// Writes the file at `path` atomically, with checksums. A file already there that
    /// carries no checksums (one written before them, or one whose header does not parse)
    /// could not be verified when it was read, so it is not overwritten: it is moved aside
    /// first, to `{stem}.unverified.safetensors` in the same directory (a free name), and a
    /// warning says where.
    pub fn write(&self, path: &Path) -> Result<()> {
        let bytes = self.to_bytes()?;
        if path.is_file() && !checksum::file_has_checksums(path) {
            let aside = unverified_name(path);
            std::fs::rename(path, &aside).map_err(|source| Error::Io {
                context: format!("moving the unverified `{}` aside", path.display()),
                source,
            })?;
            tracing::warn!(
                "`{}` has no checksums and was not overwritten: it is now `{}`",
                path.display(),
                aside.display()
            );
        }
        write_atomic(path, &bytes)
    }

    /// The tensor called `name`, checked to have `shape`; `path` names the file in errors.
    pub fn tensor(&self, name: &str, shape: &[i64], path: &Path) -> Result<&Tensor> {
        let t = self
            .tensors
            .iter()
            .find(|t| t.name == name)
            .ok_or_else(|| Error::CheckpointMissing {
                path: path.to_owned(),
                tensor: name.to_owned(),
            })?;
        if t.shape != shape {
            return Err(Error::CheckpointShape {
                tensor: name.to_owned(),
                expected: shape.to_vec(),
                actual: t.shape.clone(),
            });
        }
        Ok(t)
    }

    /// The metadata entry `key` parsed as an integer; `path` names the file in errors.
    pub fn metadata_u64(&self, key: &str, path: &Path) -> Result<u64> {
        let v = self
            .metadata
            .get(key)
            .ok_or_else(|| Error::CheckpointCorrupt {
                path: path.to_owned(),
                reason: format!("metadata has no `{key}`"),
            })?;
        v.parse().map_err(|_| Error::CheckpointCorrupt {
            path: path.to_owned(),
            reason: format!("metadata `{key}` is `{v}`, not an integer"),
        })
    }
}

/// Rewrites the JSON header of the safetensors file `out` with its keys sorted, in place.
///
/// A free name beside `path` for a file moved aside unverified: `latest.unverified.safetensors`,
/// else `latest.unverified-2.safetensors`, and so on.
fn unverified_name(path: &Path) -> std::path::PathBuf {
    let stem = path
        .file_stem()
        .map_or_else(|| "checkpoint".into(), |s| s.to_string_lossy().into_owned());
    (1..)
        .map(|n| {
            let suffix = if n == 1 {
                String::new()
            } else {
                format!("-{n}")
            };
            path.with_file_name(format!("{stem}.unverified{suffix}.safetensors"))
        })
        .find(|p| !p.exists())
        .unwrap_or_else(|| path.with_extension("unverified"))
}

/// The crate takes the metadata as a `HashMap` and writes it in that map's iteration order,
/// which differs from process to process; sorted, the same state always gives the same bytes
/// (a checkpoint can be hashed, deduplicated or compared). The sorted text has the same
/// length as the unsorted one (the same keys and values), so the data's offsets hold.
fn canonical_header(out: &mut [u8]) {
    let Some(len) = out.get(..8).and_then(|b| <[u8; 8]>::try_from(b).ok()) else {
        return;
    };
    let end = usize::try_from(u64::from_le_bytes(len))
        .ok()
        .and_then(|l| l.checked_add(8));
    let Some(header) = end.and_then(|end| out.get_mut(8..end)) else {
        return;
    };
    let text_len = header.iter().rposition(|&b| b != b' ').map_or(0, |i| i + 1);
    // `serde_json`'s maps are ordered by key.
    let sorted = serde_json::from_slice::<Value>(&header[..text_len])
        .ok()
        .and_then(|v| serde_json::to_vec(&v).ok());
    if let Some(sorted) = sorted.filter(|t| t.len() == text_len) {
        header[..text_len].copy_from_slice(&sorted);
    }
}

/// Why the safetensors crate refused `bytes` (its message `refused`), said as the typed error
/// that names the tensor at fault: a cut file names the first tensor it cuts, a wrong dtype
/// the tensor that has it. The header is walked in file order, checking what a damaged or
/// foreign file gets wrong; what it cannot pin on one thing is a
/// [`CheckpointCorrupt`](Error::CheckpointCorrupt) with the crate's message.
fn diagnose(bytes: &[u8], path: &Path, refused: &str) -> Error {
    let corrupt = |reason: String| Error::CheckpointCorrupt {
        path: path.to_owned(),
        reason,
    };
    let truncated = |tensor: Option<&str>, needed: usize| Error::CheckpointTruncated {
        path: path.to_owned(),
        tensor: tensor.map(str::to_owned),
        needed,
        actual: bytes.len(),
    };
    let Some(len) = bytes.get(..8) else {
        return truncated(None, 8);
    };
    let mut le = [0u8; 8];
    le.copy_from_slice(len);
    let len = u64::from_le_bytes(le);
    let Some(header_end) = usize::try_from(len).ok().and_then(|l| l.checked_add(8)) else {
        return corrupt(format!("header length {len} is not addressable"));
    };
    let Some(header) = bytes.get(8..header_end) else {
        return truncated(None, header_end);
    };
    let header: Value = match serde_json::from_slice(header) {
        Ok(v) => v,
        Err(e) => return corrupt(format!("header is not JSON: {e}")),
    };
    let Value::Object(header) = header else {
        return corrupt("header is not a JSON object".into());
    };
    let mut entries = Vec::new();
    for (name, entry) in &header {
        if name == "__metadata__" {
            continue;
        }
        if let Some(dtype) = entry.get("dtype").and_then(Value::as_str)
            && !matches!(dtype, "F32" | "BF16" | "F16")
        {
            return Error::CheckpointDType {
                tensor: name.clone(),
                expected: LOADABLE.into(),
                actual: dtype.to_owned(),
            };
        }
        let end = entry
            .get("data_offsets")
            .and_then(Value::as_array)
            .and_then(|o| o.get(1))
            .and_then(Value::as_u64);
        if let Some(end) = end.and_then(|e| usize::try_from(e).ok()) {
            entries.push((end, name.as_str()));
        }
    }
    entries.sort_unstable();
    let data = bytes.len() - header_end;
    match entries.iter().find(|(end, _)| *end > data) {
        Some(&(end, name)) => truncated(Some(name), header_end + end),
        None => corrupt(refused.to_owned()),
    }
}

/// The element types a checkpoint's tensors load from: the f32 masters as written, or a
/// narrower copy of them (a bf16 or f16 checkpoint written by other tools), widened exactly.
const LOADABLE: &str = "F32, BF16 or F16";

/// Little-endian `bytes` of `dtype` (one of [`LOADABLE`]) as f32 values.
fn widened(dtype: Dtype, bytes: &[u8]) -> Vec<f32> {
    match dtype {
        Dtype::BF16 => bytes
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        Dtype::F16 => bytes
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        _ => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    }
}

#[cfg(test)]
mod tests;
