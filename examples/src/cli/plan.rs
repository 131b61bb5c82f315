//! `plan` (a full-size stack's forward and backward schedule in MaxText's notation) and
//! `params` (a declared model's parameter table).

use std::io::Write;

use clap::{Args, ValueEnum};
use stackscan::LayerStack;
use stackscan::plan::{Plan, PlanOptions, Stack};

use super::CliError;
use super::args::ScheduleArgs;
use crate::deepseek3::{self, DeepSeek3Config, DeepSeek3Stack};
use crate::llama::LlamaConfig;
use crate::llama_macro::{self, LlamaStack};
use crate::qwen35::{self, Qwen35Config, Qwen35Stack};

/// A full-size stack `plan` knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StackName {
    /// Llama-3-8B: 32 identical decoder layers.
    Llama,
    /// Qwen3.5-35B-A3B: 10 × [GDN, GDN, GDN, attention].
    Qwen35,
    /// DeepSeek-V3: 3 dense layers, then 58 MoE layers.
    Deepseek3,
}

impl StackName {
    /// The macro-declared stack at its full-size config's depth, and the options of its
    /// `#[layer_stack]` attribute.
    fn declared(self) -> stackscan::Result<(Stack, PlanOptions)> {
        fn of<S: LayerStack>(cfg: &S::Config) -> stackscan::Result<(Stack, PlanOptions)> {
            Ok((S::stack(cfg)?, S::OPTIONS))
        }
        match self {
            StackName::Llama => of::<LlamaStack>(&LlamaConfig::llama3_8b()),
            StackName::Qwen35 => of::<Qwen35Stack>(&Qwen35Config::qwen35_35b_a3b()),
            StackName::Deepseek3 => of::<DeepSeek3Stack>(&DeepSeek3Config::deepseek3()),
        }
    }

    /// The full-size model `--predict` prices ([`crate::timeline::model_by_name`]).
    fn priced_model(self) -> &'static str {
        match self {
            StackName::Llama => "llama3-8b",
            StackName::Qwen35 => "qwen3.5-35b-a3b",
            StackName::Deepseek3 => "deepseek-v3",
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            StackName::Llama => "llama",
            StackName::Qwen35 => "qwen35",
            StackName::Deepseek3 => "deepseek3",
        }
    }
}

/// Arguments of `plan`.
#[derive(Clone, Debug, Args)]
pub struct PlanArgs {
    /// The stack.
    #[arg(value_enum)]
    pub stack: StackName,
    /// Schedule flags: each overrides one option of the stack's `#[layer_stack]` attribute
    /// (the output says which).
    #[command(flatten)]
    pub schedule: ScheduleArgs,
    /// Also print the full-size model's predicted step time under these options (and with
    /// prefetch off, for comparison), from the cost model and the schedule simulator.
    #[arg(long)]
    pub predict: bool,
    /// Hardware profile of the prediction: a built-in name (`tpu7x`, `tpu-v5p`, `h200`) or a
    /// profile TOML path.
    #[arg(long, default_value = "tpu7x", requires = "predict")]
    pub hardware: String,
    /// Chips on the predicted mesh.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=65536), requires = "predict")]
    pub chips: u32,
    /// Expert-parallel degree of the prediction (a K-way expert axis).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=65536), requires = "predict")]
    pub ep: Option<u32>,
}

/// A model `params` can list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ParamsModel {
    /// Llama-3-8B, declared with the macros.
    Llama,
    /// DeepSeek-V3 (671B), declared with the macros.
    Deepseek3,
    /// Qwen3.5-35B-A3B, declared with the macros.
    Qwen35,
}

/// Arguments of `params`.
#[derive(Clone, Debug, Args)]
pub struct ParamsArgs {
    /// The model.
    #[arg(value_enum, default_value = "llama")]
    pub model: ParamsModel,
    /// The model's config: a built-in name (`tiny`, and `llama3-8b`, `deepseek3` or
    /// `qwen35-35b-a3b`) or a TOML path; the published full size by default.
    #[arg(long, value_name = "NAME|PATH")]
    pub config: Option<String>,
}

/// Writes the plan of `args.stack` to `out`: the declared stack under its attribute's
/// options, with the schedule flags overriding them.
pub fn plan(args: &PlanArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let (stack, declared) = args.stack.declared()?;
    let options = args.schedule.apply(declared);
    writeln!(out, "options {}", args.schedule.source())?;
    if args.stack == StackName::Qwen35 {
        // The macro-declared stacks of the tiny and the full config.
        write!(out, "{}", crate::qwen35::describe_plans(options)?)?;
        return predict_line(args, options, out);
    }
    let plan = Plan::new(&stack, options).map_err(|e| CliError::Usage(e.to_string()))?;
    writeln!(
        out,
        "{}: {} layers, prefetch_fsdp_weights={}, defer_grad_reduce_scatter={}, unroll={}",
        args.stack.as_str(),
        stack.len(),
        options.prefetch_fsdp_weights,
        options.defer_grad_reduce_scatter,
        options.unroll
    )?;
    writeln!(out, "{}", plan.describe(&stack))?;
    predict_line(args, options, out)
}

/// The `--predict` line, if asked for.
fn predict_line(
    args: &PlanArgs,
    options: PlanOptions,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    if args.predict {
        let target = crate::predict::Target {
            hardware: args.hardware.clone(),
            chips: args.chips as usize,
            ep: args.ep.map(|k| k as usize),
        };
        let line = crate::predict::describe(args.stack.priced_model(), options, &target)?;
        writeln!(out, "{line}")?;
    }
    Ok(())
}

/// Writes the parameter table of `args.model` to `out`: hierarchical names, copies, shapes,
/// dtypes, shard dims and the total.
pub fn params(args: &ParamsArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let config = args.config.as_deref();
    // A config that does not load or fit its model is a bad argument, as for `train`.
    let usage = |e: stackscan::Error| CliError::Usage(e.to_string());
    let mut active = None;
    let (title, m) = match args.model {
        ParamsModel::Llama => {
            let c = LlamaConfig::load(config.unwrap_or("llama3-8b")).map_err(usage)?;
            ("llama", llama_macro::for_config(&c).map_err(usage)?.0)
        }
        ParamsModel::Deepseek3 => {
            let c = DeepSeek3Config::load(config.unwrap_or("deepseek3")).map_err(usage)?;
            ("deepseek3", deepseek3::for_config(&c).map_err(usage)?.0)
        }
        ParamsModel::Qwen35 => {
            let c = Qwen35Config::load(config.unwrap_or("qwen35-35b-a3b")).map_err(usage)?;
            let m = qwen35::for_config(&c).map_err(usage)?.0;
            active = Some((qwen35::active_parameters(&c, &m), c.top_k, c.experts));
            ("qwen35", m)
        }
    };
    writeln!(
        out,
        "{title} ({}, declared with the macros):",
        config.unwrap_or("published sizes")
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
