//! The map between a model's weights and a Hugging Face checkpoint's tensors, as data.
//!
//! Which tensor of theirs becomes which of ours is the model's knowledge, so the models declare
//! it here, beside their layers, with no file or device in sight: for each of our weights (in
//! [`StackModel::weights`](crate::fsdp::StackModel) order) one [`Link`] per layer, naming
//! their tensor, optionally a block of it (a fused `gate_up_proj` holds two of our weights),
//! and the [`Step`]s that turn it into our layout (their projections are `[out, in]`, ours
//! `[in, out]`; norm conventions; RoPE column orders). Every step has an inverse, so one map
//! serves both directions. The runtime reads and writes the files (`stackscan_runtime::hf`).
//!
//! ```
//! use stackscan::hf_map::{HfMap, Link, Step, WeightLinks};
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
//!     stored_under: vec![],
//! };
//! assert!(map.validate().is_ok());
//! ```

use std::collections::BTreeMap;

/// Why a map is inconsistent, naming the tensor (theirs, or our weight) at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{tensor}` {reason}")]
pub struct MapError {
    /// Their tensor's name, or our weight's.
    pub tensor: String,
    /// What is wrong with it.
    pub reason: String,
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
    /// The dims after this step, or `None` where it does not apply to `dims`.
    pub fn dims(&self, dims: &[i64]) -> Option<Vec<i64>> {
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
    pub fn our_dims(&self) -> std::result::Result<Vec<i64>, String> {
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
    pub fn layer_dims(&self) -> &[i64] {
        if self.stacked {
            &self.shape[1..]
        } else {
            &self.shape
        }
    }

    /// How many layers it has (1 for an outer weight).
    pub fn layers(&self) -> usize {
        if self.stacked {
            self.shape.first().copied().unwrap_or(0).max(0) as usize
        } else {
            1
        }
    }

    /// The shape of the block `at` of one layer.
    pub fn block_dims(&self, at: Option<Region>) -> Vec<i64> {
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
    /// Other places a checkpoint may keep the tensors the links name, by prefix: `(from,
    /// to)` says their `from…` may be stored as `to…` (Qwen3.5's vision-language checkpoint
    /// keeps `model.layers.…` of the text model as `model.language_model.layers.…`). An
    /// import reads a tensor where the files hold it; an export writes the links' names.
    pub stored_under: Vec<(String, String)>,
}

impl HfMap {
    /// Where files that hold the tensors `has` says they hold keep their tensor `theirs`:
    /// under its own name, else under the first of [`HfMap::stored_under`] that they hold.
    pub fn stored_name(&self, theirs: &str, has: impl Fn(&str) -> bool) -> String {
        if has(theirs) {
            return theirs.to_owned();
        }
        self.stored_under
            .iter()
            .filter_map(|(from, to)| {
                theirs
                    .strip_prefix(from.as_str())
                    .map(|rest| format!("{to}{rest}"))
            })
            .find(|name| has(name))
            .unwrap_or_else(|| theirs.to_owned())
    }

    /// Checks the map itself: each weight has one link per layer and each link yields that
    /// layer's shape; each of their tensors has one shape across links; and blocks of one of
    /// their tensors cover it exactly once (so an export writes every element of it).
    pub fn validate(&self) -> Result<(), MapError> {
        let fail = |tensor: &str, reason: String| MapError {
            tensor: tensor.to_owned(),
            reason,
        };
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

/// Whether `order` is a permutation of `0..n`.
pub fn is_permutation(order: &[usize], n: usize) -> bool {
    let mut seen = vec![false; n];
    order.len() == n
        && order
            .iter()
            .all(|&i| i < n && !std::mem::replace(&mut seen[i], true))
}
