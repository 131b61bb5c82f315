//! A model as the lowering sees it: parameter specs, per-kind layer functions, and the parts
//! outside the scanned stack.

use std::fmt;
use std::ops::Range;
use std::rc::Rc;

use crate::builder::Tensor;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ir::Axis;
use crate::layout;
use crate::mesh::Mesh;
use crate::plan::Stack;
use crate::types::TensorType;

/// How a parameter is initialised.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    /// Normal with mean 0 and this standard deviation.
    Normal(f64),
    /// All ones (norm scales).
    Ones,
    /// All zeros.
    Zeros,
}

/// How the optimizer moves a parameter.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Update {
    /// Adam with the step's hyper-parameters.
    #[default]
    Adam,
    /// `w ← w − rate · sign(g)`, moments untouched: for state that a rule outside the loss
    /// moves by a fixed step, its "gradient" defined by a zero-valued surrogate term
    /// (DeepSeek-V3's router bias, whose gradient is the experts' load deviation). A rate of
    /// 0 keeps the parameter fixed.
    SignDescent {
        /// Step size.
        rate: f64,
    },
}

/// One parameter of a layer (or of the model outside the stack).
#[derive(Clone, Debug, PartialEq)]
pub struct ParamSpec {
    /// Name, used in checkpoints.
    pub name: String,
    /// Full (unsharded) shape of one layer's parameter.
    pub shape: Vec<i64>,
    /// Element type.
    pub dtype: DType,
    /// The dimension sharded over the FSDP axis, or `None` for a replicated parameter.
    pub shard_dim: Option<usize>,
    /// The initialiser.
    pub init: Init,
    /// The mesh axis the shards are gathered over, or `None` for every device. A parameter
    /// gathered over a sub-axis stays split over the mesh's other axes: an expert bank
    /// `[E, …]` split over `fsdp × expert` and gathered over `fsdp` gives each device the
    /// `E / ep` experts of its `expert` coordinate (expert parallelism). Its gradient is
    /// reduce-scattered over the same axis.
    pub gathered_over: Option<Axis>,
    /// How the optimizer moves it.
    pub update: Update,
    /// Whether AdamW's weight decay applies to it: `None`, the default, by the rule
    /// ([`decays`](crate::fsdp::decays): matrices but embeddings); a user's choice
    /// otherwise (`train --no-decay PATTERN`).
    pub decay: Option<bool>,
}

impl ParamSpec {
    /// A parameter sharded along `shard_dim`.
    pub fn sharded(name: &str, shape: &[i64], dtype: DType, shard_dim: usize) -> ParamSpec {
        ParamSpec {
            name: name.to_owned(),
            shape: shape.to_vec(),
            dtype,
            shard_dim: Some(shard_dim),
            init: Init::Normal(0.02),
            gathered_over: None,
            update: Update::Adam,
            decay: None,
        }
    }

    /// A parameter every device holds whole (small vectors such as norm scales).
    pub fn replicated(name: &str, shape: &[i64], dtype: DType) -> ParamSpec {
        ParamSpec {
            name: name.to_owned(),
            shape: shape.to_vec(),
            dtype,
            shard_dim: None,
            init: Init::Ones,
            gathered_over: None,
            update: Update::Adam,
            decay: None,
        }
    }

    /// The same parameter with another initialiser.
    pub fn with_init(mut self, init: Init) -> ParamSpec {
        self.init = init;
        self
    }

    /// The same parameter with weight decay on or off whatever the rule says.
    pub fn with_decay(mut self, decay: bool) -> ParamSpec {
        self.decay = Some(decay);
        self
    }

    /// The same parameter moved by another optimizer rule.
    pub fn with_update(mut self, update: Update) -> ParamSpec {
        self.update = update;
        self
    }

    /// The same parameter gathered only over `axis`; see [`ParamSpec::gathered_over`].
    pub fn gathered_over(mut self, axis: Axis) -> ParamSpec {
        self.gathered_over = Some(axis);
        self
    }

    /// The full parameter's type.
    pub fn full_type(&self) -> TensorType {
        TensorType::new(self.dtype, self.shape.clone())
    }

