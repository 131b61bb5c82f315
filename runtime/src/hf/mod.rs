//! Hugging Face weights in and out: a model directory's safetensors files read into a
//! trainer's weights, and a trainer's weights written back as a directory `transformers`
//! loads.
//!
//! Which tensor of theirs becomes which of ours is the model's knowledge, given as an
//! [`HfMap`]: for each of our weights (in [`StackModel::weights`](stackscan::fsdp::StackModel)
//! order) one [`Link`] per layer, naming their tensor, optionally a block of it (a fused
//! `gate_up_proj` holds two of our weights), and the [`Step`]s that turn it into our layout
//! (their projections are `[out, in]`, ours `[in, out]`; norm conventions; RoPE column
//! orders). Every step has an inverse, so one map serves both directions and an export
//! re-imports bit-identically.
//!
//! An import checks everything the headers can say before it converts anything: each linked
//! tensor present with the shape the map expects and a float dtype, each block and step
//! consistent with our shape, and every tensor in the files used by some link or skipped by
//! name (DeepSeek-V3's multi-token-prediction layer), so a checkpoint of another model or
//! size is refused with the tensor at fault named.
//!
//! ```
//! use stackscan_runtime::hf::{HfMap, Link, Step, WeightLinks};
//!
//! // Our `head` is `[d, vocab]`; theirs is `lm_head.weight`, `[vocab, d]`.
//! let map = HfMap {
//!     weights: vec![WeightLinks {
//!         name: "head".into(),
//!         shape: vec![4, 10],
//!         stacked: false,
//!         links: vec![Link::new("lm_head.weight", &[10, 4]).then(Step::TransposeLast2)],
//!     }],
//!     skipped: vec![],
//! };
//! assert!(map.validate().is_ok());
//! ```

mod array;
mod files;

use std::collections::BTreeMap;
use std::path::Path;

pub use array::Array;
use array::{inverse, is_permutation};
pub use files::{INDEX, SINGLE, WeightFiles};

use crate::checkpoint::{Tensor, write_atomic};
use crate::error::{Error, Result};

fn bad(dir: &Path, tensor: Option<&str>, reason: String) -> Error {
    Error::HfWeights {
        dir: dir.to_owned(),
        tensor: tensor.map(str::to_owned),
        reason,
    }
}

/// One move from their layout towards ours. Each has an inverse (for export).
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Swap the last two dimensions: their `[out, in]` projection is our `[in, out]`.
    TransposeLast2,
    /// Add a constant to every element: Qwen3.5's norms compute `x̂·(1 + w)` there and
    /// `x̂·w` here.
    Add(f32),
    /// Index `i` of dimension `dim` becomes their index `order[i]` (a permutation): the
    /// de-interleaving of RoPE columns.
    Reorder {
        /// The dimension.
        dim: usize,
        /// Their index of each of ours.
        order: Vec<usize>,
    },
    /// A leading dimension of size 1: one of their per-expert matrices as a block of our
    /// expert bank.
    AddLeadingDim,
    /// Drop dimension `dim`, of size 1: their depthwise convolution's `[channels, 1, kernel]`
    /// as `[channels, kernel]`.
    Squeeze(usize),
}

impl Step {
    /// The dims after this step.
    fn dims(&self, dims: &[i64]) -> Option<Vec<i64>> {
        match self {
            Step::TransposeLast2 => {
                let mut d = dims.to_vec();
                let r = d.len();
                (r >= 2).then(|| {
                    d.swap(r - 2, r - 1);
                    d
                })
            }
            Step::Add(_) => Some(dims.to_vec()),
            Step::Reorder { dim, order } => dims
                .get(*dim)
                .filter(|&&n| is_permutation(order, n as usize))
                .map(|_| dims.to_vec()),
            Step::AddLeadingDim => Some([&[1][..], dims].concat()),
            Step::Squeeze(dim) => (dims.get(*dim) == Some(&1)).then(|| {
                let mut d = dims.to_vec();
                d.remove(*dim);
                d
            }),
        }
    }

