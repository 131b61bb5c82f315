//! The FLOPs a training step of the Llama model does, counted two ways: the model's
//! (what MFU divides by) and the program's (what the machine actually runs, recompute
//! included).

use serde::Serialize;
use stackscan::cost;
use stackscan::fsdp::TrainStep;

use crate::llama::{self, LlamaConfig};

/// A step's FLOP counts and how each was counted.
#[derive(Clone, Debug, Serialize)]
pub struct StepFlops {
    /// Parameters of the matrix products (every decoder projection and the LM head; the
    /// embedding table is a lookup and norms are elementwise, so neither counts).
    pub matmul_params: i64,
    /// Tokens per step (global batch × sequence).
    pub tokens: i64,
    /// Model FLOPs per step: `6 · matmul_params · tokens` (forward 2, backward 4 per parameter
    /// and token) plus attention `12 · layers · heads · head_dim · seq · tokens` (QKᵀ and AV,
    /// forward and backward, over the whole sequence as PaLM's appendix B counts it). Full
    /// recompute in the backward pass is not counted: MFU measures useful work.
    pub model_flops: f64,
    /// Matrix FLOPs of the lowered program on all devices, from `stackscan::cost` (its forward,
    /// the recompute inside each layer's VJP, and the backward), the optimizer excluded: what
    /// hardware FLOPs utilisation divides by.
    pub program_matrix_flops: f64,
    /// How `model_flops` was counted, in words, for readers of the JSON.
    pub model_flops_formula: &'static str,
}

/// The counts for `c` at `global_batch` sequences per step, `step` being its lowered program
/// on `devices` devices.
pub fn step_flops(
    c: &LlamaConfig,
    global_batch: i64,
    step: &TrainStep,
    devices: usize,
) -> stackscan::Result<StepFlops> {
    let layer: i64 = llama::layer_params(c)
        .iter()
        .filter(|p| p.shape.len() == 2)
        .map(|p| p.shape.iter().product::<i64>())
        .sum();
    let matmul_params = layer * c.layers as i64 + c.d_model * c.vocab;
    let tokens = global_batch * c.seq;
    let attention =
        12.0 * c.layers as f64 * (c.heads * c.head_dim) as f64 * c.seq as f64 * tokens as f64;
    let model_flops = 6.0 * matmul_params as f64 * tokens as f64 + attention;
    let per_device = cost::of(step.program.main())?.matrix_flops.total();
    Ok(StepFlops {
        matmul_params,
        tokens,
        model_flops,
        program_matrix_flops: per_device as f64 * devices as f64,
        model_flops_formula: "6 * matmul_params * tokens + 12 * layers * heads * head_dim * seq * tokens",
    })
}
