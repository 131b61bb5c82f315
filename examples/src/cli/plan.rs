//! `plan` (a full-size stack's forward and backward schedule in MaxText's notation) and
//! `params` (a declared model's parameter table).

use std::io::Write;

use clap::{Args, ValueEnum};
use stackscan::plan::{Plan, PlanOptions, Stack};

use super::CliError;
use super::args::ScheduleArgs;
use crate::llama_macro;

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
    fn stack(self) -> stackscan::Result<Stack> {
        match self {
            StackName::Llama => Stack::homogeneous("layer", 32),
            StackName::Qwen35 => Stack::blocks(&["GDN", "GDN", "GDN", "attention"], 10),
            StackName::Deepseek3 => Stack::with_prefix(&["D", "D", "D"], &["M"], 58),
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
    /// Schedule options (the default is prefetch with deferred reduce-scatter, unroll 2).
    #[command(flatten)]
    pub schedule: ScheduleArgs,
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

/// Writes the plan of `args.stack` to `out`.
pub fn plan(args: &PlanArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let options = args.schedule.apply(PlanOptions::prefetch_deferred());
    let stack = args.stack.stack()?;
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