    /// The type a layer sees on one of `devices`: the full type, or for a parameter gathered
    /// over a sub-axis, its part for this device's coordinates on the other axes.
    pub fn gathered_type(&self, devices: usize) -> TensorType {
        let mut dims = self.shape.clone();
        if let (Some(d), Some(axis)) = (self.shard_dim, &self.gathered_over) {
            dims[d] = dims[d] * axis.size as i64 / devices.max(1) as i64;
        }
        TensorType::new(self.dtype, dims)
    }

    /// The axis the shards are gathered over on `mesh`: [`ParamSpec::gathered_over`], or
    /// every device.
    pub fn gather_axis(&self, mesh: &Mesh) -> Axis {
        self.gathered_over.clone().unwrap_or_else(|| mesh.all())
    }

    /// Dimensions in shard-major order: the sharded dimension first, the others in order.
    /// Shards are stored this way so each is one contiguous slab, and the reduce-scatter of a
    /// gradient needs no relayout.
    pub fn shard_major_dims(&self) -> Vec<i64> {
        layout::shard_major_dims(&self.shape, self.shard_dim)
    }

    /// The permutation from natural to shard-major order.
    pub fn natural_to_shard_major(&self) -> Vec<usize> {
        layout::natural_to_shard_major(self.shape.len(), self.shard_dim)
    }

    /// The permutation from shard-major back to natural order.
    pub fn shard_major_to_natural(&self) -> Vec<usize> {
        layout::shard_major_to_natural(self.shape.len(), self.shard_dim)
    }

    /// One device's slab: shard-major dimensions with the first divided by `devices`.
    pub fn local_dims(&self, devices: usize) -> Vec<i64> {
        let mut dims = self.shard_major_dims();
        if self.shard_dim.is_some() {
            dims[0] /= devices as i64;
        }
        dims
    }

