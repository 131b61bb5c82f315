//! Whether the CPU plugins run XLA's grouped matmul, `chlo.ragged_dot` (what JAX emits for
//! `jax.lax.ragged_dot`, the dropless MoE kernel): `[6, 4]` rows in groups of 2, 3, 1 against
//! three `[4, 5]` weights. Both plugins parse and lower it (to HLO `ragged-dot`) but their
//! code generator refuses it (`HLO opcode ragged-dot is not supported by XLA:CPU
//! ThunkEmitter`, December 2026), which is why the MoE dispatch is capacity-padded. The test
//! records that: a compile must either succeed and match the host product exactly, or fail
//! for exactly that reason (any other error means the program text is wrong). When a plugin
//! starts running it, the message below says so and the dispatch can switch.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]
use stackscan_runtime::testing as common;
use stackscan_runtime::{Client, ClientOptions, Mesh, ProgramForm};

const RAGGED: &str = r#"module @ragged {
  func.func public @main(%lhs: tensor<6x4xf32>, %rhs: tensor<3x4x5xf32>, %gs: tensor<3xi32>) -> tensor<6x5xf32> {
    %0 = "chlo.ragged_dot"(%lhs, %rhs, %gs) {ragged_dot_dimension_numbers = #chlo.ragged_dot<lhs_batching_dimensions = [], rhs_batching_dimensions = [], lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [1], lhs_ragged_dimensions = [0], rhs_group_dimensions = [0]>, precision_config = [#chlo<precision DEFAULT>, #chlo<precision DEFAULT>]} : (tensor<6x4xf32>, tensor<3x4x5xf32>, tensor<3xi32>) -> tensor<6x5xf32>
    return %0 : tensor<6x5xf32>
  }
}"#;

/// Compiles and runs the grouped product on `client`; `false` if the plugin refuses it.
fn runs_ragged_dot(client: &Client, what: &str) -> bool {
    let mesh = Mesh::new(client, "x", 1).unwrap();
    let exe = match client.compile(RAGGED, &mesh.compile_options(ProgramForm::Replicas)) {
        Ok(e) => e,
        Err(e) => {
            let msg = e.to_string();
            assert!(
                msg.contains("Unimplemented") && msg.contains("ragged-dot"),
                "{what}: ragged_dot failed for another reason than the missing kernel: {msg}"
            );
            return false;
        }
    };
    let lhs: Vec<f32> = (0..24).map(|i| i as f32 * 0.5).collect();
    let rhs: Vec<f32> = (0..60).map(|i| (i % 7) as f32 - 3.0).collect();
    let gs: Vec<i32> = vec![2, 3, 1];
    let dev = &client.devices()[0];
    let b = [
        client.buffer(&lhs, &[6, 4], dev).unwrap(),
        client.buffer(&rhs, &[3, 4, 5], dev).unwrap(),
        client.buffer(&gs, &[3], dev).unwrap(),
    ];
    let refs: Vec<_> = b.iter().collect();
    let out = exe.execute(&[refs]).unwrap();
    let got = out[0][0].to_host::<f32>().unwrap();
    let mut want = vec![0f32; 30];
    let group = |r: usize| match r {
        0..2 => 0,
        2..5 => 1,
        _ => 2,
    };
    for r in 0..6 {
        for c in 0..5 {
            want[r * 5 + c] = (0..4)
                .map(|k| lhs[r * 4 + k] * rhs[group(r) * 20 + k * 5 + c])
                .sum();
        }
    }
    // Small integers and halves: the f32 sums are exact in any order.
    assert_eq!(
        got, want,
        "{what}: ragged_dot runs but computes another product"
    );
    true
}

#[test]
fn ragged_dot_runs_exactly_or_is_refused_for_want_of_a_kernel() {
    let mut clients = vec![("xla-cpu-pjrt (PJRT 0.81)", common::cpu_client(1))];
    if let Ok(p) = common::newer_cpu_plugin().inspect_err(|why| eprintln!("skipped: {why}")) {
        clients.push((
            "cpu-0.115",
            Client::new(&p, &ClientOptions::cpu(1)).unwrap(),
        ));
    }
    for (what, client) in &clients {
        let runs = runs_ragged_dot(client, what);
        eprintln!(
            "{what}: ragged_dot {}",
            if runs {
                "compiles and matches the host: the MoE dispatch could use it"
            } else {
                "is not supported by the CPU code generator"
            }
        );
    }
}
