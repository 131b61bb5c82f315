//! `plan` (a full-size stack's forward and backward schedule in MaxText's notation) and
//! `params` (a declared model's parameter table).

use std::io::Write;

use clap::{Args, ValueEnum};
use stackscan::LayerStack;
use stackscan::plan::{Plan, PlanOptions, Stack};

use super::CliError;
use super::args::ScheduleArgs;
use crate::deepseek3::{DeepSeek3, DeepSeek3Config};
use crate::llama::LlamaConfig;
use crate::llama_macro::{self, LlamaStack};
use crate::qwen35::{Qwen35Config, Qwen35Full};

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
            StackName::Qwen35 => of::<Qwen35Full>(&Qwen35Config::qwen35_35b_a3b()),
            StackName::Deepseek3 => of::<DeepSeek3>(&DeepSeek3Config::deepseek3()),
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
}

/// Arguments of `params`.
#[derive(Clone, Debug, Args)]
pub struct ParamsArgs {
    /// The model.
    #[arg(value_enum, default_value = "llama")]
    pub model: ParamsModel,
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

/// Writes the parameter table of `args.model` to `out`.
pub fn params(args: &ParamsArgs, out: &mut dyn Write) -> Result<(), CliError> {
    match args.model {
        ParamsModel::Llama => {
            let (m, _) = llama_macro::llama3_8b()?;
            writeln!(out, "llama (Llama-3-8B, declared with the macros):")?;
            writeln!(out, "{}", m.parameter_table())?;
        }
    }
    Ok(())
}