    pub(crate) fn check(&self, owner: &str, devices: usize) -> Result<()> {
        if self.shape.iter().any(|&d| d <= 0) {
            return Err(Error::invalid(
                "fsdp",
                format!(
                    "parameter `{}` of `{owner}` has a non-positive dimension: {:?}",
                    self.name, self.shape
                ),
            ));
        }
        if let Some(d) = self.shard_dim {
            if d >= self.shape.len() {
                return Err(Error::invalid(
                    "fsdp",
                    format!(
                        "parameter `{}` of `{owner}`: shard dimension {d} is out of its rank {}",
                        self.name,
                        self.shape.len()
                    ),
                ));
            }
            if self.shape[d] % devices as i64 != 0 {
                return Err(Error::invalid(
                    "fsdp",
                    format!(
                        "parameter `{}` of `{owner}`: dimension {d} ({}) does not split over {devices} devices",
                        self.name, self.shape[d]
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Checks that the axis this parameter is gathered over belongs to `mesh`.
    pub(crate) fn check_on(&self, owner: &str, mesh: &Mesh) -> Result<()> {
        let Some(axis) = &self.gathered_over else {
            return Ok(());
        };
        if self.shard_dim.is_none() {
            return Err(Error::invalid(
                "fsdp",
                format!(
                    "parameter `{}` of `{owner}` is replicated but says it is gathered over `{}`",
                    self.name, axis.name
                ),
            ));
        }
        mesh.resolve(axis).map(|_| ()).map_err(|e| {
            Error::invalid(
                "fsdp",
                format!(
                    "parameter `{}` of `{owner}` is gathered over `{}`: {e}",
                    self.name, axis.name
                ),
            )
        })
    }
}

/// A layer's forward function: `(activation, weights in declaration order) → activation`.
pub type LayerFn = Rc<dyn Fn(&Tensor, &[Tensor]) -> Result<Tensor>>;

/// The part before the stack: `(inputs, outer weights) → activation`.
pub type PreFn = Rc<dyn Fn(&[Tensor], &[Tensor]) -> Result<Tensor>>;

/// The part after the stack: `(activation, inputs, outer weights) → scalar local loss`.
pub type PostFn = Rc<dyn Fn(&Tensor, &[Tensor], &[Tensor]) -> Result<Tensor>>;

/// One kind of sub-layer: its parameters and forward function.
#[derive(Clone)]
pub struct LayerKind {
    /// Name; must match the stack's kind name.
    pub name: String,
    /// Parameters of one layer.
    pub params: Vec<ParamSpec>,
    /// The forward function.
    pub forward: LayerFn,
}

impl fmt::Debug for LayerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LayerKind")
            .field("name", &self.name)
            .field("params", &self.params)
            .finish()
    }
}

/// A model input (tokens, labels): its per-device type, sharded along the batch dimension 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputSpec {
    /// Name.
    pub name: String,
    /// Per-device type.
    pub ty: TensorType,
    /// The values an integer input may hold, or `None` for any. On the device an id outside
    /// a vocabulary is clamped by a gather or matches no class of a one-hot, so bad data would
    /// train silently; declaring the range lets the trainer reject it on the host.
    pub values: Option<Range<i64>>,
}

impl InputSpec {
    /// An input of per-device type `ty` that may hold any value.
    pub fn new(name: &str, ty: TensorType) -> InputSpec {
        InputSpec {
            name: name.to_owned(),
            ty,
            values: None,
        }
    }

    /// The same integer input restricted to `values` (token ids and labels: `0..vocab`).
    pub fn with_values(mut self, values: Range<i64>) -> InputSpec {
        self.values = Some(values);
        self
    }

    /// The same input holding `k` micro-batches one after another along the batch dimension
    /// (what an [`accumulate`](super::accumulate)d step takes).
    pub fn micro_batches(mut self, k: usize) -> InputSpec {
        if let Some(rows) = self.ty.dims.first_mut() {
            *rows *= k as i64;
        }
        self
    }

    fn check(&self) -> Result<()> {
        let Some(values) = &self.values else {
            return Ok(());
        };
        if !matches!(self.ty.dtype, DType::I32 | DType::I64) {
            return Err(Error::invalid(
                "fsdp",
                format!(
                    "input `{}` is {} but declares integer values {values:?}",
                    self.name, self.ty.dtype
                ),
            ));
        }
        if values.is_empty() {
            return Err(Error::invalid(
                "fsdp",
                format!("input `{}` declares no valid value ({values:?})", self.name),
            ));
        }
        Ok(())
    }
}

/// A stack model: inputs, the stack of sub-layers, and what runs before and after it.
#[derive(Clone)]
pub struct StackModel {
    /// The order of sub-layer kinds.
    pub stack: Stack,
    /// One entry per kind of the stack, in the stack's kind order.
    pub kinds: Vec<LayerKind>,
    /// The activation passed between layers (per device).
    pub activation: TensorType,
    /// Inputs (per device).
    pub inputs: Vec<InputSpec>,
    /// Parameters outside the stack (embedding, final norm, head).
    pub outer_params: Vec<ParamSpec>,
    /// Before the stack.
    pub pre: PreFn,
    /// After the stack: the local mean loss.
    pub post: PostFn,
}

impl fmt::Debug for StackModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StackModel")
            .field("stack", &self.stack)
            .field("kinds", &self.kinds)
            .field("activation", &self.activation)
            .field("inputs", &self.inputs)
            .field("outer_params", &self.outer_params)
            .finish()
    }
}

impl StackModel {
    /// The parts outside the stack as one function, `(inputs…, outer weights…) → loss`: the
    /// embedding ([`pre`](Self::pre)) straight into the loss ([`post`](Self::post)), the
    /// weights at full size (as they run, gathered) and in `precision`'s compute type, the
    /// activation cast to it as the step casts it. What cost models and benchmarks price the
    /// outer parts by; its VJP is their backward.
    pub fn outer_function(&self, precision: crate::Precision) -> Result<crate::ir::Function> {
        let f = crate::builder::Scope::new("outer");
        let inputs: Vec<Tensor> = self.inputs.iter().map(|i| f.param(i.ty.clone())).collect();
        let weights: Vec<Tensor> = self
            .outer_params
            .iter()
            .map(|p| f.param(precision.compute_type(&p.full_type())))
            .collect();
        let h = (self.pre)(&inputs, &weights)?;
        let h = h.convert(precision.compute_dtype(h.dtype()))?;
        let loss = (self.post)(&h, &inputs, &weights)?;
        f.finish(&[loss])
    }