    fn apply(&self, a: &Array) -> Result<Array> {
        match self {
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
                let dims = self.dims(&a.dims).ok_or_else(|| {
                    Error::Program(format!("weight mapping: {self:?} of {:?}", a.dims))
                })?;
                Ok(Array {
                    dims,
                    data: a.data.clone(),
                })
            }
        }
    }

    fn invert(&self, a: &Array) -> Result<Array> {
        match self {
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
}

/// A block of their tensor along one dimension: indices `[start, start + len)` of `dim`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// The dimension.
    pub dim: usize,
    /// The first index.
    pub start: i64,
    /// How many.
    pub len: i64,
}

/// Where one layer of one of our weights comes from: their tensor (or a block of it) and the
/// steps to our layout.
#[derive(Clone, Debug, PartialEq)]
pub struct Link {
    /// Their tensor's name.
    pub theirs: String,
    /// Their tensor's whole shape.
    pub shape: Vec<i64>,
    /// The block of it that is ours, or `None` for all of it.
    pub region: Option<Region>,
    /// The moves from their block to our layer, in order.
    pub steps: Vec<Step>,
    /// Which layer of ours it fills (0 for an outer weight).
    pub layer: usize,
    /// The block of that layer it fills, or `None` for all of it.
    pub at: Option<Region>,
}

impl Link {
    /// All of their tensor `theirs` of shape `shape`, as it is.
    pub fn new(theirs: &str, shape: &[i64]) -> Link {
        Link {
            theirs: theirs.to_owned(),
            shape: shape.to_vec(),
            region: None,
            steps: Vec::new(),
            layer: 0,
            at: None,
        }
    }

    /// The link fills our layer `layer` (0, the default, for an outer weight).
    pub fn layer(mut self, layer: usize) -> Link {
        self.layer = layer;
        self
    }

    /// The link fills only the block `[start, start + len)` of dimension `dim` of our layer
    /// (one expert of an expert bank: `into(0, e, 1)`).
    pub fn into_block(mut self, dim: usize, start: i64, len: i64) -> Link {
        self.at = Some(Region { dim, start, len });
        self
    }

    /// Only the block `[start, start + len)` of dimension `dim` of their tensor.
    pub fn block(mut self, dim: usize, start: i64, len: i64) -> Link {
        self.region = Some(Region { dim, start, len });
        self
    }

    /// `step` after the ones already given.
    pub fn then(mut self, step: Step) -> Link {
        self.steps.push(step);
        self
    }

    /// The shape of the block of our layer this link yields, or why it yields none.
    fn our_dims(&self) -> std::result::Result<Vec<i64>, String> {
        let mut dims = self.shape.clone();
        if let Some(r) = self.region {
            match dims.get_mut(r.dim) {
                Some(d) if r.start >= 0 && r.len > 0 && r.start + r.len <= *d => *d = r.len,
                _ => {
                    return Err(format!(
                        "block {}..{} of dimension {} does not fit its shape {:?}",
                        r.start,
                        r.start + r.len,
                        r.dim,
                        self.shape
                    ));
                }
            }
        }
        for s in &self.steps {
            dims = s
                .dims(&dims)
                .ok_or_else(|| format!("step {s:?} does not apply to dims {dims:?}"))?;
        }
        Ok(dims)
    }
}

/// How one of our weights is made: its name and whole shape (with the layer dimension when
/// stacked) and the links that fill it, each a layer or a block of one ([`Link::layer`],
/// [`Link::into_block`]); together they fill every layer exactly once.
#[derive(Clone, Debug, PartialEq)]
pub struct WeightLinks {
    /// Our name ([`StackModel::weight_names`](stackscan::fsdp::StackModel::weight_names)).
    pub name: String,
    /// Our whole shape: `[layers, …]` when stacked.
    pub shape: Vec<i64>,
    /// Whether the first dimension counts layers.
    pub stacked: bool,
    /// What fills it.
    pub links: Vec<Link>,
}

impl WeightLinks {
    /// The shape of one layer (the whole shape of an outer weight).
    fn layer_dims(&self) -> &[i64] {
        if self.stacked {
            &self.shape[1..]
        } else {
            &self.shape
        }
    }

