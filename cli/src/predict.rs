//! Step-time prediction from the plan the lowering compiles: a model's layer kinds costed
//! from their traced graphs, divided by a hardware profile's rates, and the plan's forward and
//! backward replayed by the simulator. Generic over any [`StackModel`], so new layer kinds
//! (MoE, MLA, GDN) are predicted as soon as they exist.

use stackscan::cost::{Accounting, layer_costs, of};
use stackscan::fsdp::Adam;
use stackscan::fsdp::StackModel;
use stackscan::plan::{Plan, PlanOptions};
use stackscan::sim::{KindTimes, Timeline, simulate};
use stackscan::{Axis, Precision, Result, TensorType, vjp};

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
/// (not prefetched, so exposed), and the optimizer ([`optimizer_seconds`]): as the step built
/// under `precision` runs them (weights gathered in its compute type, gradients reduced in its
/// reduce type).
pub fn outer_seconds(
    model: &StackModel,
    hardware: &Hardware,
    devices: usize,
    precision: Precision,
) -> Result<f64> {
    let n = devices.max(1) as u64;
    let (mut gathered, mut reduced) = (0u64, 0u64);
    for p in &model.outer_params {
        if p.shard_dim.is_some() {
            let elements = p.full_type().num_elements() as u64;
            let bytes = |d: stackscan::DType| elements * d.size_in_bytes() as u64 / n * (n - 1);
            gathered += bytes(precision.compute_dtype(p.dtype));
            reduced += bytes(precision.reduce_dtype(p.dtype));
        }
    }
    let collectives = hardware.collective_seconds(gathered as f64, hardware.fsdp_lane_gb_per_s)
        + hardware.collective_seconds(reduced as f64, hardware.second_lane_gb_per_s);
    Ok(outer_compute_seconds(model, hardware, precision)?
        + collectives
        + optimizer_seconds(model, hardware, devices)?)
}

/// Seconds of the embedding, final norm, head and loss, forward and VJP, costed from their
/// traced graph at full size (their weights are gathered before they run).
pub fn outer_compute_seconds(
    model: &StackModel,
    hardware: &Hardware,
    precision: Precision,
) -> Result<f64> {
    let outer = of(&vjp(&model.outer_function(precision)?)?)?;
    Ok(hardware.compute_seconds(&outer))
}

/// Seconds of Adam's update of this device's share of every parameter, stack included,
/// costed from the update graph [`with_adam`](stackscan::fsdp::with_adam) appends to the step
/// ([`Adam::update_function`]): the moments, the bias-corrected step, the finiteness counts
/// and the selects that keep the old state when a value is not finite, with their fused
/// traffic and kernels, plus the `psum` that agrees on the verdict. In the weights' own
/// types: optimizer state stays f32 in mixed precision.
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
    Ok(hardware.compute_seconds(&update)
        + hardware.collective_seconds(4.0, hardware.second_lane_gb_per_s))
}

/// Predicts `model`'s stack under `options` (its precision included: the program priced is
/// the one built under it) on `devices` chips of `hardware`. `accounting` is per kind, as for
/// [`layer_costs`].
pub fn predict(
    model: &StackModel,
    options: PlanOptions,
    hardware: &Hardware,
    devices: usize,
    accounting: &[Accounting],
) -> Result<Prediction> {
    let times = kind_times(model, options, hardware, devices, accounting)?;
    let plan = Plan::new(&model.stack, options)?;
    let sim = hardware.sim_options();
    Ok(Prediction {
        forward: simulate(&plan.forward, &model.stack, &times, sim)?,
        backward: simulate(&plan.backward, &model.stack, &times, sim)?,
        outer: outer_seconds(model, hardware, devices, options.precision)?,
    })
}

/// What one layer of each kind of `model` takes on each lane of `hardware` (one device of a
/// mesh of `devices`), in the program built under `options`: what the simulator replays.
pub fn kind_times(
    model: &StackModel,
    options: PlanOptions,
    hardware: &Hardware,
    devices: usize,
    accounting: &[Accounting],
) -> Result<Vec<KindTimes>> {
    let costs = layer_costs(model, devices, accounting, options.precision)?;
    Ok(costs.iter().map(|c| hardware.kind_times(c)).collect())
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
    /// The precision asked for (`--precision`), if any; see [`Target::precision`].
    pub precision: Option<Precision>,
}

impl Target {
    /// The precision a prediction prices: the one asked for; else the model's declared one
    /// if it is mixed; else the one `hardware` trains in ([`Hardware::training_precision`]:
    /// bf16 on an accelerator, f32 on a CPU).
    pub fn precision(&self, declared: Precision, hardware: &Hardware) -> Precision {
        self.precision.unwrap_or(if declared.is_mixed() {
            declared
        } else {
            hardware.training_precision()
        })
    }
}

/// The predicted step of `priced` (a config priced by
/// [`timeline::priced`](crate::timeline::priced)) under `options`, and
/// prefetch off for comparison, as one line:
/// `predicted step on 64 × TPU7x: … ms (stack forward …, backward …, exposed …; outer parts
/// and optimizer …); prefetch off … ms (−… %); the bf16 program priced`.
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
    let options = options.with_precision(target.precision(options.precision, &hw));
    let this = predict(&priced.model, options, &hw, devices, &accounting)?;
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
    )?;
    let ms = |s: f64| s * 1e3;
    let (a, b) = (this.step_seconds(), off.step_seconds());
    Ok(format!(
        "predicted step on {chips} × {}{}: {:.1} ms (stack forward {:.1}, backward {:.1}, exposed \
         communication {:.1}; outer parts and optimizer {:.1}); prefetch off {:.1} ms ({:+.1} %); \
         the {} program priced",
        chip.name,
        target.ep.map_or(String::new(), |e| format!(", EP {e}")),
        ms(a),
        ms(this.forward.total),
        ms(this.backward.total),
        ms(this.forward.exposed_communication + this.backward.exposed_communication),
        ms(this.outer),
        ms(b),
        (a / b - 1.0) * 100.0,
        options.precision
    ))
}
