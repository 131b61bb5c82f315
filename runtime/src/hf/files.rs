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
    /// The blocks of FP8 weights, `[rows, columns]`, where the directory's `config.json`
    /// says its weights are block-quantized ([`fp8_blocks`]).
    fp8_block: Option<[usize; 2]>,
}

/// The suffix of an FP8 weight's scales: `w.weight` is `w.weight_scale_inv` times its FP8
/// values, block by block (DeepSeek-V3's published layout).
pub const SCALE_SUFFIX: &str = "_scale_inv";

/// The FP8 blocks `dir/config.json` declares (`quantization_config` with `quant_method`
/// `fp8`, `fmt` `e4m3` and `weight_block_size`), none where it declares no quantization; a
/// quantization stackscan does not read is refused by name.
fn fp8_blocks(dir: &Path) -> Result<Option<[usize; 2]>> {
    let Ok(text) = std::fs::read_to_string(dir.join("config.json")) else {
        return Ok(None);
    };
    let Ok(config) = serde_json::from_str::<serde_json::Value>(&text) else {
        return Ok(None);
    };
    let Some(q) = config.get("quantization_config").filter(|q| !q.is_null()) else {
        return Ok(None);
    };
    let refuse = |why: String| Err(bad(dir, None, format!("`quantization_config`: {why}")));
    let method = q.get("quant_method").and_then(|m| m.as_str()).unwrap_or("");
    if method != "fp8" {
        return refuse(format!(
            "`quant_method` is `{method}`; FP8 block quantization (`fp8`) is the one read"
        ));
    }
    if let Some(fmt) = q.get("fmt").and_then(|f| f.as_str())
        && fmt != "e4m3"
    {
        return refuse(format!("`fmt` is `{fmt}`; FP8 weights are read as `e4m3`"));
    }
    let block: Option<Vec<usize>> =
        q.get("weight_block_size")
            .and_then(|b| b.as_array())
            .map(|b| {
                b.iter()
                    .filter_map(|x| x.as_u64())
                    .map(|x| x as usize)
                    .collect()
            });
    match block.as_deref() {
        Some(&[r, c]) if r > 0 && c > 0 => Ok(Some([r, c])),
        _ => refuse("`weight_block_size` must be two positive sizes".into()),
    }
}

/// An FP8 (e4m3, `float8_e4m3fn`) value: 1 sign, 4 exponent bits (bias 7), 3 mantissa bits;
/// no infinities, `0x7f` and `0xff` not a number.
fn e4m3(b: u8) -> f32 {
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let (e, m) = (i32::from((b >> 3) & 0x0f), f32::from(b & 0x07));
    if e == 0x0f && m == 7.0 {
        return f32::NAN;
    }
    let magnitude = if e == 0 {
        m / 8.0 * 2f32.powi(-6)
    } else {
        (1.0 + m / 8.0) * 2f32.powi(e - 7)
    };
    sign * magnitude
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
            fp8_block: fp8_blocks(dir)?,
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

    /// Whether `name` holds a dtype [`read`](Self::read) converts: f32, bf16, f16, or FP8
    /// with its block scales beside it ([`WeightFiles::scales_of`]).
    pub fn readable(&self, name: &str) -> bool {
        self.tensors.get(name).is_some_and(|e| match e.dtype {
            Dtype::F32 | Dtype::BF16 | Dtype::F16 => true,
            Dtype::F8_E4M3 => self.scales_of(name).is_some(),
            _ => false,
        })
    }

    /// The scales of FP8 weight `name` (`{name}_scale_inv`), where the directory declares
    /// block quantization, `name` is a matrix stored as FP8 and the scales are there.
    pub fn scales_of(&self, name: &str) -> Option<String> {
        let e = self.tensors.get(name)?;
        if self.fp8_block.is_none() || e.dtype != Dtype::F8_E4M3 || e.shape.len() != 2 {
            return None;
        }
        let scales = format!("{name}{SCALE_SUFFIX}");
        self.tensors.contains_key(&scales).then_some(scales)
    }

    /// FP8 weight `name` times its block scales, as f32.
    fn dequantized(&self, name: &str, e: &Entry, bytes: &[u8]) -> Result<Vec<f32>> {
        let (Some([br, bc]), Some(scales)) = (self.fp8_block, self.scales_of(name)) else {
            return Err(bad(
                &self.dir,
                Some(name),
                format!(
                    "is FP8 without `{name}{SCALE_SUFFIX}` or a `quantization_config` to read \
                     it by"
                ),
            ));
        };
        let (shape, scale) = self.read(&scales)?;
        let (rows, cols) = (e.shape[0] as usize, e.shape[1] as usize);
        let blocks = [rows.div_ceil(br) as i64, cols.div_ceil(bc) as i64];
        if shape != blocks {
            return Err(bad(
                &self.dir,
                Some(&scales),
                format!(
                    "is {shape:?}; `{name}` {:?} in blocks of {br} × {bc} makes it {blocks:?}",
                    e.shape
                ),
            ));
        }
        let per_row = blocks[1] as usize;
        Ok(bytes
            .iter()
            .enumerate()
            .map(|(i, &b)| {
                let (r, c) = (i / cols, i % cols);
                e4m3(b) * scale[(r / br) * per_row + c / bc]
            })
            .collect())
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
            Dtype::F8_E4M3 => self.dequantized(name, e, bytes)?,
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

#[cfg(test)]
mod tests {
    use super::e4m3;

    /// `float8_e4m3fn` by hand: 1 = 2^(7−7), 2, the largest finite (1.75 · 2^8), the smallest
    /// subnormal (2^−9), a sign, and the one NaN pattern per sign.
    #[test]
    fn e4m3_values_decode_by_hand() {
        assert_eq!(e4m3(0x38), 1.0);
        assert_eq!(e4m3(0x40), 2.0);
        assert_eq!(e4m3(0x7e), 448.0);
        assert_eq!(e4m3(0x01), 2f32.powi(-9));
        assert_eq!(e4m3(0xb8), -1.0);
        assert_eq!(e4m3(0x00), 0.0);
        assert!(e4m3(0x7f).is_nan() && e4m3(0xff).is_nan());
    }
}
