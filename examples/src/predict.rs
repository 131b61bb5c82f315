//! Step-time prediction from the plan the lowering compiles: a model's layer kinds costed
//! from their traced graphs, divided by a hardware profile's rates, and the plan's forward and
//! backward replayed by the simulator. Generic over any [`StackModel`], so new layer kinds
//! (MoE, MLA, GDN) are predicted as soon as they exist.

use stackscan::Result;
use stackscan::cost::{Accounting, layer_costs};
use stackscan::fsdp::StackModel;
use stackscan::plan::{Plan, PlanOptions};
use stackscan::sim::{SimOptions, Timeline, simulate};

use crate::hardware::Hardware;

/// A predicted training step.
#[derive(Clone, Debug)]
pub struct Prediction {
    /// The forward pass replayed.
    pub forward: Timeline,
    /// The backward pass replayed.
    pub backward: Timeline,
}

impl Prediction {
    /// Forward plus backward, seconds (the outer layers and optimizer are left out).
    pub fn step_seconds(&self) -> f64 {
        self.forward.total + self.backward.total
    }
}

/// Predicts `model`'s stack under `options` on `devices` chips of `hardware`. `accounting`
/// is per kind, as for [`layer_costs`]; `as_bf16` prices f32 as bf16 (see
/// [`Hardware::compute_seconds`]).
pub fn predict(
    model: &StackModel,
    options: PlanOptions,
    hardware: &Hardware,
    devices: usize,
    accounting: &[Accounting],
    as_bf16: bool,
) -> Result<Prediction> {
    let costs = layer_costs(model, devices, accounting)?;
    let times: Vec<_> = costs
        .iter()
        .map(|c| hardware.kind_times(c, as_bf16))
        .collect();
    let plan = Plan::new(&model.stack, options)?;
    let sim = SimOptions::default();
    Ok(Prediction {
        forward: simulate(&plan.forward, &model.stack, &times, sim)?,
        backward: simulate(&plan.backward, &model.stack, &times, sim)?,
    })
}
