//! `plan` (a full-size stack's forward and backward schedule in MaxText's notation) and
//! `params` (a declared model's parameter table).

use std::io::Write;

use clap::Args;
use stackscan::plan::{Plan, PlanOptions, PrefetchIssue};

use super::CliError;
use super::args::ScheduleArgs;
use stackscan_models::memory;
use stackscan_models::registry::{ModelConfig, ModelName, Preset};

/// How to read a plan, for `plan --help` and `docs/plans.md`.
pub const NOTATION: &str = "\
How to read a plan (MaxText's notation):
  [D0, D1]     one loop over layers D0 and D1; a layer is its kind's name and its index in
               the stack (`D0`, `GDN 2` inside a repeated block: its place in the block), or
               the kind's name alone when the index is implied (`[attention]`)
  [M3 … M59]   one loop over every layer from M3 to M59
  →            the order the loops run (`forward:` from the first layer, `backward:` from
               the last)
  (n×2)        n trips of 2 layers each (unroll 2): each layer's weights, gathered one layer
               ahead, sit in one of two buffers while the other is filled
  (1 + n×2)    one layer first, then n trips of 2 layers
  (n×1)        n trips of 1 layer (unroll 1: one buffer)
  (peeled)     one layer in a loop of its own: a boundary layer, whose carry holds another
               group's prefetched weights or deferred gradient, so it cannot share the
               double-buffered loop
  {…} × n      the groups inside the braces as an outer loop of n trips (a block of several
               kinds repeated); the last block follows, peeled out of it

Example: stackscan plan --model qwen35 --no-defer --predict --hardware tpu7x --chips 64";

/// Arguments of `plan`.
#[derive(Clone, Debug, Args)]
#[command(after_help = NOTATION)]
pub struct PlanArgs {
    /// The model whose stack to plan, as `--model` names it (default: the one a `config.json`
    /// given by `--config` says it is, else the first the command line knows).
    #[arg(value_name = "STACK", value_parser = super::args::ModelParser, conflicts_with = "model")]
    pub stack: Option<ModelName>,
    /// The model, named as every command takes it (the positional `STACK` is the same).
    #[arg(long, value_name = "NAME", value_parser = super::args::ModelParser)]
    pub model: Option<ModelName>,
    /// The model's config: a preset (`tiny`, or the published size's name; an unknown name
    /// lists the model's), a TOML path or a Hugging Face `config.json` path; the published
    /// full size by default (for `qwen35`, the tiny and the full size side by side).
    #[arg(long, value_name = "NAME|PATH")]
    pub config: Option<String>,
    /// Schedule flags: each overrides one option of the stack's `#[layer_stack]` attribute
    /// (the output says which).
    #[command(flatten)]
    pub schedule: ScheduleArgs,
    /// Also print the full-size model's predicted step time under these options (and with
    /// prefetch off, for comparison), from the cost model and the schedule simulator.
    #[arg(long)]
    pub predict: bool,
    /// Hardware profile of the prediction and of the memory estimate's devices: a built-in
    /// name (`tpu7x`, `tpu-v5p`, `h200`) or a profile TOML path.
    #[arg(long, default_value = "tpu7x")]
    pub hardware: String,
    /// Chips on the mesh the prediction and the memory estimate are for.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub chips: u32,
    /// Expert-parallel degree of the prediction (a K-way expert axis).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=65536), requires = "predict")]
    pub ep: Option<u32>,
    /// Context parallelism of the prediction (models with a context-parallel form): each sequence split over N
    /// devices, attention's key/value exchange priced inside the layer (as `timeline --cp`).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=65536), requires = "predict")]
    pub cp: Option<u32>,
}

/// Arguments of `params`.
#[derive(Clone, Debug, Args)]
pub struct ParamsArgs {
    /// The model, as `--model` names it (default: the one a `config.json` given by `--config`
    /// says it is, else the first the command line knows).
    #[arg(value_name = "MODEL", value_parser = super::args::ModelParser, conflicts_with = "model")]
    pub name: Option<ModelName>,
    /// The model, named as every command takes it (the positional `MODEL` is the same).
    #[arg(long, value_name = "NAME", value_parser = super::args::ModelParser)]
    pub model: Option<ModelName>,
    /// The model's config: a preset (`tiny`, or the published size's name; an unknown name
    /// lists the model's), a TOML path or a Hugging Face `config.json` path; the published
    /// full size by default.
    #[arg(long, value_name = "NAME|PATH")]
    pub config: Option<String>,
}

