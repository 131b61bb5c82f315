//! `compile-report` on the tiny Llama: its figures agree with what they are computed from
//! (the emitted program, the optimized module's own counts), and a bad flag is a usage error.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use clap::Parser;
use stackscan::fsdp::{Adam, training_program};
use stackscan_cli::cli::{Cli, Command};
use stackscan_cli::compile_report::{self, CompileReportError};
use stackscan_models::registry::{ModelName, Preset};
use stackscan_runtime::Mesh;
use stackscan_runtime::testing as common;

fn args(devices: &str, extra: &[&str]) -> compile_report::CompileReportArgs {
    let mut argv = vec![
        "stackscan",
        "compile-report",
        "--model",
        "llama",
        "--devices",
        devices,
    ];
    argv.extend_from_slice(extra);
    match Cli::try_parse_from(argv).unwrap().command {
        Command::CompileReport(a) => a,
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_report_counts_what_it_compiled() {
    let report = compile_report::run(&args("2", &["--top", "10000"])).unwrap();
    // The StableHLO figure is the text the trainer's program emits, built here on its own.
    let llama: ModelName = "llama".parse().unwrap();
    let (m, options) = llama.preset(Preset::Tiny).unwrap().build().unwrap();
    let client = common::cpu_client(2);
    let mesh = Mesh::new(&client, "fsdp", 2).unwrap();
    // With what the options leave to the plugin chosen, as the trainer and the report do.
    let options = stackscan_runtime::backend::plan_options(&client, options);
    let text = training_program(&m, options, mesh.layout(), Adam::default(), 1)
        .unwrap()
        .update
        .emit()
        .unwrap();
    assert_eq!(report.stablehlo_bytes, text.len());
    // With every row kept, the opcode rows add up to the totals.
    let sum = |rows: &[(String, usize)]| rows.iter().map(|(_, n)| n).sum::<usize>();
    assert_eq!(sum(&report.by_opcode), report.instructions);
    assert_eq!(sum(&report.fused_by_opcode), report.fused_instructions);
    // One row per `while` of the module and per kept single step (a `conditional`: at 4
    // layers every loop of the step has one trip), and no loop body holds more than the
    // module.
    let count = |opcode: &str| {
        report
            .by_opcode
            .iter()
            .find(|(op, _)| op == opcode)
            .map_or(0, |(_, n)| *n)
    };
    assert!(count("conditional") > 0, "{:?}", report.by_opcode);
    assert_eq!(report.loops.len(), count("while") + count("conditional"));
    assert!(
        report
            .loops
            .iter()
            .all(|l| l.instructions <= report.instructions)
    );
    // FSDP on 2 devices gathers f32 weights and scatters f32 gradients.
    for kind in ["all-gather", "reduce-scatter"] {
        assert!(
            report
                .collective_bytes
                .iter()
                .any(|(k, t, n)| k == kind && t == "f32" && *n > 0),
            "{kind}: {:?}",
            report.collective_bytes
        );
    }
    assert!(report.xla_compile_seconds > 0.0 && report.temp_bytes > 0);
    let printed = report.to_string();
    assert!(
        printed.contains("XLA compile") && printed.contains("loop"),
        "{printed}"
    );
}

/// The report's config is the one the step was built from: the MoE flags given on the command
/// line are in it, so a saved report says which program it read; a model without experts
/// refuses them.
#[test]
fn the_reported_config_carries_the_moe_flags() {
    let parse = |model: &str| {
        let argv = [
            "stackscan",
            "compile-report",
            "--model",
            model,
            "--devices",
            "2",
            "--dlhs-transpose-rhs",
        ];
        match Cli::try_parse_from(argv).unwrap().command {
            Command::CompileReport(a) => a,
            other => panic!("{other:?}"),
        }
    };
    let report = compile_report::run(&parse("deepseek3")).unwrap();
    assert_eq!(
        report.config["dlhs_transpose_rhs"], true,
        "{}",
        report.config
    );
    assert_eq!(report.config["direct_token_gather"], false);
    let err = compile_report::run(&parse("llama"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("--dlhs-transpose-rhs"), "{err}");
}

#[test]
fn a_model_that_does_not_fit_is_a_usage_error() {
    // The tiny Llama's shards do not split over 3 devices.
    let err = compile_report::run(&args("3", &[]));
    assert!(matches!(err, Err(CompileReportError::Config(_))), "{err:?}");
}

/// `--phases` splits XLA's compile from the compiler's own timing lines, read from a second
/// run of the command in a child process.
#[test]
fn phases_split_the_compile_into_passes_and_backend() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_stackscan"))
        .args([
            "compile-report",
            "--model",
            "llama",
            "--devices",
            "2",
            "--phases",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let phases = &report["phases"];
    let passes = phases["hlo_pass_seconds"].as_f64().unwrap();
    let backend = phases["backend_seconds"].as_f64().unwrap();
    assert!(passes > 0.0 && backend > 0.0, "{phases}");
    let named = phases["passes"].as_array().unwrap();
    assert!(
        named.iter().any(|p| p[0] == "fusion"),
        "XLA's fusion pass is among the slowest: {phases}"
    );
}

/// The prefetched weights and the deferred gradients travel through the ping-pong loops in
/// place: XLA copies none of them into a body and back out (it copied every one, twice a
/// trip, while a prefetch was ordered by an optimization barrier that XLA CPU drops before
/// it places copies, `fsdp::lowering::Lowering::after`), about 13 MB a trip for this model.
/// What a body may still copy (the activation cotangent, norms, counters) is less than its
/// largest weight matrix. The same holds for a group's odd first step, alone in its loop.
#[test]
fn ping_pong_loops_copy_no_carried_weights_or_gradients() {
    let report = compile_report::run(&args("4", &["--layers", "8", "--top", "10000"])).unwrap();
    let llama: ModelName = "llama".parse().unwrap();
    let (m, _) = llama.preset(Preset::Tiny).unwrap().build().unwrap();
    let largest_matrix = m.kinds[0]
        .params
        .iter()
        .map(|p| p.shape.iter().product::<i64>() as u64 * 4)
        .max()
        .unwrap();
    // Eight layers: forward `[0] → [1 … 6] → [7]`, the first a ping-pong group's odd first
    // step (which copied both sets of weights, 6.6 MiB, before it passed them around its
    // loop), backward `[7] → [6 … 1] → [0]`.
    let ping_pong: Vec<_> = report
        .loops
        .iter()
        .filter(|l| l.path.contains("ping-pong"))
        .collect();
    assert_eq!(ping_pong.len(), 3, "{:?}", report.loops);
    for l in ping_pong {
        assert!(
            l.copied_bytes < largest_matrix,
            "{}: {} bytes copied a trip (the largest weight matrix is {largest_matrix})",
            l.path,
            l.copied_bytes
        );
    }
}
