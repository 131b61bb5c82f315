//! Writing a Hugging Face directory a tensor at a time: their tensors are planned from the
//! map alone (names, shapes, which of our weights each reads), the shards from their sizes,
//! and each file is then written in order, every tensor assembled just before its bytes go
//! out. The host holds the weights a tensor still needs (usually one of ours, stacked over
//! its layers) and the tensor being written, never the model: what an 8B or larger export
//! needs.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::rc::Rc;

use stackscan::hf_map::HfMap;

use super::{Array, ExportDType, INDEX, SINGLE, bad, invert, validate};
use crate::checkpoint::write_atomic_with;
use crate::error::{Error, Result};

/// One of their tensors: its name and shape, and the links that fill it, as (our weight's
/// index in the map, the link's index in that weight's links).
struct Planned {
    name: String,
    shape: Vec<i64>,
    links: Vec<(usize, usize)>,
}

/// Their tensors in the map's order of first use.
fn plan(map: &HfMap) -> Vec<Planned> {
    let mut order: Vec<Planned> = Vec::new();
    let mut at: BTreeMap<&str, usize> = BTreeMap::new();
    for (j, w) in map.weights.iter().enumerate() {
        for (k, l) in w.links.iter().enumerate() {
            let i = *at.entry(l.theirs.as_str()).or_insert_with(|| {
                order.push(Planned {
                    name: l.theirs.clone(),
                    shape: l.shape.clone(),
                    links: Vec::new(),
                });
                order.len() - 1
            });
            order[i].links.push((j, k));
        }
    }
    order
}

/// Writes our weights as the Hugging Face directory `dir` through `map`: `weight(j)` gives
/// our weight `j` (the map's order, natural layout, stacked over its layers), asked for once
/// and dropped as soon as no tensor still to be written reads it. The files are as
/// [`write_shards`](super::write_shards) writes them. Returns how many tensors were written.
pub fn export_to(
    dir: &Path,
    map: &HfMap,
    dtype: ExportDType,
    max_shard_bytes: Option<u64>,
    mut weight: impl FnMut(usize) -> Result<Vec<f32>>,
) -> Result<usize> {
    validate(map)?;
    let planned = plan(map);
    // How many tensors still read each of our weights; a weight is dropped at 0.
    let mut readers = vec![0usize; map.weights.len()];
    for p in &planned {
        let mut js: Vec<usize> = p.links.iter().map(|&(j, _)| j).collect();
        js.dedup();
        for j in js {
            readers[j] += 1;
        }
    }
    let mut held: BTreeMap<usize, Rc<Vec<f32>>> = BTreeMap::new();
    let specs: Vec<(String, Vec<i64>)> = planned
        .iter()
        .map(|p| (p.name.clone(), p.shape.clone()))
        .collect();
    write_shards_with(dir, &specs, dtype, max_shard_bytes, |i| {
        let p = &planned[i];
        let mut whole = Array::zeros(p.shape.clone());
        for &(j, k) in &p.links {
            let w = &map.weights[j];
            let ours = match held.get(&j) {
                Some(data) => Rc::clone(data),
                None => {
                    let data = weight(j)?;
                    let want = w.shape.iter().product::<i64>() as usize;
                    if data.len() != want {
                        return Err(bad(
                            Path::new("(export)"),
                            Some(&w.name),
                            format!(
                                "holds {} values; the map's {:?} is {want}",
                                data.len(),
                                w.shape
                            ),
                        ));
                    }
                    let data = Rc::new(data);
                    held.insert(j, Rc::clone(&data));
                    data
                }
            };
            let l = &w.links[k];
            let per_layer = w.layer_dims().iter().product::<i64>() as usize;
            let slab = ours[l.layer * per_layer..(l.layer + 1) * per_layer].to_vec();
            let mut a = Array::new(w.layer_dims().to_vec(), slab)?;
            if let Some(r) = l.at {
                a = a.slice(r.dim, r.start, r.len)?;
            }
            for s in l.steps.iter().rev() {
                a = invert(s, &a)?;
            }
            match l.region {
                Some(r) => whole.write(r.dim, r.start, &a)?,
                None => whole = a,
            }
        }
        let mut js: Vec<usize> = p.links.iter().map(|&(j, _)| j).collect();
        js.dedup();
        for j in js {
            readers[j] -= 1;
            if readers[j] == 0 {
                held.remove(&j);
            }
        }
        Ok(whole)
    })?;
    Ok(planned.len())
}

/// The bytes one value takes in `dtype`.
fn width(dtype: ExportDType) -> u64 {
    match dtype {
        ExportDType::F32 => 4,
        ExportDType::BF16 => 2,
    }
}

