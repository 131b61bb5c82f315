//! `calibrate --pieces` end to end on a small Llama: every piece of the step compiles, runs
//! and is set beside a prediction, the step's prediction is the one `predict` gives, and the
//! optimizer's is the update graph's. No timing is asserted (the figures are for reading).

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan::plan::PlanOptions;
use stackscan_cli::calibrate::pieces;
use stackscan_cli::hardware::Hardware;
use stackscan_cli::predict::{optimizer_seconds, predict};
use stackscan_models::llama::LlamaConfig;
use stackscan_models::registry::Architecture;
use stackscan_runtime::Mesh;
use stackscan_runtime::testing as common;

#[test]
fn every_piece_runs_beside_its_prediction() {
    let client = common::cpu_client(2);
    let mesh = Mesh::new(&client, "fsdp", 2).unwrap();
    let cfg = LlamaConfig {
        layers: 2,
        seq: 16,
        batch_per_device: 1,
        ..LlamaConfig::tiny()
    };
    let m = model(&cfg).unwrap();
    let hw = Hardware::from_toml(include_str!("../hardware/cpu-example.toml")).unwrap();
    let options = PlanOptions::prefetch_deferred();
    let rows = pieces(&client, &mesh, &m, options, &hw, 1).unwrap();
    let names: Vec<&str> = rows.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "layer forward",
            "layer backward (recompute + vjp)",
            "layer gather",
            "layer reduce-scatter",
            "embedding, head and loss (forward + vjp)",
            "step without the optimizer",
            "optimizer (step with Adam minus step without)",
            "step with Adam",
        ]
    );
    for p in &rows {
        assert!(p.measured.is_finite() && p.predicted > 0.0, "{p:?}");
    }
    let step = predict(&m, options, &hw, 2, &[]).unwrap().step_seconds();
    assert_eq!(rows[7].predicted, step);
    assert_eq!(rows[6].predicted, optimizer_seconds(&m, &hw, 2).unwrap());
    // The pieces a prediction is made of add up to it: the two halves of the step.
    assert!((rows[5].predicted + rows[6].predicted - step).abs() < 1e-12 * step);
}

/// The declared Llama at `c`, as the run-time model.
fn model(c: &LlamaConfig) -> stackscan::Result<stackscan::fsdp::StackModel> {
    Ok(Architecture::build(c)?.0)
}
