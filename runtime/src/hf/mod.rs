//! Hugging Face weights in and out: a model directory's safetensors files read into a
//! trainer's weights, and a trainer's weights written back as a directory `transformers`
//! loads, following the model's [`HfMap`] (declared with the model, in `stackscan::hf_map`).
//!
//! An import checks everything the headers can say before it converts anything: each linked
//! tensor present with the shape the map expects and a float dtype, each block and step
//! consistent with our shape, and every tensor in the files used by some link or skipped by
//! name (DeepSeek-V3's multi-token-prediction layer), so a checkpoint of another model or
//! size is refused with the tensor at fault named.

mod array;
mod export;
mod files;

use std::collections::BTreeMap;
use std::path::Path;

pub use array::Array;
use array::inverse;
pub use export::export_to;
pub use files::{INDEX, SCALE_SUFFIX, SINGLE, WeightFiles};

use crate::checkpoint::Tensor;
use crate::error::{Error, Result};
use stackscan::hf_map::{HfMap, Step};

fn bad(dir: &Path, tensor: Option<&str>, reason: String) -> Error {
    Error::HfWeights {
        dir: dir.to_owned(),
        tensor: tensor.map(str::to_owned),
        reason,
    }
}

/// [`HfMap::validate`], its error as the runtime's (the map named as the directory).
fn validate(map: &HfMap) -> Result<()> {
    map.validate()
        .map_err(|e| bad(Path::new("(map)"), Some(&e.tensor), e.reason))
}

/// Checks `files` against `map` before anything is converted: every linked tensor is
/// there with the expected shape and a float dtype, and every tensor there is linked or
/// skipped. Returns how many tensors were skipped per prefix.
pub fn check(map: &HfMap, files: &WeightFiles) -> Result<Vec<(String, usize)>> {
    validate(map)?;
    let dir = files.dir();
    let mut linked = std::collections::BTreeSet::new();
    for w in &map.weights {
        for l in &w.links {
            let stored = stored_name(map, files, &l.theirs);
            let Some((shape, dtype)) = files.header(&stored) else {
                return Err(bad(
                    dir,
                    Some(&l.theirs),
                    format!("is missing (our `{}` reads it)", w.name),
                ));
            };
            if shape != l.shape.as_slice() {
                return Err(bad(
                    dir,
                    Some(&stored),
                    format!("is {shape:?}; the model's config makes it {:?}", l.shape),
                ));
            }
            if !files.readable(&stored) {
                return Err(bad(
                    dir,
                    Some(&stored),
                    format!(
                        "is {dtype}; weights load from F32, BF16, F16, or FP8 (E4M3) with \
                         block scales and a `quantization_config` saying so"
                    ),
                ));
            }
            if let Some(scales) = files.scales_of(&stored) {
                linked.insert(scales);
            }
            linked.insert(stored);
        }
    }
    let mut skipped: Vec<(String, usize)> =
        map.skipped.iter().map(|(p, _)| (p.clone(), 0)).collect();
    for name in files.names() {
        if linked.contains(name) {
            continue;
        }
        match skipped
            .iter_mut()
            .find(|(p, _)| name.starts_with(p.as_str()))
        {
            Some((_, n)) => *n += 1,
            None => {
                return Err(bad(
                    dir,
                    Some(name),
                    "is not a weight of this model (a checkpoint of another architecture \
                     or size?)"
                        .into(),
                ));
            }
        }
    }
    for ((prefix, n), (_, why)) in skipped.iter().zip(&map.skipped) {
        if *n > 0 {
            tracing::info!(
                "skipped {n} tensors `{prefix}…` of {}: {why}",
                dir.display()
            );
        }
    }
    Ok(skipped)
}

/// Where `files` keep their tensor `theirs` ([`HfMap::stored_name`]).
fn stored_name(map: &HfMap, files: &WeightFiles, theirs: &str) -> String {
    map.stored_name(theirs, |name| files.header(name).is_some())
}

/// Our weight `j` of `map` in natural layout, read from `files` (which [`check`]
/// accepted) one layer at a time.
pub fn import(map: &HfMap, files: &WeightFiles, j: usize) -> Result<Tensor> {
    let w = map
        .weights
        .get(j)
        .ok_or_else(|| bad(files.dir(), None, format!("the map has no weight {j}")))?;
    let per_layer = w.layer_dims().iter().product::<i64>().max(0) as usize;
    let mut data = vec![0.0f32; per_layer * w.layers()];
    for l in &w.links {
        let (dims, values) = files.read(&stored_name(map, files, &l.theirs))?;
        let mut a = Array::new(dims, values)?;
        if let Some(r) = l.region {
            a = a.slice(r.dim, r.start, r.len)?;
        }
        for s in &l.steps {
            a = apply(s, &a)?;
        }
        let slab = &mut data[l.layer * per_layer..(l.layer + 1) * per_layer];
        match l.at {
            None => slab.copy_from_slice(&a.data),
            Some(r) => {
                let mut layer = Array::new(w.layer_dims().to_vec(), slab.to_vec())?;
                layer.write(r.dim, r.start, &a)?;
                slab.copy_from_slice(&layer.data);
            }
        }
    }
    Ok(Tensor {
        name: w.name.clone(),
        shape: w.shape.clone(),
        data,
    })
}