/// Writes the plan of `the model named` to `out`: the declared stack at its config's depth under
/// its attribute's options, with the schedule flags overriding them.
pub fn plan(args: &PlanArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let model = super::args::model_for(args.model.or(args.stack), args.config.as_deref(), None);
    // A config that does not load or fit its model is a bad argument, as for `train`.
    let config = model
        .load_or(args.config.as_deref(), Preset::Published)
        .map_err(usage)?;
    let (stack, declared) = config.stack().map_err(usage)?;
    let options = args.schedule.apply(declared);
    writeln!(out, "options {}", args.schedule.source(config.precision()))?;
    if args.config.is_none()
        && let Some(plans) = model.default_plans(options)
    {
        write!(out, "{}", plans?)?;
        memory_line(args, &config, options, out)?;
        return predict_line(args, &config, options, out);
    }
    let plan = Plan::new(&stack, options).map_err(usage)?;
    writeln!(
        out,
        "{}{}: {} layers, prefetch_fsdp_weights={}, defer_grad_reduce_scatter={}, unroll={}, precision={}",
        model,
        args.config
            .as_deref()
            .map_or(String::new(), |c| format!(" ({c})")),
        stack.len(),
        options.prefetch_fsdp_weights,
        options.defer_grad_reduce_scatter,
        options.unroll,
        options.precision
    )?;
    writeln!(out, "{}", plan.describe(&stack))?;
    memory_line(args, &config, options, out)?;
    predict_line(args, &config, options, out)
}

/// The memory one device holds training `config` under `options` with FSDP over every device
/// of `--chips` chips of `--hardware`, as `train` estimates it before compiling (values
/// materialised as an accelerator's compiler fuses them), its parts largest first.
fn memory_line(
    args: &PlanArgs,
    config: &ModelConfig,
    options: PlanOptions,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let chip = crate::hardware::Hardware::load(&args.hardware)?;
    let devices = (args.chips as usize).saturating_mul(chip.devices_per_chip);
    let (model, _) = config.build().map_err(usage)?;
    let e = stackscan::cost::memory_estimate(
        &model,
        devices,
        options,
        1,
        stackscan::cost::fusion::Rule::Shared,
    )
    .map_err(usage)?;
    writeln!(
        out,
        "memory per device, FSDP over {devices} devices ({} {} chips), batch {} × {} tokens a \
         device: about {} ({})",
        args.chips,
        args.hardware,
        config.batch_per_device(),
        config.tokens().seq,
        memory::size(e.total()),
        memory::breakdown(&e)
    )?;
    Ok(())
}

/// A config or model error of the arguments: exit status 2.
fn usage(e: stackscan::Error) -> CliError {
    CliError::Usage(e.to_string())
}

/// The `--predict` line for `config`, if asked for. The simulator overlaps each prefetch with
/// the layer before it (the order an accelerator's plugin gets); a prefetch issued after the
/// layer is refused rather than priced as if it overlapped.
fn predict_line(
    args: &PlanArgs,
    config: &ModelConfig,
    options: PlanOptions,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    if args.predict {
        if options.prefetch_issue == PrefetchIssue::AfterCompute {
            return Err(CliError::Usage(
                "`--predict` models a prefetch issued with each step's input (`--prefetch-issue \
                 with-input` or `auto`), not `after-compute`"
                    .to_owned(),
            ));
        }
        let target = crate::predict::Target {
            hardware: args.hardware.clone(),
            chips: args.chips as usize,
            ep: args.ep.map(|k| k as usize),
            precision: args.schedule.precision,
        };
        let (priced, split) = match args.cp.filter(|&cp| cp > 1) {
            Some(cp) => {
                let chip = crate::hardware::Hardware::load(&args.hardware)?;
                let devices = target.chips.saturating_mul(chip.devices_per_chip);
                let (c, _) = config
                    .context_parallel(devices, cp as usize, 1)
                    .map_err(usage)?;
                let split = format!(" (each sequence over {cp} devices)");
                (crate::timeline::priced(&c)?, split)
            }
            None => (crate::timeline::priced(config)?, String::new()),
        };
        let line = crate::predict::describe(&priced, options, &target)?;
        writeln!(out, "{line}{split}")?;
    }
    Ok(())
}

/// Writes the parameter table of `args.model` to `out`: hierarchical names, copies, shapes,
/// dtypes, shard dims and the total.
pub fn params(args: &ParamsArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let spec = args.config.as_deref();
    let config = super::args::model_for(args.model.or(args.name), spec, None)
        .load_or(spec, Preset::Published)
        .map_err(usage)?;
    let m = config.build().map_err(usage)?.0;
    let model = config.architecture();
    let active = model
        .active_parameters(&m)
        .zip(model.experts())
        .map(|(active, e)| (active, e.active, e.experts));
    writeln!(
        out,
        "{} ({}, declared with the macros):",
        config.model(),
        spec.unwrap_or("published sizes")
    )?;
    writeln!(out, "{}", m.parameter_table())?;
    if let Some((active, top_k, experts)) = active {
        writeln!(
            out,
            "{active} active per token (top-{top_k} of {experts} routed experts)"
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// `docs/plans.md` quotes the notation `plan --help` ends with.
    #[test]
    fn the_plans_page_explains_the_notation_as_help_does() {
        let page = include_str!("../../../docs/plans.md");
        assert!(
            page.contains(&format!("```text\n{}\n```", super::NOTATION)),
            "docs/plans.md must quote cli::plan::NOTATION"
        );
    }
}
