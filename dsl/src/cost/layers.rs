//! What one layer of each kind of a [`StackModel`] costs, traced from the kind's own forward
//! function: its forward, its backward step (the recompute the backward replays plus the
//! VJP), and the bytes FSDP moves for its weights on a mesh. The traced graphs hold no data,
//! so full-size shapes cost nothing to trace.

use crate::autodiff::vjp;
use crate::builder::Scope;
use crate::error::{Error, Result};
use crate::fsdp::{LayerKind, StackModel};
use crate::precision::Precision;

use super::Cost;
use super::exchange::{Exchange, token_exchange};
use super::walk::{Accounting, of_with};

/// One layer of a kind, on one device of a mesh.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerCost {
    /// The kind's name.
    pub kind: String,
    /// The forward of one layer on one device's activation.
    pub forward: Cost,
    /// The backward step of one layer: the forward recomputed, then its VJP (dead forward
    /// nodes the VJP does not read are not counted).
    pub backward: Cost,
    /// Bytes of one layer's weights, gathered (every parameter at full size, in the compute
    /// type).
    pub weight_bytes: u64,
    /// Bytes each device receives all-gathering one layer's sharded weights: `(n−1)/n` of
    /// their full size, the ring all-gather of the [module](crate::cost) conventions. With
    /// expert parallelism of degree `p`, an expert weight is `1/p` of it gathered over the
    /// `n/p` devices of the rest of the mesh: priced so either from the accounting's
    /// [`ExpertParallel`](super::ExpertParallel) (a model built without it), or from a
    /// parameter's own [`gathered_over`](crate::fsdp::ParamSpec::gathered_over) axis (a model
    /// built for the expert-parallel mesh, whose forward is also traced on the weights as
    /// gathered, [`ParamSpec::gathered_type`](crate::fsdp::ParamSpec::gathered_type)).
    pub gathered_bytes: u64,
    /// Bytes each device sends reduce-scattering one layer's sharded weight gradients (in the
    /// reduce type): `(n−1)/n` of their full size.
    pub reduce_scatter_bytes: u64,
    /// Bytes each device sends all-reducing the gradients of the layer's replicated
    /// parameters: `2·(n−1)/n` of their size.
    pub all_reduce_bytes: u64,
    /// Token all_to_alls of an expert-parallel kind (zero otherwise).
    pub exchange: Exchange,
}

/// The cost of one layer of every kind of `model` on a mesh of `devices`, in the stack's kind
/// order, as the step built under `precision` runs it: the layer traced on the compute type,
/// weights gathered in it, gradients reduced in the reduce type. `accounting[k]` says how to count kind `k` (e.g. [`ActiveExperts`](super::ActiveExperts)
/// for a mixture-of-experts kind); missing entries count plainly.
///
/// Errors when `devices` is zero, or when tracing a kind's forward or VJP fails; the error
/// names the kind.
pub fn layer_costs(
    model: &StackModel,
    devices: usize,
    accounting: &[Accounting],
    precision: Precision,
) -> Result<Vec<LayerCost>> {
    if devices == 0 {
        return Err(Error::invalid("cost", "a mesh needs at least one device"));
    }
    model
        .kinds
        .iter()
        .enumerate()
        .map(|(k, kind)| {
            let a = accounting.get(k).copied().unwrap_or_default();
            layer_cost(model, kind, devices, &a, precision)
                .map_err(|e| Error::invalid("cost", format!("layer kind `{}`: {e}", kind.name)))
        })
        .collect()
}

/// One layer of `kind` traced as a device of `devices` runs it under `precision`: the
/// activation in the compute type, each weight as the layer sees it after its gather (full
/// size, except one gathered over a sub-axis only, an expert bank under expert parallelism,
/// which holds this rank's part).
pub(super) fn layer_forward(
    model: &StackModel,
    kind: &LayerKind,
    devices: usize,
    precision: Precision,
) -> Result<crate::ir::Function> {
    let f = Scope::new(&kind.name);
    let x = f.param(precision.compute_type(&model.activation));
    let weights: Vec<_> = kind
        .params
        .iter()
        .map(|p| f.param(precision.compute_type(&p.gathered_type(devices))))
        .collect();
    let y = (kind.forward)(&x, &weights)?;
    f.finish(&[y])
}

fn layer_cost(
    model: &StackModel,
    kind: &LayerKind,
    devices: usize,
    accounting: &Accounting,
    precision: Precision,
) -> Result<LayerCost> {
    let forward_fn = layer_forward(model, kind, devices, precision)?;
    let backward_fn = vjp(&forward_fn)?;
    let n = devices as u64;
    // Expert weights are split over the expert axis and gathered over the rest of the mesh.
    let ep = accounting.expert_parallel.filter(|e| e.degree > 1);
    if let Some(e) = ep
        && (!n.is_multiple_of(e.degree) || !e.experts.is_multiple_of(e.degree))
    {
        return Err(Error::invalid(
            "cost",
            format!(
                "expert parallelism {} must divide both the {n} devices and the {} experts",
                e.degree, e.experts
            ),
        ));
    }
    // Bytes per collective, `[gathered, reduced]`: weights move in the compute type, their
    // gradients in the reduce type.
    let (mut weight_bytes, mut sharded, mut replicated) = (0u64, [0u64; 2], [0u64; 2]);
    let mut expert_sent = [0u64; 2];
    for p in &kind.params {
        let elements = p.full_type().num_elements() as u64;
        let b = [
            elements * precision.compute_dtype(p.dtype).size_in_bytes() as u64,
            elements * precision.reduce_dtype(p.dtype).size_in_bytes() as u64,
        ];
        weight_bytes += b[0];
        for (i, b) in b.into_iter().enumerate() {
            match (ep, &p.gathered_over) {
                // Gathered over a sub-axis: each device receives the other shards of that axis.
                (_, Some(axis)) if p.shard_dim.is_some() => {
                    expert_sent[i] += b / n * (axis.size as u64).saturating_sub(1);
                }
                (Some(e), _) if p.shape.first().is_some_and(|&d| d as u64 == e.experts) => {
                    let fsdp = n / e.degree;
                    expert_sent[i] += b / e.degree / fsdp * (fsdp - 1);
                }
                _ if p.shard_dim.is_some() => sharded[i] += b,
                _ => replicated[i] += b,
            }
        }
    }
    let exchange = ep.map_or_else(Exchange::default, |e| token_exchange(&forward_fn, e));
    Ok(LayerCost {
        kind: kind.name.clone(),
        forward: of_with(&forward_fn, accounting)?,
        backward: of_with(&backward_fn, accounting)?,
        weight_bytes,
        gathered_bytes: sharded[0] / n * (n - 1) + expert_sent[0],
        reduce_scatter_bytes: sharded[1] / n * (n - 1) + expert_sent[1],
        all_reduce_bytes: 2 * (replicated[1] / n * (n - 1)),
        exchange,
    })
}