/// Writes the tensors `specs` (names and shapes) as `transformers` shards them (see
/// [`write_shards`](super::write_shards)), tensor `i`'s values from `tensor(i)`, called once
/// each, in order, as its bytes are written.
pub(super) fn write_shards_with(
    dir: &Path,
    specs: &[(String, Vec<i64>)],
    dtype: ExportDType,
    max_shard_bytes: Option<u64>,
    mut tensor: impl FnMut(usize) -> Result<Array>,
) -> Result<()> {
    let size = |shape: &[i64]| shape.iter().product::<i64>() as u64 * width(dtype);
    let mut shards: Vec<Vec<usize>> = vec![Vec::new()];
    let mut filled = 0u64;
    let limit = max_shard_bytes.unwrap_or(u64::MAX);
    for (i, (_, shape)) in specs.iter().enumerate() {
        let last = shards.len() - 1;
        if !shards[last].is_empty() && filled + size(shape) > limit {
            shards.push(Vec::new());
            filled = 0;
        }
        filled += size(shape);
        let last = shards.len() - 1;
        shards[last].push(i);
    }
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::io(format!("creating `{}`", dir.display()), e))?;
    let remove = |name: &str| {
        let path = dir.join(name);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(Error::io(format!("removing `{}`", path.display()), e))
            }
            _ => Ok(()),
        }
    };
    let n = shards.len();
    let file_of = |k: usize| {
        if n == 1 {
            SINGLE.to_owned()
        } else {
            format!("model-{:05}-of-{n:05}.safetensors", k + 1)
        }
    };
    let mut weight_map = serde_json::Map::new();
    let mut total = 0u64;
    for (k, shard) in shards.iter().enumerate() {
        let file = file_of(k);
        let header = header(dir, specs, shard, dtype)?;
        let mut failed = None;
        let wrote = write_atomic_with(&dir.join(&file), |f| {
            let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
            w.write_all(&(header.len() as u64).to_le_bytes())?;
            w.write_all(&header)?;
            for &i in shard {
                let a = match tensor(i) {
                    Ok(a) => a,
                    Err(e) => {
                        failed = Some(e);
                        return Err(std::io::Error::other("assembling a tensor failed"));
                    }
                };
                if a.dims != specs[i].1 {
                    failed = Some(bad(
                        dir,
                        Some(&specs[i].0),
                        format!("was assembled as {:?}, planned as {:?}", a.dims, specs[i].1),
                    ));
                    return Err(std::io::Error::other("a tensor of another shape"));
                }
                for &x in &a.data {
                    match dtype {
                        ExportDType::F32 => w.write_all(&x.to_le_bytes())?,
                        ExportDType::BF16 => w.write_all(&half::bf16::from_f32(x).to_le_bytes())?,
                    }
                }
            }
            w.flush()
        });
        if let Some(e) = failed {
            return Err(e);
        }
        wrote?;
        for &i in shard {
            weight_map.insert(specs[i].0.clone(), file.clone().into());
            total += size(&specs[i].1);
        }
    }
    if n == 1 {
        return remove(INDEX);
    }
    let index = serde_json::json!({
        "metadata": { "total_size": total },
        "weight_map": weight_map,
    });
    let text = serde_json::to_string_pretty(&index)
        .map_err(|e| bad(dir, None, format!("cannot write the index: {e}")))?;
    crate::checkpoint::write_atomic(&dir.join(INDEX), text.as_bytes())?;
    remove(SINGLE)
}

/// A safetensors header for the tensors `shard` of `specs` in `dtype`, in that order:
/// `{"__metadata__": {"format": "pt"}, name: {dtype, shape, data_offsets}}`, padded with
/// spaces to a multiple of 8 bytes as the format's own writer pads it.
fn header(
    dir: &Path,
    specs: &[(String, Vec<i64>)],
    shard: &[usize],
    dtype: ExportDType,
) -> Result<Vec<u8>> {
    let mut h = serde_json::Map::new();
    h.insert("__metadata__".into(), serde_json::json!({ "format": "pt" }));
    let mut at = 0u64;
    for &i in shard {
        let (name, shape) = &specs[i];
        let bytes = shape.iter().product::<i64>() as u64 * width(dtype);
        h.insert(
            name.clone(),
            serde_json::json!({
                "dtype": match dtype { ExportDType::F32 => "F32", ExportDType::BF16 => "BF16" },
                "shape": shape,
                "data_offsets": [at, at + bytes],
            }),
        );
        at += bytes;
    }
    let mut text = serde_json::to_vec(&serde_json::Value::Object(h))
        .map_err(|e| bad(dir, None, format!("cannot write a header: {e}")))?;
    while text.len() % 8 != 0 {
        text.push(b' ');
    }
    Ok(text)
}
