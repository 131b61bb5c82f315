//! Checkpoints in the safetensors format: an 8-byte little-endian header length, a JSON header
//! naming each tensor's dtype, shape and byte range, then the raw little-endian data.
//!
//! The format is written by hand (it is forty lines) so the runtime needs no extra crate beyond
//! `serde_json` for the header. Files are written atomically ([`write_atomic`]): a crash
//! mid-write leaves the previous checkpoint as it was. Each tensor's SHA-256 is recorded in the
//! metadata (`stackscan.sha256.{tensor}`), so a flipped bit in the data, which no header check
//! can see, is caught too. Reading checks everything a damaged or mismatched file can get wrong
//! (length, header, byte ranges, checksums, dtype, shape, missing tensors) and names the tensor
//! at fault; nothing is uploaded until every tensor has been checked. A file written before
//! checksums were recorded still loads, with a warning.
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
//! let mut bytes = c.to_bytes();
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

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Map, Value};

use crate::error::{Error, Result};

pub use atomic::write_atomic;

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
    /// Tensors in the order they are written.
    pub tensors: Vec<Tensor>,
    /// Free-form metadata: step, data position, RNG state. Keys starting with
    /// `stackscan.sha256.` are the file's checksums: [`Checkpoint::to_bytes`] writes its own
    /// in their place and [`Checkpoint::from_bytes`] checks them and leaves them out.
    pub metadata: BTreeMap<String, String>,
}

impl Checkpoint {
    /// The file's bytes, each tensor's checksum in the metadata.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut header = Map::new();
        let mut meta: Map<String, Value> = self
            .metadata
            .iter()
            .filter(|(k, _)| checksum::tensor_of(k).is_none())
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        for t in &self.tensors {
            meta.insert(checksum::key(&t.name), checksum::of_f32(&t.data).into());
        }
        if !meta.is_empty() {
            header.insert("__metadata__".into(), Value::Object(meta));
        }
        let mut offset = 0usize;
        for t in &self.tensors {
            let end = offset + t.data.len() * 4;
            let entry = serde_json::json!({
                "dtype": "F32",
                "shape": t.shape,
                "data_offsets": [offset, end],
            });
            header.insert(t.name.clone(), entry);
            offset = end;
        }
        let mut json = Value::Object(header).to_string().into_bytes();
        // The data starts 8-byte aligned, as the reference implementation writes it.
        while !json.len().is_multiple_of(8) {
            json.push(b' ');
        }
        let mut out = Vec::with_capacity(8 + json.len() + offset);
        out.extend_from_slice(&(json.len() as u64).to_le_bytes());
        out.extend_from_slice(&json);
        for t in &self.tensors {
            for x in &t.data {
                out.extend_from_slice(&x.to_le_bytes());
            }
        }
        out
    }

    /// Parses a file's bytes and checks each tensor's data against its checksum; `path` only
    /// names the file in errors. A file without checksums loads with a warning; one with a
    /// checksum for a tensor it lacks, or a tensor without one, is refused.
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Checkpoint> {
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
            return Err(truncated(None, 8));
        };
        let len = u64::from_le_bytes(len.try_into().map_err(|_| truncated(None, 8))?);
        let header_end = usize::try_from(len)
            .ok()
            .and_then(|l| l.checked_add(8))
            .ok_or_else(|| corrupt(format!("header length {len} is not addressable")))?;
        let Some(header) = bytes.get(8..header_end) else {
            return Err(truncated(None, header_end));
        };
        let header: Value = serde_json::from_slice(header)
            .map_err(|e| corrupt(format!("header is not JSON: {e}")))?;
        let Value::Object(header) = header else {
            return Err(corrupt("header is not a JSON object".into()));
        };
        let data = &bytes[header_end..];
        let mut metadata = BTreeMap::new();
        let mut sums = checksum::Checksums::new();
        let mut entries = Vec::new();
        for (name, entry) in header {
            if name == "__metadata__" {
                let Value::Object(meta) = entry else {
                    return Err(corrupt("`__metadata__` is not an object".into()));
                };
                for (k, v) in meta {
                    let Value::String(v) = v else {
                        return Err(corrupt(format!("metadata `{k}` is not a string")));
                    };
                    match checksum::tensor_of(&k) {
                        Some(tensor) => sums.insert(tensor.to_owned(), v),
                        None => metadata.insert(k, v),
                    };
                }
                continue;
            }
            let field = |key: &str| {
                entry
                    .get(key)
                    .ok_or_else(|| corrupt(format!("tensor `{name}` has no `{key}`")))
            };
            let dtype = field("dtype")?
                .as_str()
                .ok_or_else(|| corrupt(format!("tensor `{name}`: dtype is not a string")))?;
            if dtype != "F32" {
                return Err(Error::CheckpointDType {
                    tensor: name,
                    expected: "F32".into(),
                    actual: dtype.to_owned(),
                });
            }
            let shape = field("shape")?
                .as_array()
                .and_then(|dims| dims.iter().map(Value::as_i64).collect::<Option<Vec<_>>>())
                .filter(|dims| dims.iter().all(|&d| d >= 0))
                .ok_or_else(|| corrupt(format!("tensor `{name}`: shape is not a list of sizes")))?;
            let offsets = field("data_offsets")?
                .as_array()
                .and_then(|o| o.iter().map(Value::as_u64).collect::<Option<Vec<_>>>())
                .filter(|o| o.len() == 2 && o[0] <= o[1])
                .ok_or_else(|| corrupt(format!("tensor `{name}`: bad `data_offsets`")))?;
            let (start, end) = (offsets[0] as usize, offsets[1] as usize);
            let count = shape
                .iter()
                .try_fold(1usize, |acc, &d| acc.checked_mul(d as usize))
                .ok_or_else(|| corrupt(format!("tensor `{name}`: shape {shape:?} overflows")))?;
            if end - start != count * 4 {
                return Err(corrupt(format!(
                    "tensor `{name}`: {} bytes for shape {shape:?} of F32",
                    end - start
                )));
            }
            entries.push((start, end, name, shape));
        }
        // In file order, so a cut file names the first tensor it cuts.
        entries.sort_by_key(|(start, ..)| *start);
        checksum::match_tensors(&sums, entries.iter().map(|e| e.2.as_str()), path)?;
        let mut tensors = Vec::with_capacity(entries.len());
        for (start, end, name, shape) in entries {
            let Some(raw) = data.get(start..end) else {
                return Err(truncated(Some(&name), header_end + end));
            };
            checksum::verify(&sums, &name, raw, path)?;
            let data = raw
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            tensors.push(Tensor { name, shape, data });
        }
        Ok(Checkpoint { tensors, metadata })
    }

    /// Reads and parses the file at `path`, checking its checksums ([`Checkpoint::from_bytes`]).
    pub fn read(path: &Path) -> Result<Checkpoint> {
        let bytes = std::fs::read(path).map_err(|source| Error::Io {
            context: format!("reading checkpoint `{}`", path.display()),
            source,
        })?;
        Checkpoint::from_bytes(&bytes, path)
    }

    /// Writes the file at `path` atomically, with checksums.
    pub fn write(&self, path: &Path) -> Result<()> {
        write_atomic(path, &self.to_bytes())
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

#[cfg(test)]
mod tests;
