//! Step-time prediction from the plan the lowering compiles: a model's layer kinds costed
//! from their traced graphs, divided by a hardware profile's rates, and the plan's forward and
//! backward replayed by the simulator. Generic over any [`StackModel`], so new layer kinds
//! (MoE, MLA, GDN) are predicted as soon as they exist.

use stackscan::cost::{Accounting, layer_costs, of};
use stackscan::fsdp::Adam;
use stackscan::fsdp::StackModel;
use stackscan::plan::{Plan, PlanOptions};
use stackscan::sim::{Timeline, simulate};
use stackscan::{Axis, Result, TensorType, vjp};

use crate::hardware::Hardware;

/// A predicted training step.
#[derive(Clone, Debug)]
pub struct Prediction {
    /// The forward pass replayed.
    pub forward: Timeline,
    /// The backward pass replayed.
    pub backward: Timeline,
    /// What the plan does not schedule ([`outer_seconds`]), seconds.
    pub outer: f64,
}

impl Prediction {
    /// The layer stack's forward plus backward, seconds: what the schedule changes.
    pub fn stack_seconds(&self) -> f64 {
        self.forward.total + self.backward.total
    }

    /// The whole step: the stack and the outer parts and optimizer, seconds.
    pub fn step_seconds(&self) -> f64 {
        self.stack_seconds() + self.outer
    }
}

/// Seconds of one step's work outside the plan: the embedding, final norm, head and loss
/// ([`outer_compute_seconds`]), the gathers and reduce-scatters of their sharded weights
/// (not prefetched, so exposed), and the optimizer ([`optimizer_seconds`]).
pub fn outer_seconds(
    model: &StackModel,
    hardware: &Hardware,
    devices: usize,
    as_bf16: bool,
) -> Result<f64> {
    let n = devices.max(1) as u64;
    let shrink = if as_bf16 { 0.5 } else { 1.0 };
    let mut sharded = 0u64;
    for p in &model.outer_params {
        if p.shard_dim.is_some() {
            sharded += p.full_type().size_in_bytes() as u64 / n * (n - 1);
        }
    }
    let collectives = hardware
        .collective_seconds(sharded as f64 * shrink, hardware.fsdp_lane_gb_per_s)
        + hardware.collective_seconds(sharded as f64 * shrink, hardware.second_lane_gb_per_s);
    Ok(outer_compute_seconds(model, hardware, as_bf16)?
        + collectives
        + optimizer_seconds(model, hardware, devices)?)
}

/// Seconds of the embedding, final norm, head and loss, forward and VJP, costed from their
/// traced graph at full size (their weights are gathered before they run).
pub fn outer_compute_seconds(
    model: &StackModel,
    hardware: &Hardware,
    as_bf16: bool,
) -> Result<f64> {
    let outer = of(&vjp(&model.outer_function()?)?)?;
    Ok(hardware.compute_seconds(&outer, as_bf16))
}

/// Seconds of Adam's update of this device's share of every parameter, stack included,
/// costed from the update graph [`with_adam`](stackscan::fsdp::with_adam) appends to the step
/// ([`Adam::update_function`]): the moments, the bias-corrected step, the finiteness counts
/// and the selects that keep the old state when a value is not finite, with their fused
/// traffic and kernels, plus the `psum` that agrees on the verdict. Never priced as bf16:
/// optimizer state stays f32 in mixed precision.
pub fn optimizer_seconds(model: &StackModel, hardware: &Hardware, devices: usize) -> Result<f64> {
    let n = devices.max(1);
    // Each weight tensor as one flat slab of this device's elements: an elementwise update
    // costs the same whatever the slab's shape.
    let types: Vec<TensorType> = model
        .weights()
        .iter()
        .map(|(p, layers)| {
            let local: i64 = p.local_dims(n).iter().product();
            TensorType::new(p.dtype, [local * *layers as i64])
        })
        .collect();
    let axis = Axis {
        name: "fsdp".into(),
        size: n,
    };
    let update = of(&Adam::default().update_function(&types, &axis)?)?;
    Ok(hardware.compute_seconds(&update, false)
        + hardware.collective_seconds(4.0, hardware.second_lane_gb_per_s))
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
    let sim = hardware.sim_options();
    Ok(Prediction {
        forward: simulate(&plan.forward, &model.stack, &times, sim)?,
        backward: simulate(&plan.backward, &model.stack, &times, sim)?,
        outer: outer_seconds(model, hardware, devices, as_bf16)?,
    })
}

/// Where and how to predict, as `plan --predict` takes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// A hardware profile name or TOML path ([`Hardware::load`]).
    pub hardware: String,
    /// Chips on the mesh (each presents the profile's `devices_per_chip` devices).
    pub chips: usize,
    /// Expert-parallel degree.
    pub ep: Option<usize>,
}

/// The predicted step of `priced` (a config priced by
/// [`timeline::priced`](crate::timeline::priced)) under `options`, and
/// prefetch off for comparison, as one line:
/// `predicted step on 64 × TPU7x: … ms (stack forward …, backward …, exposed …; outer parts
/// and optimizer …); prefetch off … ms (−… %)`.
pub fn describe(
    priced: &crate::timeline::PricedModel,
    options: PlanOptions,
    target: &Target,
) -> Result<String> {
    if target.chips == 0 {
        return Err(stackscan::Error::InvalidOp {
            op: "predict",
            message: "`--chips` must be at least 1".into(),
        });
    }
    let accounting = priced.accounting(target.ep)?;
    let chip = Hardware::load(&target.hardware)?;
    let chips = target.chips;
    let devices = chips * chip.devices_per_chip;
    let hw = chip.per_device();
    let bf16 = !hw.trains_in_f32;
    let this = predict(&priced.model, options, &hw, devices, &accounting, bf16)?;
    let off = predict(
        &priced.model,
        PlanOptions {
            prefetch_fsdp_weights: false,
            defer_grad_reduce_scatter: false,
            ..options
        },
        &hw,
        devices,
        &accounting,
        bf16,
    )?;
    let ms = |s: f64| s * 1e3;
    let (a, b) = (this.step_seconds(), off.step_seconds());
    Ok(format!(
        "predicted step on {chips} × {}{}: {:.1} ms (stack forward {:.1}, backward {:.1}, exposed \
         communication {:.1}; outer parts and optimizer {:.1}); prefetch off {:.1} ms ({:+.1} %)",
        chip.name,
        target.ep.map_or(String::new(), |e| format!(", EP {e}")),
        ms(a),
        ms(this.forward.total),
        ms(this.backward.total),
        ms(this.forward.exposed_communication + this.backward.exposed_communication),
        ms(this.outer),
        ms(b),
        (a / b - 1.0) * 100.0
    ))
}
