//! The FLOPs a training step does, counted two ways: the model's (what MFU divides by) and
//! the program's (what the machine actually runs, recompute included). Both come from the
//! cost model's count of traced graphs, so every model registered is counted the same way.

use serde::Serialize;
use stackscan::Precision;
use stackscan::cost::{self, layer_costs};
use stackscan::fsdp::{StackModel, TrainStep};

/// A step's FLOP counts and how each was counted.
#[derive(Clone, Debug, Serialize)]
pub struct StepFlops {
    /// Parameters of the model (embedding included; a lookup does no FLOPs).
    pub parameters: i64,
    /// Tokens per step (global batch × sequence).
    pub tokens: i64,
    /// Matrix FLOPs of one forward over the step's tokens: every layer's traced forward and
    /// the outer parts' (embedding, final norm, head, loss), as `stackscan::cost` counts them,
    /// on all devices.
    pub forward_matrix_flops: f64,
    /// Model FLOPs per step: 3 × the forward (forward 1, backward 2). For a dense decoder it
    /// is `6 · N · tokens` for the N parameters of its products plus attention's
    /// `12 · layers · heads · head_dim · seq · tokens` (QKᵀ and AV over the whole sequence as
    /// PaLM's appendix B counts it). Full recompute in the backward pass is not counted: MFU
    /// measures useful work.
    pub model_flops: f64,
    /// Matrix FLOPs of the lowered program on all devices, from `stackscan::cost` (its forward,
    /// the recompute inside each layer's VJP, and the backward), the optimizer excluded: what
    /// hardware FLOPs utilisation divides by.
    pub program_matrix_flops: f64,
    /// How `model_flops` was counted, in words, for readers of the JSON.
    pub model_flops_formula: &'static str,
}

/// The counts for `model` at `tokens` tokens per step over `devices` devices, `step` being its
/// lowered program.
pub fn step_flops(
    model: &StackModel,
    tokens: i64,
    step: &TrainStep,
    devices: usize,
) -> stackscan::Result<StepFlops> {
    let per_device = forward_matrix_flops(model, devices)?;
    let forward = per_device * devices as f64;
    let program = cost::of(step.program.main())?.matrix_flops.total();
    Ok(StepFlops {
        parameters: model.parameters().iter().map(|p| p.elements()).sum(),
        tokens,
        forward_matrix_flops: forward,
        model_flops: 3.0 * forward,
        program_matrix_flops: program as f64 * devices as f64,
        model_flops_formula: "3 * matrix FLOPs of the traced forward (every layer and the outer parts), all devices",
    })
}

/// Matrix FLOPs of one device's forward: each layer kind's traced forward times its layers,
/// plus the outer parts traced at full size.
fn forward_matrix_flops(model: &StackModel, devices: usize) -> stackscan::Result<f64> {
    let layers = layer_costs(model, devices, &[], Precision::F32)?;
    let mut flops = 0.0;
    for (k, cost) in layers.iter().enumerate() {
        let count = model.stack.layers_of_kind(k);
        flops += count as f64 * cost.forward.matrix_flops.total() as f64;
    }
    let outer = cost::of(&model.outer_function(Precision::F32)?)?;
    Ok(flops + outer.matrix_flops.total() as f64)
}