/// Their tensors from our `weights` through `map` (natural layout, by our names): each of their
/// tensors assembled from every block linked to it, in the map's order of first use.
pub fn export(map: &HfMap, weights: &[Tensor]) -> Result<Vec<(String, Array)>> {
    validate(map)?;
    let fail = |tensor: &str, reason: String| bad(Path::new("(export)"), Some(tensor), reason);
    let mut order: Vec<String> = Vec::new();
    let mut theirs: BTreeMap<String, Array> = BTreeMap::new();
    for w in &map.weights {
        let ours = weights
            .iter()
            .find(|t| t.name == w.name)
            .ok_or_else(|| fail(&w.name, "is not among the weights exported".into()))?;
        if ours.shape != w.shape {
            return Err(fail(
                &w.name,
                format!("is {:?}, the map's is {:?}", ours.shape, w.shape),
            ));
        }
        let per_layer = w.layer_dims().iter().product::<i64>() as usize;
        for l in &w.links {
            let slab = ours.data[l.layer * per_layer..(l.layer + 1) * per_layer].to_vec();
            let mut a = Array::new(w.layer_dims().to_vec(), slab)?;
            if let Some(r) = l.at {
                a = a.slice(r.dim, r.start, r.len)?;
            }
            for s in l.steps.iter().rev() {
                a = invert(s, &a)?;
            }
            let whole = theirs.entry(l.theirs.clone()).or_insert_with(|| {
                order.push(l.theirs.clone());
                Array::zeros(l.shape.clone())
            });
            match l.region {
                Some(r) => whole.write(r.dim, r.start, &a)?,
                None => *whole = a,
            }
        }
    }
    Ok(order
        .into_iter()
        .filter_map(|name| theirs.remove(&name).map(|a| (name, a)))
        .collect())
}

/// `step` applied to `a` (import: their layout towards ours).
fn apply(step: &Step, a: &Array) -> Result<Array> {
    match step {
        Step::TransposeLast2 => a.transpose_last2(),
        Step::Add(c) => Ok(Array {
            dims: a.dims.clone(),
            data: a.data.iter().map(|x| x + c).collect(),
        }),
        Step::Reorder { dim, order } => a.reorder(*dim, order),
        Step::AddLeadingDim => Ok(Array {
            dims: [&[1][..], &a.dims].concat(),
            data: a.data.clone(),
        }),
        Step::Squeeze(_) => {
            let dims = step.dims(&a.dims).ok_or_else(|| {
                Error::Program(format!("weight mapping: {step:?} of {:?}", a.dims))
            })?;
            Ok(Array {
                dims,
                data: a.data.clone(),
            })
        }
    }
}

/// `step` undone on `a` (export: our layout back to theirs).
fn invert(step: &Step, a: &Array) -> Result<Array> {
    match step {
        Step::TransposeLast2 => a.transpose_last2(),
        Step::Add(c) => Ok(Array {
            dims: a.dims.clone(),
            data: a.data.iter().map(|x| x - c).collect(),
        }),
        Step::Reorder { dim, order } => a.reorder(*dim, &inverse(order)),
        Step::AddLeadingDim => match a.dims.split_first() {
            Some((1, rest)) => Ok(Array {
                dims: rest.to_vec(),
                data: a.data.clone(),
            }),
            _ => Err(Error::Program(format!(
                "weight mapping: no leading dimension of 1 to drop from {:?}",
                a.dims
            ))),
        },
        Step::Squeeze(dim) if *dim <= a.dims.len() => {
            let mut dims = a.dims.clone();
            dims.insert(*dim, 1);
            Ok(Array {
                dims,
                data: a.data.clone(),
            })
        }
        Step::Squeeze(dim) => Err(Error::Program(format!(
            "weight mapping: no dimension {dim} to restore in {:?}",
            a.dims
        ))),
    }
}

/// The element types an export writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExportDType {
    /// f32, exactly the trainer's master weights.
    #[default]
    F32,
    /// bf16, rounded to nearest even: half the size, what published checkpoints hold.
    BF16,
}

/// Writes `tensors` as `dir/model.safetensors` (atomically: a crash leaves no partial file).
pub fn write_weights(dir: &Path, tensors: &[(String, Array)], dtype: ExportDType) -> Result<()> {
    write_shards(dir, tensors, dtype, None)
}

/// Writes `tensors` as `transformers` shards them: one `model.safetensors`, or, when they
/// hold more than `max_shard_bytes`, files `model-0000k-of-0000n.safetensors` of at most that
/// many bytes each (a tensor larger than the limit alone in its file) and the index
/// `model.safetensors.index.json` naming each tensor's file (written last, so a directory
/// with an index has every shard). Each file is written atomically, a tensor at a time; a
/// single file or an index left from an earlier export of the other form is removed, so
/// `transformers` reads what was written.
pub fn write_shards(
    dir: &Path,
    tensors: &[(String, Array)],
    dtype: ExportDType,
    max_shard_bytes: Option<u64>,
) -> Result<()> {
    let specs: Vec<(String, Vec<i64>)> = tensors
        .iter()
        .map(|(name, a)| (name.clone(), a.dims.clone()))
        .collect();
    export::write_shards_with(dir, &specs, dtype, max_shard_bytes, |i| {
        Ok(tensors[i].1.clone())
    })
}

#[cfg(test)]
mod tests;
