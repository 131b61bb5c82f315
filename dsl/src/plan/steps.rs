//! Expanding a pass into steps: what each layer's step gathers, reduce-scatters and holds.

use super::schedule::{OwnGradient, Pass, Plan, Segment, Signature, WeightSource};

/// A buffer a step holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
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
    /// Every step in execution order, expanding loops: the layer it runs and its group's
    /// signature.
    pub fn scheduled_steps(&self) -> Vec<(usize, Signature)> {
        let mut out = Vec::new();
        for s in &self.segments {
            match s {
                Segment::Group(g) => out.extend(g.layers.iter().map(|&l| (l, g.signature))),
                Segment::Blocks {
                    trips,
                    stride,
                    groups,
                } => {
                    for t in 0..*trips as isize {
                        for g in groups {
                            out.extend(
                                g.layers
                                    .iter()
                                    .map(|&l| ((l as isize + t * stride) as usize, g.signature)),
                            );
                        }
                    }
                }
            }
        }
        out
    }

    /// The layers in execution order, expanding loops.
    pub fn layer_order(&self) -> Vec<usize> {
        self.scheduled_steps().into_iter().map(|(l, _)| l).collect()
    }

    /// The pass, step by step, as the lowering builds it from the signatures: the property
    /// tests check this against the invariants and against the lowered program.
    pub fn steps(&self) -> Vec<Step> {
        let scheduled = self.scheduled_steps();
        scheduled
            .iter()
            .enumerate()
            .map(|(pos, &(layer, sig))| {
                let next = scheduled.get(pos + 1).map(|&(l, _)| l);
                let previous = pos.checked_sub(1).map(|p| scheduled[p].0);
                let mut gathers = Vec::new();
                let mut start: Vec<Buffer> = vec![Buffer::Gathered(layer)];
                match sig.weights {
                    // The first step's carried weights come from the prologue gather.
                    WeightSource::Carried if pos == 0 => gathers.push(layer),
                    WeightSource::Carried => {}
                    WeightSource::GatheredAtUse => gathers.push(layer),
                }
                if let (Some(_), Some(nx)) = (sig.prefetch, next) {
                    gathers.push(nx);
                    start.push(Buffer::Gathered(nx));
                }
                let mut end = start.clone();
                let mut reduce_scatters = Vec::new();
                if let (Some(_), Some(prev)) = (sig.pending_grad, previous) {
                    reduce_scatters.push(prev);
                    start.push(Buffer::Gradient(prev));
                }
                match sig.own_grad {
                    OwnGradient::Absent => {}
                    OwnGradient::Scattered => {
                        end.push(Buffer::Gradient(layer));
                        reduce_scatters.push(layer);
                    }
                    OwnGradient::Deferred => {
                        end.push(Buffer::Gradient(layer));
                        // The last step's gradient is scattered by the epilogue.
                        if next.is_none() {
                            reduce_scatters.push(layer);
                        }
                    }
                }
                let live = if end.len() >= start.len() { end } else { start };
                Step {
                    layer,
                    gathers,
                    reduce_scatters,
                    live,
                }
            })
            .collect()
    }
}

impl Plan {
    /// The forward pass, step by step.
    pub fn forward_steps(&self) -> Vec<Step> {
        self.forward.steps()
    }

    /// The backward pass, step by step.
    pub fn backward_steps(&self) -> Vec<Step> {
        self.backward.steps()
    }
}
