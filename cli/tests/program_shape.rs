//! Program size, collectives per loop body and compiled memory are flat in depth: one loop body
//! per group, whatever the number of layers.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan_models::registry::Architecture;
use stackscan_runtime::testing as common;

use stackscan::Axis;
use stackscan::fsdp::{Adam, train_step, training_program};
use stackscan::ir::{Function, Op};
use stackscan::plan::PlanOptions;
use stackscan_models::llama::LlamaConfig;
use stackscan_runtime::Mesh;

fn config(layers: usize) -> LlamaConfig {
    LlamaConfig {
        layers,
        ..LlamaConfig::tiny()
    }
}

fn axis(n: usize) -> Axis {
    Axis {
        name: "fsdp".into(),
        size: n,
    }
}

/// All-gathers and reduce-scatters directly in the body of every multi-trip loop, with the
/// loop's trip count: `(trips, gathers, scatters)`.
fn loop_bodies(f: &Function, out: &mut Vec<(usize, usize, usize)>) {
    for node in &f.nodes {
        if let Op::Scan { body, length, .. } = &node.op {
            let count = |p: fn(&Op) -> bool| body.nodes.iter().filter(|n| p(&n.op)).count();
            let gathers = count(|o| matches!(o, Op::AllGather { .. }));
            let scatters = count(|o| matches!(o, Op::ReduceScatter { .. }));
            out.push((*length, gathers, scatters));
        }
        for r in node.op.regions() {
            loop_bodies(r, out);
        }
    }
}

#[test]
fn program_text_is_flat_in_depth() {
    for options in [
        PlanOptions::baseline(),
        PlanOptions::prefetch(),
        PlanOptions::prefetch_deferred(),
    ] {
        let text = |layers: usize| {
            let step = train_step(&model(&config(layers)).unwrap(), options, &axis(4)).unwrap();
            step.program.emit().unwrap()
        };
        let (small, large) = (text(4), text(48));
        let ratio = large.len() as f64 / small.len() as f64;
        eprintln!(
            "{options:?}: {} bytes at 4 layers, {} at 48 ({ratio:.4})",
            small.len(),
            large.len()
        );
        assert!(
            (ratio - 1.0).abs() <= 0.05,
            "{options:?}: program grows with depth: {ratio}"
        );
        let gathers = |t: &str| t.matches("\"stablehlo.all_gather\"").count();
        assert_eq!(
            gathers(&small),
            gathers(&large),
            "{options:?}: gathers depend on depth"
        );
    }
}

#[test]
fn each_ping_pong_body_gathers_each_weight_once_per_layer_step() {
    let m = model(&config(48)).unwrap();
    let sharded = m.kinds[0]
        .params
        .iter()
        .filter(|p| p.shard_dim.is_some())
        .count();
    for options in [PlanOptions::prefetch(), PlanOptions::prefetch_deferred()] {
        let step = train_step(&m, options, &axis(4)).unwrap();
        let mut bodies = Vec::new();
        loop_bodies(step.program.main(), &mut bodies);
        // The two ping-pong loops (forward, backward) run 23 trips of two layers each.
        let ping_pong: Vec<_> = bodies.iter().filter(|(trips, ..)| *trips == 23).collect();
        assert_eq!(ping_pong.len(), 2, "{options:?}: {bodies:?}");
        for &&(_, gathers, scatters) in &ping_pong {
            assert_eq!(
                gathers,
                2 * sharded,
                "{options:?}: one gather per weight per layer step"
            );
            assert!(
                scatters == 0 || scatters == 2 * sharded,
                "{options:?}: {scatters} scatters"
            );
        }
        // The backward body scatters each of its two layers' gradients once.
        assert!(
            ping_pong.iter().any(|&&(_, _, s)| s == 2 * sharded),
            "{options:?}"
        );
    }
}

/// Compiled without a backend to resolve the options, as each test here is: the prefetch
/// issued with each step's input (the order the GPU and TPU plugins get; growth in depth is a
/// property of the plan, at either issue point).
#[test]
fn compiled_temp_memory_grows_only_by_the_saved_layer_inputs() {
    let client = common::cpu_client(4);
    let mesh = Mesh::new(&client, "fsdp", 4).unwrap();
    let activation_bytes = model(&config(4)).unwrap().activation.size_in_bytes() as i64;
    for options in [PlanOptions::prefetch(), PlanOptions::prefetch_deferred()] {
        let temp = |layers: usize| {
            let step = train_step(&model(&config(layers)).unwrap(), options, &axis(4)).unwrap();
            let exe = client.compile_program(&step.program, &mesh).unwrap();
            exe.memory_stats().unwrap().temp
        };
        let (t4, t32) = (temp(4), temp(32));
        let saved = 28 * activation_bytes;
        eprintln!(
            "{options:?}: temp {t4} B at 4 layers, {t32} B at 32 (+{} B; 28 saved inputs = {saved} B)",
            t32 - t4
        );
        assert!(
            t32 - t4 <= saved + saved / 10,
            "{options:?}: temp grew by {} B",
            t32 - t4
        );
    }
}

/// A layer's saved input lives in its rows of the gradient stacks until its gradient
/// replaces it (`stackscan::fsdp`'s shared rows), so the optimizer's update, which holds the
/// gradients in temp, grows per layer by the larger of the two; holding both, it grew by their
/// sum (26.1 MiB from 4 to 32 layers; the 28 rows are 22.8 MiB, the bound 10 % more). The
/// prefetch is issued with each step's input, as in the test above.
#[test]
fn the_update_grows_by_the_larger_of_a_layers_input_and_gradient() {
    let client = common::cpu_client(4);
    let mesh = Mesh::new(&client, "fsdp", 4).unwrap();
    let m4 = model(&config(4)).unwrap();
    let input = m4.activation.size_in_bytes() as i64;
    let gradient: i64 = (0..m4.kinds[0].params.len())
        .map(|p| m4.stacked_local_type(0, p, 4).size_in_bytes() as i64 / 4)
        .sum();
    // The row is the gradient's, and the bound below (+10 %) stays under input + gradient.
    assert!(
        input < gradient && gradient < 10 * input,
        "input {input} B, gradient {gradient} B"
    );
    for options in [PlanOptions::prefetch(), PlanOptions::prefetch_deferred()] {
        let temp = |layers: usize| {
            let m = model(&config(layers)).unwrap();
            let update = training_program(&m, options, mesh.layout(), Adam::default(), 1)
                .unwrap()
                .update;
            let exe = client.compile_program(&update, &mesh).unwrap();
            exe.memory_stats().unwrap().temp
        };
        let (t4, t32) = (temp(4), temp(32));
        let rows = 28 * gradient;
        eprintln!(
            "{options:?}: update temp {t4} B at 4 layers, {t32} B at 32 (+{} B; 28 rows of \
             max(input {input} B, gradient {gradient} B) = {rows} B, both would be {} B)",
            t32 - t4,
            28 * (input + gradient)
        );
        assert!(
            t32 - t4 <= rows + rows / 10,
            "{options:?}: update temp grew by {} B",
            t32 - t4
        );
    }
}

/// The declared Llama at `c`, as the run-time model.
fn model(c: &LlamaConfig) -> stackscan::Result<stackscan::fsdp::StackModel> {
    Ok(Architecture::build(c)?.0)
}