    fn layers(&self) -> usize {
        if self.stacked {
            self.shape.first().copied().unwrap_or(0).max(0) as usize
        } else {
            1
        }
    }

    /// The shape of the block `at` of one layer.
    fn block_dims(&self, at: Option<Region>) -> Vec<i64> {
        let mut dims = self.layer_dims().to_vec();
        if let Some(r) = at
            && let Some(d) = dims.get_mut(r.dim)
        {
            *d = r.len;
        }
        dims
    }
}

/// A model's map between its weights and a Hugging Face checkpoint's tensors.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HfMap {
    /// Ours, in the trainer's weight order.
    pub weights: Vec<WeightLinks>,
    /// Their tensors no weight of ours reads, by name prefix, with the reason (logged once
    /// per prefix on import).
    pub skipped: Vec<(String, String)>,
}

impl HfMap {
    /// Checks the map itself: each weight has one link per layer and each link yields that
    /// layer's shape; each of their tensors has one shape across links; and blocks of one of
    /// their tensors cover it exactly once (so an export writes every element of it).
    pub fn validate(&self) -> Result<()> {
        let fail = |tensor: &str, reason: String| bad(Path::new("(map)"), Some(tensor), reason);
        let mut theirs: BTreeMap<&str, (&[i64], Vec<Option<Region>>)> = BTreeMap::new();
        for w in &self.weights {
            let layers = w.layers();
            let mut filled: Vec<Vec<Option<Region>>> = vec![Vec::new(); layers];
            for l in &w.links {
                let Some(blocks) = filled.get_mut(l.layer) else {
                    return Err(fail(
                        &l.theirs,
                        format!(
                            "fills layer {} of our `{}`, which has {layers}",
                            l.layer, w.name
                        ),
                    ));
                };
                blocks.push(l.at);
                let dims = l.our_dims().map_err(|e| fail(&l.theirs, e))?;
                if dims != w.block_dims(l.at) {
                    return Err(fail(
                        &l.theirs,
                        format!(
                            "becomes {dims:?}, but its block of our `{}` is {:?}",
                            w.name,
                            w.block_dims(l.at)
                        ),
                    ));
                }
                let entry = theirs.entry(&l.theirs).or_insert((&l.shape, Vec::new()));
                if entry.0 != l.shape.as_slice() {
                    return Err(fail(&l.theirs, "is linked with two shapes".into()));
                }
                entry.1.push(l.region);
            }
            for (i, blocks) in filled.iter().enumerate() {
                if !covers_once(w.layer_dims(), blocks) {
                    return Err(fail(
                        &w.name,
                        format!("layer {i} is not filled exactly once by its links"),
                    ));
                }
            }
        }
        for (name, (shape, regions)) in theirs {
            if !covers_once(shape, &regions) {
                return Err(fail(
                    name,
                    "is not covered exactly once by the blocks linked to it".into(),
                ));
            }
        }
        Ok(())
    }

    /// Checks `files` against the map before anything is converted: every linked tensor is
    /// there with the expected shape and a float dtype, and every tensor there is linked or
    /// skipped. Returns how many tensors were skipped per prefix.
    pub fn check(&self, files: &WeightFiles) -> Result<Vec<(String, usize)>> {
        self.validate()?;
        let dir = files.dir();
        let mut linked = std::collections::BTreeSet::new();
        for w in &self.weights {
            for l in &w.links {
                let Some((shape, dtype)) = files.header(&l.theirs) else {
                    return Err(bad(
                        dir,
                        Some(&l.theirs),
                        format!("is missing (our `{}` reads it)", w.name),
                    ));
                };
                if shape != l.shape.as_slice() {
                    return Err(bad(
                        dir,
                        Some(&l.theirs),
                        format!("is {shape:?}; the model's config makes it {:?}", l.shape),
                    ));
                }
                if !files.readable(&l.theirs) {
                    return Err(bad(
                        dir,
                        Some(&l.theirs),
                        format!("is {dtype}; weights load from F32, BF16 or F16"),
                    ));
                }
                linked.insert(l.theirs.as_str());
            }
        }
        let mut skipped: Vec<(String, usize)> =
            self.skipped.iter().map(|(p, _)| (p.clone(), 0)).collect();
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
        for ((prefix, n), (_, why)) in skipped.iter().zip(&self.skipped) {
            if *n > 0 {
                tracing::info!(
                    "skipped {n} tensors `{prefix}…` of {}: {why}",
                    dir.display()
                );
            }
        }
        Ok(skipped)
    }

