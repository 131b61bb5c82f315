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

/// Where and how to predict, as `plan --predict` takes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// A hardware profile name or TOML path ([`Hardware::load`]).
    pub hardware: String,
    /// Chips on the mesh.
    pub chips: usize,
    /// Expert-parallel degree.
    pub ep: Option<usize>,
}

/// The predicted step of the full-size model `model` (a
/// [`timeline`](crate::timeline::model_by_name) name or `config.json`) under `options`, and
/// prefetch off for comparison, as one line:
/// `predicted stack step on 64 × TPU7x: 4510.5 ms (forward …, backward …, exposed …); prefetch off 7104.7 ms (−36.5 %)`.
pub fn describe(model: &str, options: PlanOptions, target: &Target) -> Result<String> {
    if target.chips == 0 {
        return Err(stackscan::Error::InvalidOp {
            op: "predict",
            message: "`--chips` must be at least 1".into(),
        });
    }
    let priced = crate::timeline::model_by_name(model)?;
    let accounting = priced.accounting(target.ep)?;
    let hw = Hardware::load(&target.hardware)?;
    let chips = target.chips;
    let this = predict(&priced.model, options, &hw, chips, &accounting, true)?;
    let off = predict(
        &priced.model,
        PlanOptions {
            prefetch_fsdp_weights: false,
            defer_grad_reduce_scatter: false,
            ..options
        },
        &hw,
        chips,
        &accounting,
        true,
    )?;
    let ms = |s: f64| s * 1e3;
    let (a, b) = (this.step_seconds(), off.step_seconds());
    Ok(format!(
        "predicted stack step on {chips} × {}{}: {:.1} ms (forward {:.1}, backward {:.1}, exposed \
         communication {:.1}); prefetch off {:.1} ms ({:+.1} %)",
        hw.name,
        target.ep.map_or(String::new(), |e| format!(", EP {e}")),
        ms(a),
        ms(this.forward.total),
        ms(this.backward.total),
        ms(this.forward.exposed_communication + this.backward.exposed_communication),
        ms(b),
        (a / b - 1.0) * 100.0
    ))
}
