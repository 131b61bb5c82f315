//! The layer stack a plan schedules: kinds of sub-layer and their order.

use crate::error::{Error, Result};

/// The ordered sub-layer kinds of a model: an optional prefix, then a block repeated.
///
/// ```
/// use stackscan::plan::Stack;
/// let qwen = Stack::blocks(&["GDN", "GDN", "GDN", "attention"], 10)?;
/// assert_eq!(qwen.len(), 40);
/// let deepseek = Stack::with_prefix(&["D", "D", "D"], &["M"], 58)?;
/// assert_eq!(deepseek.kind_name(deepseek.kind_of(60)), "M");
/// assert_eq!(deepseek.index_in_kind(60), 57);
/// # Ok::<(), stackscan::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stack {
    names: Vec<String>,
    layers: Vec<usize>,
    /// Each layer's row in its kind's stacked weights.
    rows: Vec<usize>,
    prefix_len: usize,
    block_len: usize,
    repeat: usize,
}

impl Stack {
    /// `layers` layers of one kind.
    pub fn homogeneous(kind: &str, layers: usize) -> Result<Stack> {
        Stack::with_prefix(&[], &[kind], layers)
    }

    /// `block` repeated `repeat` times.
    pub fn blocks(block: &[&str], repeat: usize) -> Result<Stack> {
        Stack::with_prefix(&[], block, repeat)
    }

    /// The deepest stack planned: far beyond any model, small enough to hold in memory.
    pub const MAX_LAYERS: usize = 1 << 20;

    /// `prefix`, then `block` repeated `repeat` times (DeepSeek-V3: 3 dense, then MoE).
    pub fn with_prefix(prefix: &[&str], block: &[&str], repeat: usize) -> Result<Stack> {
        if block.is_empty() {
            return Err(Error::invalid("stack", "the block is empty"));
        }
        if repeat == 0 {
            return Err(Error::invalid(
                "stack",
                "the block must repeat at least once",
            ));
        }
        let total = repeat
            .checked_mul(block.len())
            .and_then(|n| n.checked_add(prefix.len()))
            .filter(|&n| n <= Stack::MAX_LAYERS);
        if total.is_none() {
            return Err(Error::invalid(
                "stack",
                format!(
                    "{} prefix layers and {repeat} × {} block layers exceed {} layers",
                    prefix.len(),
                    block.len(),
                    Stack::MAX_LAYERS
                ),
            ));
        }
        let mut names: Vec<String> = Vec::new();
        let mut id = |k: &str| -> Result<usize> {
            if k.is_empty() {
                return Err(Error::invalid(
                    "stack",
                    "a sub-layer kind has an empty name",
                ));
            }
            Ok(match names.iter().position(|n| n == k) {
                Some(i) => i,
                None => {
                    names.push(k.to_owned());
                    names.len() - 1
                }
            })
        };
        let prefix: Vec<usize> = prefix.iter().map(|k| id(k)).collect::<Result<_>>()?;
        let block: Vec<usize> = block.iter().map(|k| id(k)).collect::<Result<_>>()?;
        let mut layers = prefix.clone();
        for _ in 0..repeat {
            layers.extend(&block);
        }
        let mut seen = vec![0usize; names.len()];
        let rows = layers
            .iter()
            .map(|&k| {
                seen[k] += 1;
                seen[k] - 1
            })
            .collect();
        Ok(Stack {
            names,
            layers,
            rows,
            prefix_len: prefix.len(),
            block_len: block.len(),
            repeat,
        })
    }

    /// Number of layers.
    pub fn len(&self) -> usize {
        self.layers.len()
    }

    /// Whether there are no layers (never: a stack has at least one block).
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// Number of distinct kinds.
    pub fn num_kinds(&self) -> usize {
        self.names.len()
    }

    /// The kind of layer `layer`.
    ///
    /// # Panics
    /// If `layer >= self.len()`, like slice indexing.
    pub fn kind_of(&self, layer: usize) -> usize {
        self.layers[layer]
    }

    /// The display name of a kind.
    ///
    /// # Panics
    /// If `kind >= self.num_kinds()`, like slice indexing.
    pub fn kind_name(&self, kind: usize) -> &str {
        &self.names[kind]
    }

    /// Position of `layer` among the layers of its kind: its row in that kind's stacked
    /// weights.
    ///
    /// # Panics
    /// If `layer >= self.len()`, like slice indexing.
    pub fn index_in_kind(&self, layer: usize) -> usize {
        self.rows[layer]
    }

    /// Layers of kind `kind`.
    pub fn layers_of_kind(&self, kind: usize) -> usize {
        self.layers.iter().filter(|&&x| x == kind).count()
    }

    /// Layers before the repeated block.
    pub fn prefix_len(&self) -> usize {
        self.prefix_len
    }

    /// Length of the repeated block.
    pub fn block_len(&self) -> usize {
        self.block_len
    }

    /// How often the block repeats.
    pub fn repeat(&self) -> usize {
        self.repeat
    }

    /// Whether the block holds a single kind (then its layers form one run, no block loop).
    pub fn block_is_uniform(&self) -> bool {
        let b = &self.layers[self.prefix_len..self.prefix_len + self.block_len];
        b.iter().all(|&k| k == b[0])
    }
}
