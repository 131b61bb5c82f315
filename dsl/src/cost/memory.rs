//! What a training step holds on one device, estimated from the declared model before
//! anything is lowered or compiled: the state the step keeps between runs (weights, Adam's
//! moments), what the layer loops hold in flight (gathered weights, unreduced gradients,
//! each layer's saved input) and the largest working set of a single layer's backward or of
//! the parts outside the stack, traced from their own functions like the time costs
//! ([`layer_costs`](super::layer_costs)).
//!
//! A working set is the peak of the buffers live at once when the traced function runs in
//! its own order: a value counts from the op that writes it to the last op that reads it, and
//! only a value written to memory counts (one fused into its consumer never is, by the rule
//! of [`fusion`](super::fusion)). The compiler may order ops differently and reuse buffers
//! more cleverly, so this is an estimate, not a bound; `compile-report` prints it beside
//! XLA's own figure.

use std::collections::HashMap;

use crate::autodiff::vjp;
use crate::error::{Error, Result};
use crate::fsdp::StackModel;
use crate::ir::{Function, ValueId};
use crate::plan::PlanOptions;

use super::fusion::{self, Rule};

/// Bytes one device holds while a training step runs, by what holds them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryEstimate {
    /// This device's shards of every weight (the f32 masters the optimizer updates).
    pub weights: u64,
    /// Adam's two moments of each of those shards.
    pub optimizer: u64,
    /// This device's shards of the gradients, reduced, waiting for the update; with several
    /// micro-batches, also their running sum.
    pub gradients: u64,
    /// Each layer's input, saved by the forward for the backward to recompute from (one
    /// micro-batch's).
    pub saved: u64,
    /// Layer weights gathered at full size and in flight at once: the layer that runs and,
    /// with prefetch, the next one, gathered into the other of the loop's two buffers.
    pub gathered: u64,
    /// Full-size gradients of a layer waiting for their deferred reduce-scatter.
    pub unreduced: u64,
    /// The largest working set of one layer's backward: its forward recomputed, then its
    /// vector-Jacobian product, the layer's full-size gradients included.
    pub layer: u64,
    /// The parts outside the stack (embedding, final norm, head, loss) with their forward and
    /// backward working set, the logits included, and the step's inputs.
    pub outer: u64,
}

impl MemoryEstimate {
    /// Bytes in all.
    pub fn total(&self) -> u64 {
        self.parts().iter().map(|(_, b)| b).sum()
    }