    /// Our weight `j` in natural layout, read from `files` (which [`check`](Self::check)
    /// accepted) one layer at a time.
    pub fn import(&self, files: &WeightFiles, j: usize) -> Result<Tensor> {
        let w = self
            .weights
            .get(j)
            .ok_or_else(|| bad(files.dir(), None, format!("the map has no weight {j}")))?;
        let per_layer = w.layer_dims().iter().product::<i64>().max(0) as usize;
        let mut data = vec![0.0f32; per_layer * w.layers()];
        for l in &w.links {
            let (dims, values) = files.read(&l.theirs)?;
            let mut a = Array::new(dims, values)?;
            if let Some(r) = l.region {
                a = a.slice(r.dim, r.start, r.len)?;
            }
            for s in &l.steps {
                a = s.apply(&a)?;
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

    /// Their tensors from our `weights` (natural layout, by our names): each of their
    /// tensors assembled from every block linked to it, in the map's order of first use.
    pub fn export(&self, weights: &[Tensor]) -> Result<Vec<(String, Array)>> {
        self.validate()?;
        let fail = |tensor: &str, reason: String| bad(Path::new("(export)"), Some(tensor), reason);
        let mut order: Vec<String> = Vec::new();
        let mut theirs: BTreeMap<String, Array> = BTreeMap::new();
        for w in &self.weights {
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
                    a = s.invert(&a)?;
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
}

/// Whether `regions` (blocks along one dimension, or `None` for the whole tensor) cover a
/// tensor of `shape` exactly once.
fn covers_once(shape: &[i64], regions: &[Option<Region>]) -> bool {
    match regions {
        [None] => true,
        _ if regions.iter().any(Option::is_none) => false,
        _ => {
            let mut blocks: Vec<Region> = regions.iter().flatten().copied().collect();
            let dim = blocks[0].dim;
            if blocks.iter().any(|r| r.dim != dim) {
                return false;
            }
            blocks.sort_by_key(|r| r.start);
            let mut at = 0;
            for r in &blocks {
                if r.start != at {
                    return false;
                }
                at += r.len;
            }
            shape.get(dim) == Some(&at)
        }
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
    use safetensors::tensor::TensorView;
    let bytes: Vec<(String, Vec<u8>, Vec<usize>)> = tensors
        .iter()
        .map(|(name, a)| {
            let data = match dtype {
                ExportDType::F32 => a.data.iter().flat_map(|x| x.to_le_bytes()).collect(),
                ExportDType::BF16 => a
                    .data
                    .iter()
                    .flat_map(|&x| half::bf16::from_f32(x).to_le_bytes())
                    .collect(),
            };
            (
                name.clone(),
                data,
                a.dims.iter().map(|&d| d as usize).collect(),
            )
        })
        .collect();
    let st = match dtype {
        ExportDType::F32 => safetensors::Dtype::F32,
        ExportDType::BF16 => safetensors::Dtype::BF16,
    };
    let views = bytes
        .iter()
        .map(|(name, data, shape)| {
            TensorView::new(st, shape.clone(), data)
                .map(|v| (name.as_str(), v))
                .map_err(|e| bad(dir, Some(name), e.to_string()))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut meta = std::collections::HashMap::new();
    meta.insert("format".to_owned(), "pt".to_owned());
    let out = safetensors::serialize(views, Some(meta))
        .map_err(|e| bad(dir, None, format!("cannot serialise: {e}")))?;
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::io(format!("creating `{}`", dir.display()), e))?;
    write_atomic(&dir.join(SINGLE), &out)
}

#[cfg(test)]
mod tests;
