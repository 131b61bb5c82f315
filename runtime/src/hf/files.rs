//! A Hugging Face model directory's weight files: `model.safetensors`, or the shards a
//! `model.safetensors.index.json` lists. Files are mapped, not read, and a tensor is
//! converted to `f32` only when asked for, so importing a model holds one tensor at a time
//! on the host rather than the whole checkpoint.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use half::{bf16, f16};
use safetensors::{Dtype, SafeTensors};

use super::bad;
use crate::error::{Error, Result};
use crate::pjrt::os::MappedFile;

/// The single-file checkpoint's name.
pub const SINGLE: &str = "model.safetensors";
/// The index of a sharded checkpoint.
pub const INDEX: &str = "model.safetensors.index.json";

/// Where one tensor lies.
#[derive(Clone, Debug)]
struct Entry {
    file: usize,
    dtype: Dtype,
    shape: Vec<i64>,
    /// Byte range in the file.
    bytes: (usize, usize),
}

/// The weight files of a model directory, every tensor's header read.
#[derive(Debug)]
pub struct WeightFiles {
    dir: PathBuf,
    files: Vec<(PathBuf, MappedFile)>,
    tensors: BTreeMap<String, Entry>,
}

impl WeightFiles {
    /// Opens `dir`'s `model.safetensors`, or every shard its `model.safetensors.index.json`
    /// names (each tensor where the index says it is, none twice).
    pub fn open(dir: &Path) -> Result<WeightFiles> {
        let index = dir.join(INDEX);
        let names: Vec<String> = if index.is_file() {
            let text = std::fs::read_to_string(&index)
                .map_err(|e| Error::io(format!("reading `{}`", index.display()), e))?;
            let v: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| bad(dir, None, format!("`{INDEX}` is not JSON: {e}")))?;
            let map = v
                .get("weight_map")
                .and_then(|m| m.as_object())
                .ok_or_else(|| bad(dir, None, format!("`{INDEX}` has no `weight_map`")))?;
            let mut files: Vec<String> = Vec::new();
            for (tensor, file) in map {
                let file = file.as_str().ok_or_else(|| {
                    bad(dir, Some(tensor), format!("`{INDEX}` names no file for it"))
                })?;
                if file.contains('/') || file.contains("..") {
                    return Err(bad(
                        dir,
                        Some(tensor),
                        format!("file `{file}` is outside the directory"),
                    ));
                }
                if !files.iter().any(|f| f == file) {
                    files.push(file.to_owned());
                }
            }
            files
        } else if dir.join(SINGLE).is_file() {
            vec![SINGLE.to_owned()]
        } else {
            return Err(bad(
                dir,
                None,
                format!("neither `{SINGLE}` nor `{INDEX}` is there"),
            ));
        };
        let mut out = WeightFiles {
            dir: dir.to_owned(),
            files: Vec::new(),
            tensors: BTreeMap::new(),
        };
        for name in names {
            out.add(&dir.join(name))?;
        }
        Ok(out)
    }

    fn add(&mut self, path: &Path) -> Result<()> {
        let map = MappedFile::open(path)?;
        let (header, meta) = SafeTensors::read_metadata(map.bytes()).map_err(|e| {
            bad(
                &self.dir,
                None,
                format!("`{}` is not a safetensors file: {e}", path.display()),
            )
        })?;
        let start = 8 + header;
        let file = self.files.len();
        for (name, info) in meta.tensors() {
            if self.tensors.contains_key(&name) {
                return Err(bad(&self.dir, Some(&name), "is stored twice".into()));
            }
            let (a, b) = info.data_offsets;
            self.tensors.insert(
                name,
                Entry {
                    file,
                    dtype: info.dtype,
                    shape: info.shape.iter().map(|&d| d as i64).collect(),
                    bytes: (start + a, start + b),
                },
            );
        }
        self.files.push((path.to_owned(), map));
        Ok(())
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Every tensor's name, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// Tensor `name`'s shape and dtype (safetensors' spelling), if the files hold it.
    pub fn header(&self, name: &str) -> Option<(&[i64], String)> {
        self.tensors
            .get(name)
            .map(|e| (e.shape.as_slice(), format!("{:?}", e.dtype)))
    }

    /// Whether `name` holds a dtype [`read`](Self::read) converts.
    pub fn readable(&self, name: &str) -> bool {
        self.tensors
            .get(name)
            .is_some_and(|e| matches!(e.dtype, Dtype::F32 | Dtype::BF16 | Dtype::F16))
    }

    /// Tensor `name` as `f32` (from f32, bf16 or f16 data), with its shape.
    pub fn read(&self, name: &str) -> Result<(Vec<i64>, Vec<f32>)> {
        let e = self
            .tensors
            .get(name)
            .ok_or_else(|| bad(&self.dir, Some(name), "is not in the files".into()))?;
        let bytes = self.files[e.file]
            .1
            .bytes()
            .get(e.bytes.0..e.bytes.1)
            .ok_or_else(|| {
                bad(
                    &self.dir,
                    Some(name),
                    "lies past the end of its file".into(),
                )
            })?;
        let data: Vec<f32> = match e.dtype {
            Dtype::F32 => bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            Dtype::BF16 => bytes
                .chunks_exact(2)
                .map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            Dtype::F16 => bytes
                .chunks_exact(2)
                .map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            other => {
                return Err(bad(
                    &self.dir,
                    Some(name),
                    format!("is {other:?}; weights load from F32, BF16 or F16"),
                ));
            }
        };
        let n = e.shape.iter().product::<i64>() as usize;
        if data.len() != n {
            return Err(bad(
                &self.dir,
                Some(name),
                format!("holds {} values for shape {:?}", data.len(), e.shape),
            ));
        }
        Ok((e.shape.clone(), data))
    }
}