    /// Each part with the name it is printed under.
    pub fn parts(&self) -> [(&'static str, u64); 8] {
        [
            ("weights", self.weights),
            ("Adam moments", self.optimizer),
            ("gradients", self.gradients),
            ("saved layer inputs", self.saved),
            ("gathered weights", self.gathered),
            ("deferred gradients", self.unreduced),
            ("layer backward", self.layer),
            ("embedding, head and loss", self.outer),
        ]
    }
}

/// The [`MemoryEstimate`] of one device of `devices` running `model`'s training step under
/// `options`, its batch split into `micro_batches`, with values materialised by `rule` (the
/// CPU compiler's [`Rule::SingleConsumer`] writes more of them out than an accelerator's
/// [`Rule::Shared`]).
///
/// Errors when `devices` or `micro_batches` is zero, or when tracing a kind's forward or VJP
/// fails; the error names the kind.
pub fn memory_estimate(
    model: &StackModel,
    devices: usize,
    options: PlanOptions,
    micro_batches: usize,
    rule: Rule,
) -> Result<MemoryEstimate> {
    if devices == 0 || micro_batches == 0 {
        return Err(Error::invalid(
            "memory",
            "a step needs at least one device and one micro-batch",
        ));
    }
    let precision = options.precision;
    let mut e = MemoryEstimate::default();
    for (spec, layers) in model.weights() {
        let local: i64 = spec.local_dims(devices).iter().product();
        let bytes = local.max(0) as u64 * layers as u64 * spec.dtype.size_in_bytes() as u64;
        e.weights += bytes;
        e.optimizer += 2 * bytes;
        e.gradients += if micro_batches > 1 { 2 * bytes } else { bytes };
    }
    let activation = precision.compute_type(&model.activation).size_in_bytes() as u64;
    e.saved = activation * model.stack.len() as u64;

    // The largest kind sets what the loops hold.
    let (mut weights, mut grads) = (0u64, 0u64);
    for kind in &model.kinds {
        let (w, g) = kind.params.iter().fold((0, 0), |(w, g), p| {
            let full = p.gathered_type(devices);
            let n = full.num_elements() as u64;
            (
                w + n * precision.compute_dtype(p.dtype).size_in_bytes() as u64,
                g + n * precision.reduce_dtype(p.dtype).size_in_bytes() as u64,
            )
        });
        weights = weights.max(w);
        grads = grads.max(g);
        let working = layer_backward_peak(model, kind, devices, options, rule).map_err(|err| {
            Error::invalid("memory", format!("layer kind `{}`: {err}", kind.name))
        })?;
        e.layer = e.layer.max(working);
    }
    e.gathered = (1 + u64::from(options.prefetch_fsdp_weights)) * weights;
    e.unreduced = u64::from(options.defer_grad_reduce_scatter) * grads;

    let outer = model.outer_function(precision)?;
    let inputs: u64 = model
        .inputs
        .iter()
        .map(|i| i.ty.size_in_bytes() as u64 * micro_batches as u64)
        .sum();
    let gathered_outer: u64 = outer.params[model.inputs.len()..]
        .iter()
        .map(|&v| outer.values[v].size_in_bytes() as u64)
        .sum();
    e.outer = inputs + gathered_outer + working_set(&vjp(&outer)?, rule)?;
    Ok(e)
}

/// The working set of one layer of `kind`'s backward step: the forward traced as the time
/// costs trace it ([`super::layers::layer_forward`]), then its VJP.
fn layer_backward_peak(
    model: &StackModel,
    kind: &crate::fsdp::LayerKind,
    devices: usize,
    options: PlanOptions,
    rule: Rule,
) -> Result<u64> {
    let forward = super::layers::layer_forward(model, kind, devices, options.precision)?;
    working_set(&vjp(&forward)?, rule)
}

/// The peak bytes of the values `f` writes to memory that are live at once, when its ops run
/// in order: its parameters left out (the caller counts them where they live), its results
/// live to the end.
pub fn working_set(f: &Function, rule: Rule) -> Result<u64> {
    let expanded = crate::lower::expand_softmax(f)?;
    let f = &expanded;
    let live = f.live_nodes();
    let written = fusion::traffic(f, &live, rule).materialised;
    let mut alias: HashMap<ValueId, ValueId> = HashMap::new();
    let root = |alias: &HashMap<ValueId, ValueId>, v: ValueId| *alias.get(&v).unwrap_or(&v);
    let (mut born, mut last) = (HashMap::new(), HashMap::new());
    for (i, node) in f.nodes.iter().enumerate() {
        if !live[i] {
            continue;
        }
        for &o in &node.operands {
            last.insert(root(&alias, o), i);
        }
        if fusion::is_alias(&node.op) {
            for (&r, &o) in node.results.iter().zip(&node.operands) {
                let o = root(&alias, o);
                alias.insert(r, o);
            }
            continue;
        }
        for &r in &node.results {
            born.insert(r, i);
        }
    }
    let end = f.nodes.len();
    for &r in &f.results {
        last.insert(root(&alias, r), end);
    }
    // Bytes that start and stop being live at each op, swept in order.
    let mut change = vec![0i128; end + 2];
    for v in written {
        let (Some(&from), Some(ty)) = (born.get(&v), f.values.get(v)) else {
            continue;
        };
        let to = last.get(&v).copied().unwrap_or(from).max(from);
        let bytes = ty.size_in_bytes() as i128;
        change[from] += bytes;
        change[to + 1] -= bytes;
    }
    let (mut now, mut peak) = (0i128, 0i128);
    for c in change {
        now += c;
        peak = peak.max(now);
    }
    Ok(peak as u64)
}
