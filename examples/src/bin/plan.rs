//! Prints the forward and backward schedule of an example stack at full depth.
//!
//! ```text
//! cargo run -p stackscan-examples --bin plan -- llama|qwen35|deepseek3 [--no-prefetch] [--no-defer] [--unroll 1|2]
//! cargo run -p stackscan-examples --bin plan -- llama --params
//! ```
//!
//! `--params` lists the macro-declared Llama-3-8B's parameters instead: hierarchical names,
//! layer copies, shapes, element types and shard dimensions.

use std::process::ExitCode;

use stackscan::plan::{Plan, PlanOptions, Stack};
use stackscan_examples::llama_macro;

fn stack(name: &str) -> Option<Stack> {
    match name {
        // Llama-3-8B: 32 identical decoder layers.
        "llama" => Stack::homogeneous("layer", 32).ok(),
        // Qwen3.5-35B-A3B: 10 × [GDN, GDN, GDN, attention].
        "qwen35" => Stack::blocks(&["GDN", "GDN", "GDN", "attention"], 10).ok(),
        // DeepSeek-V3: 3 dense layers, then 58 MoE layers.
        "deepseek3" => Stack::with_prefix(&["D", "D", "D"], &["M"], 58).ok(),
        _ => None,
    }
}

fn main() -> ExitCode {
    let usage = "usage: plan llama|qwen35|deepseek3 [--no-prefetch] [--no-defer] [--unroll 1|2] | plan llama --params";
    let mut args = std::env::args().skip(1);
    let Some(name) = args.next() else {
        eprintln!("error: no stack named; {usage}");
        return ExitCode::from(2);
    };
    let Some(stack) = stack(&name) else {
        eprintln!("error: unknown stack `{name}`; expected one of `llama`, `qwen35`, `deepseek3`");
        return ExitCode::from(2);
    };
    let mut options = PlanOptions::prefetch_deferred();
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--params" if name == "llama" => {
                return match llama_macro::llama3_8b() {
                    Ok((m, _)) => {
                        println!("llama (Llama-3-8B, declared with the macros):");
                        println!("{}", m.parameter_table());
                        ExitCode::SUCCESS
                    }
                    Err(e) => {
                        eprintln!("error: {e}");
                        ExitCode::FAILURE
                    }
                };
            }
            "--params" => {
                eprintln!("error: `--params` lists the declared model of `llama` only");
                return ExitCode::from(2);
            }
            "--no-prefetch" => {
                options.prefetch_fsdp_weights = false;
                options.defer_grad_reduce_scatter = false;
            }
            "--no-defer" => options.defer_grad_reduce_scatter = false,
            "--unroll" => match args.next().and_then(|v| v.parse().ok()) {
                Some(u) => options.unroll = u,
                None => {
                    eprintln!("error: `--unroll` expects 1 or 2");
                    return ExitCode::from(2);
                }
            },
            other => {
                eprintln!("error: unknown flag `{other}`; {usage}");
                return ExitCode::from(2);
            }
        }
    }
    if name == "qwen35" {
        // The macro-declared stacks of both configs.
        return match stackscan_examples::qwen35::describe_plans(options) {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        };
    }
    match Plan::new(&stack, options) {
        Ok(plan) => {
            println!(
                "{name}: {} layers, prefetch_fsdp_weights={}, defer_grad_reduce_scatter={}, unroll={}",
                stack.len(),
                options.prefetch_fsdp_weights,
                options.defer_grad_reduce_scatter,
                options.unroll
            );
            println!("{}", plan.describe(&stack));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
