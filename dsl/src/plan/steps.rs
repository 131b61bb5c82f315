//! Expanding a pass into steps: what each layer's step gathers, reduce-scatters and holds.

use super::schedule::{Direction, Pass, Plan, PlanOptions, Segment};

/// A buffer a step holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Buffer {
    /// A layer's all-gathered weights.
    Gathered(usize),
    /// A layer's unreduced weight gradient, waiting for its reduce-scatter.
    Gradient(usize),
}

/// One layer's step in a pass.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Step {
    /// The layer run.
    pub layer: usize,
    /// Layers whose weight all-gathers this step issues (the first step also issues the
    /// prologue gather of its own layer).
    pub gathers: Vec<usize>,
    /// Layers whose gradients this step reduce-scatters (the last backward step also issues
    /// the epilogue reduce-scatter of its own deferred gradient).
    pub reduce_scatters: Vec<usize>,
    /// The largest set of buffers alive at once during the step.
    pub live: Vec<Buffer>,
}

impl Pass {
    /// The layers in execution order, expanding loops.
    pub fn layer_order(&self) -> Vec<usize> {
        let mut out = Vec::new();
        for s in &self.segments {
            match s {
                Segment::Group(g) => out.extend(&g.layers),
                Segment::Blocks {
                    trips,
                    stride,
                    groups,
                } => {
                    for t in 0..*trips as isize {
                        for g in groups {
                            out.extend(
                                g.layers.iter().map(|&l| (l as isize + t * stride) as usize),
                            );
                        }
                    }
                }
            }
        }
        out
    }
}

impl Plan {
    /// The forward pass, step by step.
    pub fn forward_steps(&self) -> Vec<Step> {
        expand(&self.forward, self.options, self.layers)
    }

    /// The backward pass, step by step.
    pub fn backward_steps(&self) -> Vec<Step> {
        expand(&self.backward, self.options, self.layers)
    }
}

fn expand(pass: &Pass, o: PlanOptions, n: usize) -> Vec<Step> {
    let order = pass.layer_order();
    let backward = pass.direction == Direction::Backward;
    order
        .iter()
        .enumerate()
        .map(|(pos, &layer)| {
            let next = order.get(pos + 1).copied();
            let mut gathers = Vec::new();
            if o.prefetch_fsdp_weights {
                if pos == 0 {
                    gathers.push(layer);
                }
                gathers.extend(next);
            } else {
                gathers.push(layer);
            }
            let mut reduce_scatters = Vec::new();
            let mut start: Vec<Buffer> = vec![Buffer::Gathered(layer)];
            let mut end: Vec<Buffer> = vec![Buffer::Gathered(layer)];
            if o.prefetch_fsdp_weights
                && let Some(nx) = next
            {
                start.push(Buffer::Gathered(nx));
                end.push(Buffer::Gathered(nx));
            }
            if backward {
                end.push(Buffer::Gradient(layer));
                if o.defer_grad_reduce_scatter {
                    // The previous step's gradient is carried in and scattered first.
                    if let Some(&prev) = pos.checked_sub(1).and_then(|p| order.get(p)) {
                        reduce_scatters.push(prev);
                        start.push(Buffer::Gradient(prev));
                    }
                    if next.is_none() {
                        reduce_scatters.push(layer);
                    }
                } else {
                    reduce_scatters.push(layer);
                }
            }
            let live = if end.len() >= start.len() { end } else { start };
            debug_assert!(layer < n);
            Step {
                layer,
                gathers,
                reduce_scatters,
                live,
            }
        })
        .collect()
}
