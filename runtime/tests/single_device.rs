//! One device: a matmul + add program returns exact values.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan_runtime::testing as common;

use stackscan_runtime::{Client, ClientOptions, CompileOptions, DType, Plugin, TensorType};

const MATMUL_ADD: &str = r#"
module @matmul_add {
  func.func public @main(%a: tensor<2x3xf32>, %b: tensor<3x2xf32>, %c: tensor<2x2xf32>) -> tensor<2x2xf32> {
    %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x2xf32>
    %1 = stablehlo.add %0, %c : tensor<2x2xf32>
    return %1 : tensor<2x2xf32>
  }
}
"#;

#[test]
fn matmul_plus_add_is_exact() {
    check_matmul_add(&common::cpu_plugin());
}

#[test]
fn matmul_plus_add_is_exact_on_the_newer_plugin() {
    if let Ok(plugin) = common::newer_cpu_plugin().inspect_err(|why| eprintln!("skipped: {why}")) {
        check_matmul_add(&plugin);
    }
}

fn check_matmul_add(plugin: &Plugin) {
    let client = Client::new(plugin, &ClientOptions::cpu(1)).unwrap();
    assert_eq!(client.platform(), "cpu");
    // A CPU device shares the host's memory: the plugin reports no limit of its own, so the
    // memory check reads the machine's instead.
    assert_eq!(client.device_memory_limit(), None);
    let device = &client.devices()[0];
    let exe = client
        .compile(MATMUL_ADD, &CompileOptions::default())
        .unwrap();
    assert_eq!(exe.num_outputs(), 1);
    assert_eq!(
        exe.output_types().unwrap(),
        vec![TensorType::new(DType::F32, vec![2, 2])]
    );
    let a = client
        .buffer(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], device)
        .unwrap();
    let b = client
        .buffer(&[7.0f32, 8.0, 9.0, 10.0, 11.0, 12.0], &[3, 2], device)
        .unwrap();
    let c = client
        .buffer(&[0.5f32, -1.0, 100.0, 0.25], &[2, 2], device)
        .unwrap();
    let out = exe.execute(&[[&a, &b, &c]]).unwrap();
    // [1 2 3; 4 5 6] · [7 8; 9 10; 11 12] = [58 64; 139 154], all exact in f32.
    assert_eq!(
        out[0][0].to_host::<f32>().unwrap(),
        vec![58.5, 63.0, 239.0, 154.25]
    );
    let stats = exe.memory_stats().unwrap();
    assert_eq!(stats.arguments, (6 + 6 + 4) * 4, "{stats:?}");
    assert_eq!(stats.outputs, 4 * 4, "{stats:?}");
}

/// Host → device → host for every element type the runtime transfers, through a program that
/// negates (so the values really went through the device and back).
#[test]
fn every_element_type_round_trips() {
    fn negate<T: stackscan_runtime::Element + PartialEq + std::fmt::Debug>(
        client: &Client,
        values: &[T],
        expected: &[T],
    ) {
        let ty = T::DTYPE.mlir_name();
        let program = format!(
            "func.func @main(%x: tensor<3x{ty}>) -> tensor<3x{ty}> {{\n  %y = stablehlo.negate %x : tensor<3x{ty}>\n  return %y : tensor<3x{ty}>\n}}"
        );
        let exe = client
            .compile(&program, &CompileOptions::default())
            .unwrap();
        let x = client.buffer(values, &[3], &client.devices()[0]).unwrap();
        assert_eq!(
            x.to_host::<T>().unwrap(),
            values,
            "{ty} host -> device -> host"
        );
        let out = exe.execute(&[[&x]]).unwrap();
        assert_eq!(out[0][0].tensor_type(), &TensorType::new(T::DTYPE, vec![3]));
        assert_eq!(out[0][0].to_host::<T>().unwrap(), expected, "{ty} negated");
    }
    let client = common::cpu_client(1);
    negate(&client, &[1.5f32, -2.0, 0.25], &[-1.5, 2.0, -0.25]);
    negate(&client, &[1.5f64, -2.0, 1e-300], &[-1.5, 2.0, -1e-300]);
    negate(&client, &[7i32, -8, i32::MAX], &[-7, 8, -i32::MAX]);
    negate(&client, &[7i64, -8, i64::MAX], &[-7, 8, -i64::MAX]);
    let bf = |v: f32| half::bf16::from_f32(v);
    negate(
        &client,
        &[bf(1.5), bf(-2.0), bf(0.25)],
        &[bf(-1.5), bf(2.0), bf(-0.25)],
    );
}
