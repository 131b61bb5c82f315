//! A donated weight read directly by a dot must be read with its current values on every
//! execution. XLA CPU's XNNPACK fusions key a packed copy of such an operand by its address,
//! which donation keeps from step to step; the default CPU plugin (API 0.81) captures entry
//! parameters that way, so a one-device training step used its first LM head forever (issue
//! 24). The runtime turns those fusions off for that plugin.
//!
//! XLA picks the fusions only on CPUs with AVX2, so the check runs in a child process with
//! `XLA_FLAGS` asking for them on any CPU: on a plugin without the workaround it then fails
//! either way (stale values with AVX2, an XNNPACK error without).

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use std::process::Command;

use stackscan::{Alias, Axis, DType, Program, Scope, Sharding, TensorType};
use stackscan_runtime::testing as common;
use stackscan_runtime::{Client, ClientOptions, Mesh, Plugin};

const CHILD: &str = "STACKSCAN_STALE_CAPTURE_CHILD";
const M: i64 = 64;
const K: i64 = 256;
const N: i64 = 512;

/// `(w[K, N], x[M, K]) -> (w + 0.5, sum(x · w))`, `w` donated to the first result: a weight
/// update and a forward that reads the weight in a dot.
fn step() -> Program {
    let s = Scope::new("step");
    let w = s.param(TensorType::new(DType::F32, [K, N]));
    let x = s.param(TensorType::new(DType::F32, [M, K]));
    let forward = x.matmul(&w).unwrap().sum_all().unwrap();
    let half = s.full(0.5, TensorType::new(DType::F32, [K, N])).unwrap();
    let f = s.finish(&[w.add(&half).unwrap(), forward]).unwrap();
    let axis = Axis {
        name: "fsdp".into(),
        size: 1,
    };
    Program::on_mesh(
        f,
        axis,
        vec![Sharding::Replicated; 2],
        vec![Sharding::Replicated; 2],
    )
    .unwrap()
    .with_aliases(vec![Alias {
        param: 0,
        result: 0,
    }])
    .unwrap()
}

/// Runs four steps, each on the previous step's weights, and returns the forward sums.
fn forwards(plugin: &Plugin) -> Vec<f32> {
    let client = Client::new(plugin, &ClientOptions::cpu(1)).unwrap();
    let mesh = Mesh::new(&client, "fsdp", 1).unwrap();
    let exe = client.compile_program(&step(), &mesh).unwrap();
    let dev = &client.devices()[0];
    let mut w = client
        .buffer(&vec![0.0f32; (K * N) as usize], &[K, N], dev)
        .unwrap();
    let x = client
        .buffer(&vec![1.0f32; (M * K) as usize], &[M, K], dev)
        .unwrap();
    let mut sums = Vec::new();
    for _ in 0..4 {
        let mut out = exe.execute(&[vec![&w, &x]]).unwrap();
        sums.push(out[0][1].to_host::<f32>().unwrap()[0]);
        w = out[0].swap_remove(0);
    }
    sums
}

fn check(plugin: &Plugin, name: &str) {
    // Step i reads w = 0.5·i everywhere: the sum is M·K·N·0.5·i, exact in f32.
    let expected: Vec<f32> = (0..4)
        .map(|i| (M * K * N) as f32 * 0.5 * i as f32)
        .collect();
    assert_eq!(
        forwards(plugin),
        expected,
        "{name}: a step read stale weights"
    );
}

#[test]
fn donated_weights_reach_dots_with_their_current_values() {
    if std::env::var_os(CHILD).is_some() {
        check(&common::cpu_plugin(), "cpu");
        if let Ok(newer) = common::newer_cpu_plugin().inspect_err(|why| eprintln!("skipped: {why}"))
        {
            check(&newer, "cpu-0.115");
        }
        return;
    }
    // The same test in a child process whose XLA asks for XNNPACK dot fusions.
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "donated_weights_reach_dots_with_their_current_values",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .env(
            "XLA_FLAGS",
            "--xla_cpu_use_xnnpack=true --xla_cpu_experimental_xnn_fusion_type=dot,eltwise",
        )
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the child failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Without the XNNPACK flags too.
    check(&common::cpu_plugin(), "cpu");
}