    /// Checks the kinds against the stack, every parameter against the device count, and the
    /// inputs' declared value ranges.
    pub fn validate(&self, devices: usize) -> Result<()> {
        if devices == 0 {
            return Err(Error::invalid("fsdp", "the mesh has no devices"));
        }
        if self.kinds.len() != self.stack.num_kinds() {
            return Err(Error::invalid(
                "fsdp",
                format!(
                    "{} layer kinds for a stack of {}",
                    self.kinds.len(),
                    self.stack.num_kinds()
                ),
            ));
        }
        for (k, kind) in self.kinds.iter().enumerate() {
            if kind.name != self.stack.kind_name(k) {
                return Err(Error::invalid(
                    "fsdp",
                    format!(
                        "kind {k} is `{}` but the stack calls it `{}`",
                        kind.name,
                        self.stack.kind_name(k)
                    ),
                ));
            }
            for p in &kind.params {
                p.check(&kind.name, devices)?;
            }
        }
        for p in &self.outer_params {
            p.check("model", devices)?;
        }
        for input in &self.inputs {
            input.check()?;
        }
        Ok(())
    }

    /// [`StackModel::validate`] on `mesh`'s devices, and every parameter gathered over a
    /// sub-axis gathered over an axis of `mesh`.
    pub fn validate_on(&self, mesh: &Mesh) -> Result<()> {
        self.validate(mesh.size())?;
        for kind in &self.kinds {
            for p in &kind.params {
                p.check_on(&kind.name, mesh)?;
            }
        }
        // The parts before and after the stack see whole weights.
        if let Some(p) = self.outer_params.iter().find(|p| p.gathered_over.is_some()) {
            return Err(Error::invalid(
                "fsdp",
                format!(
                    "outer parameter `{}` is gathered over a sub-axis; only a layer's can be",
                    p.name
                ),
            ));
        }
        Ok(())
    }

    /// Every weight in the order the training step takes them — outer parameters, then each
    /// kind's parameters — with the number of layers stacked in it (1 for an outer parameter,
    /// which is not stacked).
    pub fn weights(&self) -> Vec<(&ParamSpec, usize)> {
        let outer = self.outer_params.iter().map(|p| (p, 1));
        let stacked = self.kinds.iter().enumerate().flat_map(|(k, kind)| {
            let layers = self.stack.layers_of_kind(k);
            kind.params.iter().map(move |p| (p, layers))
        });
        outer.chain(stacked).collect()
    }

    /// Every weight's spec, mutably, in [`StackModel::weights`] order (the order of
    /// [`StackModel::weight_names`]).
    pub fn weight_specs_mut(&mut self) -> Vec<&mut ParamSpec> {
        let outer = self.outer_params.iter_mut();
        let stacked = self.kinds.iter_mut().flat_map(|k| k.params.iter_mut());
        outer.chain(stacked).collect()
    }

    /// The stacked type of kind `k`'s parameter `p` on one device: `[layers of k, slab…]`.
    pub fn stacked_local_type(&self, k: usize, p: usize, devices: usize) -> TensorType {
        let spec = &self.kinds[k].params[p];
        let mut dims = vec![self.stack.layers_of_kind(k) as i64];
        dims.extend(spec.local_dims(devices));
        TensorType::new(spec.dtype, dims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_integer_inputs_declare_a_non_empty_range() {
        let ids = TensorType::new(DType::I32, [2, 4]);
        assert_eq!(InputSpec::new("tokens", ids.clone()).check(), Ok(()));
        assert_eq!(
            InputSpec::new("tokens", ids.clone())
                .with_values(0..16)
                .check(),
            Ok(())
        );
        let empty = InputSpec::new("labels", ids).with_values(3..3).check();
        assert_eq!(
            empty.map_err(|e| e.to_string()),
            Err("`fsdp`: input `labels` declares no valid value (3..3)".to_owned())
        );
        let float = InputSpec::new("x", TensorType::new(DType::F32, [2]))
            .with_values(0..1)
            .check();
        assert_eq!(
            float.map_err(|e| e.to_string()),
            Err("`fsdp`: input `x` is f32 but declares integer values 0..1".to_owned())
        );
    }
}
