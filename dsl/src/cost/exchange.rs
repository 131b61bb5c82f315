//! The token all_to_all of an expert-parallel mixture-of-experts layer, priced before the
//! layer emits one.
//!
//! With the experts split over an `expert` mesh axis of `degree` devices, each device sends
//! the rows of its dispatch buffer `[E, C, d]` that belong to other devices' experts and gets
//! their outputs back: two exchanges of `(degree − 1)/degree` of the buffer per forward
//! (dispatch, combine), four per backward step (the recompute's two and their transposes in the
//! VJP). The buffer's type is read from the traced graph: the left operand of the first
//! `dot_general` batched over the experts.
//!
//! This stands in for walking emitted `all_to_all` ops, which the layer will emit once the
//! DSL's expert-parallel lowering lands: [`token_exchange`] is the one function to switch,
//! and [`Cost::collective`](super::Cost::collective)`(AllToAll)` already counts emitted ones.

use crate::ir::{Function, Op};
use crate::types::TensorType;

/// An expert-parallel split of a layer kind's routed experts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpertParallel {
    /// Routed experts per layer; a parameter whose leading dimension is this many is an
    /// expert weight, split over the expert axis.
    pub experts: u64,
    /// Devices on the expert axis (EP).
    pub degree: u64,
}

/// Token exchanges of one layer, per device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Exchange {
    /// Bytes each device sends in one forward.
    pub forward_bytes: u64,
    /// all_to_alls in one forward.
    pub forward_count: u64,
    /// Bytes each device sends in one backward step.
    pub backward_bytes: u64,
    /// all_to_alls in one backward step.
    pub backward_count: u64,
}

/// The dispatch buffer of `forward`: the left operand of its first product batched over
/// `experts`, searching loop bodies too; `None` for a layer without routed experts.
pub fn dispatch_buffer(forward: &Function, experts: u64) -> Option<TensorType> {
    forward.nodes.iter().find_map(|node| match &node.op {
        Op::DotGeneral { dims, .. } => {
            let lhs = forward.values.get(*node.operands.first()?)?;
            dims.lhs_batch
                .iter()
                .any(|&d| lhs.dims.get(d).is_some_and(|&n| n as u64 == experts))
                .then(|| lhs.clone())
        }
        Op::Scan { body, .. } | Op::While { body, .. } => dispatch_buffer(body, experts),
        Op::Case { branches, .. } => branches.iter().find_map(|b| dispatch_buffer(b, experts)),
        _ => None,
    })
}

/// The exchanges of one layer whose forward is `forward` under `ep`: see the module docs.
pub fn token_exchange(forward: &Function, ep: ExpertParallel) -> Exchange {
    let Some(buffer) = dispatch_buffer(forward, ep.experts) else {
        return Exchange::default();
    };
    if ep.degree <= 1 {
        return Exchange::default();
    }
    let sent = (ep.degree - 1) * buffer.size_in_bytes() as u64 / ep.degree;
    Exchange {
        forward_bytes: 2 * sent,
        forward_count: 2,
        backward_bytes: 4 * sent,
        backward_count: 4,
    }
}
