//! A checkpoint read one tensor at a time: the header once, then each tensor's bytes when
//! asked for, checked against its checksum, so a command that needs a model's weights in
//! turn (an export) never holds the whole file (weights, Adam's moments) in memory.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use safetensors::Dtype;
use serde_json::Value;

use super::{Checkpoint, checksum, widened};
use crate::error::{Error, Result};

/// Where one tensor lies and what it is.
#[derive(Clone, Debug)]
struct Entry {
    dtype: Dtype,
    shape: Vec<i64>,
    start: u64,
    end: u64,
}

/// A checkpoint file opened for [`CheckpointReader::tensor`].
#[derive(Debug)]
pub struct CheckpointReader {
    path: PathBuf,
    file: File,
    data_start: u64,
    entries: BTreeMap<String, Entry>,
    sums: checksum::Checksums,
    metadata: BTreeMap<String, String>,
}

impl CheckpointReader {
    /// Opens the checkpoint at `path` and reads its header. A header that does not parse,
    /// or names bytes the file lacks, is refused with the error [`Checkpoint::read`] gives
    /// (the file then read whole, to name what is wrong).
    pub fn open(path: &Path) -> Result<CheckpointReader> {
        let io = |source| Error::Io {
            context: format!("reading checkpoint `{}`", path.display()),
            source,
        };
        let mut file = File::open(path).map_err(io)?;
        let size = file.metadata().map_err(io)?.len();
        let Some((data_start, header)) = read_header(&mut file, size) else {
            return Err(refused(path));
        };
        let mut entries = BTreeMap::new();
        let mut sums = checksum::Checksums::new();
        let mut metadata = BTreeMap::new();
        for (name, v) in header {
            if name == "__metadata__" {
                for (k, v) in v.as_object().into_iter().flatten() {
                    let Some(v) = v.as_str() else { continue };
                    match checksum::tensor_of(k) {
                        Some(tensor) => sums.insert(tensor.to_owned(), v.to_owned()),
                        None => metadata.insert(k.clone(), v.to_owned()),
                    };
                }
                continue;
            }
            let Some(entry) = entry_of(&v).filter(|e| data_start + e.end <= size) else {
                return Err(refused(path));
            };
            entries.insert(name, entry);
        }
        checksum::match_tensors(&sums, entries.keys().map(String::as_str), path)?;
        Ok(CheckpointReader {
            path: path.to_owned(),
            file,
            data_start,
            entries,
            sums,
            metadata,
        })
    }

    /// The file's metadata, its checksums left out.
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }

    /// The names and shapes of the file's tensors.
    pub fn shapes(&self) -> impl Iterator<Item = (&str, &[i64])> {
        self.entries
            .iter()
            .map(|(name, e)| (name.as_str(), e.shape.as_slice()))
    }

    /// Tensor `name`, which must have `shape`, as f32 values: its bytes read, checked against
    /// the checksum the file records for it, and widened.
    pub fn tensor(&mut self, name: &str, shape: &[i64]) -> Result<Vec<f32>> {
        let e = self
            .entries
            .get(name)
            .ok_or_else(|| Error::CheckpointMissing {
                path: self.path.clone(),
                tensor: name.to_owned(),
            })?
            .clone();
        if e.shape != shape {
            return Err(Error::CheckpointShape {
                tensor: name.to_owned(),
                expected: shape.to_vec(),
                actual: e.shape,
            });
        }
        if !matches!(e.dtype, Dtype::F32 | Dtype::BF16 | Dtype::F16) {
            return Err(Error::CheckpointDType {
                tensor: name.to_owned(),
                expected: super::LOADABLE.into(),
                actual: format!("{:?}", e.dtype),
            });
        }
        let io = |source| Error::Io {
            context: format!("reading `{name}` of checkpoint `{}`", self.path.display()),
            source,
        };
        let mut bytes = vec![0u8; (e.end - e.start) as usize];
        self.file
            .seek(SeekFrom::Start(self.data_start + e.start))
            .map_err(io)?;
        self.file.read_exact(&mut bytes).map_err(io)?;
        checksum::verify(&self.sums, name, &bytes, &self.path)?;
        Ok(widened(e.dtype, &bytes))
    }
}

/// The header's start of data and its entries, or `None` for a file too short for the header
/// it declares or whose header is not a JSON object.
fn read_header(file: &mut File, size: u64) -> Option<(u64, serde_json::Map<String, Value>)> {
    let mut len = [0u8; 8];
    file.read_exact(&mut len).ok()?;
    let n = u64::from_le_bytes(len);
    if n > size.saturating_sub(8) {
        return None;
    }
    let mut head = vec![0u8; usize::try_from(n).ok()?];
    file.read_exact(&mut head).ok()?;
    match serde_json::from_slice(&head).ok()? {
        Value::Object(h) => Some((8 + n, h)),
        _ => None,
    }
}

/// One header entry, if it is well formed: a known dtype, a shape of non-negative sizes, and
/// a byte range as long as the shape needs.
fn entry_of(v: &Value) -> Option<Entry> {
    let dtype = match v.get("dtype")?.as_str()? {
        "F32" => Dtype::F32,
        "BF16" => Dtype::BF16,
        "F16" => Dtype::F16,
        "F64" => Dtype::F64,
        "I32" => Dtype::I32,
        "I64" => Dtype::I64,
        _ => return None,
    };
    let shape: Vec<i64> = v
        .get("shape")?
        .as_array()?
        .iter()
        .map(|d| d.as_i64().filter(|&d| d >= 0))
        .collect::<Option<_>>()?;
    let offsets = v.get("data_offsets")?.as_array()?;
    let (start, end) = (offsets.first()?.as_u64()?, offsets.get(1)?.as_u64()?);
    let elements = shape.iter().product::<i64>() as u64;
    let bits = elements * dtype.bitsize() as u64;
    (end >= start && (end - start) * 8 == bits).then_some(Entry {
        dtype,
        shape,
        start,
        end,
    })
}

/// The error [`Checkpoint::read`] gives for the file at `path`, which this reader could not
/// open (or, should the whole file read, a corrupt-header error saying so).
fn refused(path: &Path) -> Error {
    match Checkpoint::read(path) {
        Err(e) => e,
        Ok(_) => Error::CheckpointCorrupt {
            path: path.to_owned(),
            reason: "its header could not be read a tensor at a time".into(),
        },
    }
}
