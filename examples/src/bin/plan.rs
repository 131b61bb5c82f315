//! Prints the forward and backward schedule of an example stack at full depth.
//!
//! ```text
//! cargo run -p stackscan-examples --bin plan -- llama|qwen35|deepseek3 [--no-prefetch] [--no-defer] [--unroll 1|2]
//! cargo run -p stackscan-examples --bin plan -- llama --params
//! cargo run -p stackscan-examples --bin plan -- deepseek3 --predict --hardware tpu7x --chips 64 [--ep 4]
//! ```
//!
//! `--predict` adds the full-size model's predicted step time under the printed options
//! (and prefetch off for comparison), from [`predict::describe`].
//!
//! `--params` lists the macro-declared Llama-3-8B's parameters instead: hierarchical names,
//! layer copies, shapes, element types and shard dimensions.

use std::process::ExitCode;

use stackscan::plan::{Plan, PlanOptions, Stack};
use stackscan_examples::llama_macro;
use stackscan_examples::predict::{self, Target};

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

/// The full-size model `--predict` prices for a stack name.
fn full_model(name: &str) -> &'static str {
    match name {
        "qwen35" => "qwen3.5-35b-a3b",
        "deepseek3" => "deepseek-v3",
        _ => "llama3-8b",
    }
}

fn main() -> ExitCode {
    let usage = "usage: plan llama|qwen35|deepseek3 [--no-prefetch] [--no-defer] [--unroll 1|2] [--predict [--hardware H] [--chips N] [--ep K]] | plan llama --params";
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
    let mut target: Option<Target> = None;
    let default_target = || Target {
        hardware: "tpu7x".into(),
        chips: 64,
        ep: None,
    };
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--predict" => {
                target.get_or_insert_with(default_target);
            }
            "--hardware" | "--chips" | "--ep" => {
                let t = target.get_or_insert_with(default_target);
                let Some(value) = args.next() else {
                    eprintln!("error: `{flag}` expects a value; {usage}");
                    return ExitCode::from(2);
                };
                match (flag.as_str(), value.parse::<usize>()) {
                    ("--hardware", _) => t.hardware = value,
                    ("--chips", Ok(n)) => t.chips = n,
                    ("--ep", Ok(n)) => t.ep = Some(n),
                    _ => {
                        eprintln!("error: `{flag}` expects a count, got `{value}`");
                        return ExitCode::from(2);
                    }
                }
            }
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
            if let Some(t) = target {
                match predict::describe(full_model(&name), options, &t) {
                    Ok(line) => println!("{line}"),
                    Err(e) => {
                        eprintln!("error: {e}");
                        return ExitCode::FAILURE;
                    }
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
