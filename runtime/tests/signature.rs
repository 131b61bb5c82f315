//! Arguments are checked against `main`'s per-device signature however the program is
//! written, and a signature that cannot be read is refused at compile time instead of
//! leaving the arguments unchecked.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan_runtime::testing as common;

use stackscan::{Axis, Program, Scope, Sharding};
use stackscan_runtime::{
    Buffer, Client, CompileOptions, DType, Error, Executable, Mesh, ProgramForm, TensorType,
};

/// `a + b` on two 2×2 f32 matrices, with `{signature}` standing for `func.func @main(…)`.
fn add(signature: &str) -> String {
    format!(
        "{signature} -> tensor<2x2xf32> {{
  %0 = stablehlo.add %a, %b : tensor<2x2xf32>
  return %0 : tensor<2x2xf32>
}}"
    )
}

struct Args {
    good: Buffer,
    ints: Buffer,
    flat: Buffer,
}

fn args(client: &Client) -> Args {
    let dev = &client.devices()[0];
    Args {
        good: client.buffer(&[1f32, 2.0, 3.0, 4.0], &[2, 2], dev).unwrap(),
        ints: client.buffer(&[1i32, 2, 3, 4], &[2, 2], dev).unwrap(),
        flat: client.buffer(&[1f32, 2.0, 3.0, 4.0], &[4], dev).unwrap(),
    }
}

/// Correct arguments run; a same-size `i32` matrix and a flat `f32` vector are refused.
fn assert_checked(client: &Client, exe: &Executable) {
    let a = args(client);
    let out = exe.execute(&[[&a.good, &a.good]]).unwrap();
    assert_eq!(out[0][0].to_host::<f32>().unwrap(), [2.0, 4.0, 6.0, 8.0]);
    let err = exe.execute(&[[&a.good, &a.ints]]).unwrap_err();
    assert!(
        matches!(&err, Error::ArgumentType { index: 1, actual, .. } if actual.dtype == DType::I32),
        "{err:?}"
    );
    let err = exe.execute(&[[&a.flat, &a.good]]).unwrap_err();
    assert!(
        matches!(&err, Error::ArgumentType { index: 0, expected, .. }
            if *expected == TensorType::new(DType::F32, [2, 2])),
        "{err:?}"
    );
}

fn compile(client: &Client, text: &str) -> Executable {
    client
        .compile(text, &CompileOptions::default())
        .unwrap_or_else(|e| panic!("{e}\n{text}"))
}

#[test]
fn a_space_before_the_parameter_list_does_not_skip_the_checks() {
    let client = common::cpu_client(1);
    for signature in [
        "func.func public @main (%a: tensor<2x2xf32>, %b: tensor<2x2xf32>)",
        "func.func @main\n  (%a: tensor<2x2xf32>,\n   %b: tensor<2x2xf32>)",
    ] {
        assert_checked(&client, &compile(&client, &add(signature)));
    }
}

#[test]
fn a_comment_naming_another_signature_does_not_reject_correct_arguments() {
    let client = common::cpu_client(1);
    let text = add(
        "// func.func @main(%x: tensor<4xi32>) was the signature before the rewrite\n\
         func.func @main(%a: tensor<2x2xf32>, %b: tensor<2x2xf32>)",
    );
    assert_checked(&client, &compile(&client, &text));
}

#[test]
fn a_comment_with_an_unreadable_signature_does_not_skip_the_checks() {
    let client = common::cpu_client(1);
    let text = add("// func.func @main(...) adds two matrices\n\
         func.func @main(%a: tensor<2x2xf32>, %b: tensor<2x2xf32>)");
    assert_checked(&client, &compile(&client, &text));
}

#[test]
fn the_generic_op_form_is_checked() {
    let client = common::cpu_client(1);
    let text = r#""func.func"() <{function_type = (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>, sym_name = "main"}> ({
^bb0(%a: tensor<2x2xf32>, %b: tensor<2x2xf32>):
  %0 = "stablehlo.add"(%a, %b) : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  "func.return"(%0) : (tensor<2x2xf32>) -> ()
}) : () -> ()"#;
    assert_checked(&client, &compile(&client, text));
}

#[test]
fn an_unreadable_signature_is_refused_at_compile_time() {
    let client = common::cpu_client(1);
    let text = "func.func @main(%t: !stablehlo.token, %a: tensor<2xf32>) -> tensor<2xf32> {
  return %a : tensor<2xf32>
}";
    match client.compile(text, &CompileOptions::default()) {
        Err(Error::Signature { reason }) => {
            assert!(reason.contains("parameter 0"), "{reason}");
            assert!(reason.contains("`!stablehlo.token`"), "{reason}");
        }
        other => panic!("expected a signature error, got {other:?}"),
    }
}

/// One program on four partitions whose parameter `%arg0: tensor<8xf32>` carries `{attr}`;
/// its body takes it in shards of 2.
fn on_four_partitions(attr: &str) -> String {
    format!(
        r#"module @m attributes {{mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32}} {{
  sdy.mesh @mesh = <["x"=4]>
  func.func public @main(%arg0: tensor<8xf32>{attr}) -> (tensor<8xf32> {{sdy.sharding = #sdy.sharding<@mesh, [{{"x"}}]>}}) {{
    %out = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{{"x"}}]>] out_shardings=[<@mesh, [{{"x"}}]>] manual_axes={{"x"}} (%s: tensor<2xf32>) {{
      %y = stablehlo.add %s, %s : tensor<2xf32>
      sdy.return %y : tensor<2xf32>
    }} : (tensor<8xf32>) -> tensor<8xf32>
    return %out : tensor<8xf32>
  }}
}}"#
    )
}

#[test]
fn a_parameter_whose_sharding_the_partitioner_chooses_is_refused() {
    // Without `sdy.sharding`, or with a GSPMD `mhlo.sharding`, XLA's Shardy pipeline takes the
    // parameter's sharding from the body (shards of 2 here), not from the text.
    let client = common::cpu_client(4);
    let mesh = Mesh::new(&client, "x", 4).unwrap();
    let options = mesh.compile_options(ProgramForm::Partitions);
    for attr in [
        "",
        r#" {mhlo.sharding = "{replicated}"}"#,
        r#" {sdy.sharding = #sdy.sharding<@mesh, [{"x", ?}]>}"#,
    ] {
        let err = client
            .compile(&on_four_partitions(attr), &options)
            .unwrap_err();
        assert!(matches!(err, Error::Signature { .. }), "{attr}: {err:?}");
    }
    // Written out, the same sharding is read and checked per device.
    let exe = client
        .compile(
            &on_four_partitions(r#" {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>}"#),
            &options,
        )
        .unwrap();
    assert_eq!(exe.parameter_types(), [TensorType::new(DType::F32, [2])]);
}

/// JAX gives a replicated scalar of a `shard_map` step (Adam's step count) the mesh without
/// axes, `@empty_mesh = <[]>`, beside the step's own: it is whole on every device, so the
/// program compiles, is checked per device and runs.
#[test]
fn a_scalar_on_the_mesh_without_axes_is_whole_on_every_device() {
    let client = common::cpu_client(4);
    let mesh = Mesh::new(&client, "x", 4).unwrap();
    let text = r#"module @jit_step attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=4]>
  sdy.mesh @empty_mesh = <[]>
  func.func public @main(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>}, %arg1: tensor<f32> {sdy.sharding = #sdy.sharding<@empty_mesh, []>}) -> (tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>}) {
    %out = sdy.manual_computation(%arg0, %arg1) in_shardings=[<@mesh, [{"x"}]>, <@mesh, []>] out_shardings=[<@mesh, [{"x"}]>] manual_axes={"x"} (%s: tensor<2xf32>, %c: tensor<f32>) {
      %b = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<2xf32>
      %y = stablehlo.add %s, %b : tensor<2xf32>
      sdy.return %y : tensor<2xf32>
    } : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
    return %out : tensor<8xf32>
  }
}"#;
    let exe = client
        .compile(text, &mesh.compile_options(ProgramForm::Partitions))
        .unwrap();
    assert_eq!(
        exe.parameter_types(),
        [
            TensorType::new(DType::F32, [2]),
            TensorType::new(DType::F32, [])
        ]
    );
    let args: Vec<Vec<_>> = mesh
        .devices()
        .iter()
        .enumerate()
        .map(|(i, dev)| {
            let x = [2.0 * i as f32, 2.0 * i as f32 + 1.0];
            vec![
                client.buffer(&x, &[2], dev).unwrap(),
                client.buffer(&[0.5f32], &[], dev).unwrap(),
            ]
        })
        .collect();
    let lists: Vec<Vec<_>> = args.iter().map(|a| a.iter().collect()).collect();
    let out = exe.execute(&lists).unwrap();
    for (i, o) in out.iter().enumerate() {
        let x = 2.0 * i as f32;
        assert_eq!(
            o[0].to_host::<f32>().unwrap(),
            [x + 0.5, x + 1.5],
            "device {i}"
        );
    }
}

/// `x ↦ 2x` per device on a mesh of `n`, each device holding 2 of the `2n` values.
fn doubled_on_mesh(n: usize) -> Program {
    let f = Scope::new("main");
    let x = f.param(TensorType::new(DType::F32, [2]));
    let y = x.add(&x).unwrap();
    let axis = Axis {
        name: "x".into(),
        size: n,
    };
    Program::on_mesh(
        f.finish(&[y]).unwrap(),
        axis,
        vec![Sharding::Dim(0)],
        vec![Sharding::Dim(0)],
    )
    .unwrap()
}

#[test]
fn compile_program_checks_arguments_against_the_program() {
    let client = common::cpu_client(4);
    let mesh = Mesh::new(&client, "x", 4).unwrap();
    let exe = client.compile_program(&doubled_on_mesh(4), &mesh).unwrap();
    assert_eq!(exe.parameter_types(), [TensorType::new(DType::F32, [2])]);
    let upload = |values: &[f32], d: usize| {
        client
            .buffer(values, &[values.len() as i64], &mesh.devices()[d])
            .unwrap()
    };
    let shards: Vec<Buffer> = (0..4).map(|d| upload(&[d as f32, 1.0], d)).collect();
    let lists: Vec<[&Buffer; 1]> = shards.iter().map(|b| [b]).collect();
    let out = exe.execute(&lists).unwrap();
    assert_eq!(out[3][0].to_host::<f32>().unwrap(), [6.0, 2.0]);
    // The global array on every device: the right byte count for no device.
    let whole: Vec<Buffer> = (0..4).map(|d| upload(&[0.0; 8], d)).collect();
    let lists: Vec<[&Buffer; 1]> = whole.iter().map(|b| [b]).collect();
    let err = exe.execute(&lists).unwrap_err();
    assert!(
        matches!(&err, Error::ArgumentType { device: 0, index: 0, expected, .. }
            if *expected == TensorType::new(DType::F32, [2])),
        "{err:?}"
    );
}

#[test]
fn compile_program_refuses_a_mesh_of_another_size() {
    let client = common::cpu_client(4);
    let two = Mesh::new(&client, "x", 2).unwrap();
    let err = client
        .compile_program(&doubled_on_mesh(4), &two)
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::MeshSize {
                program: 4,
                mesh: 2
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "the program runs on 4 devices but the mesh has 2"
    );
    let f = Scope::new("main");
    let x = f.param(TensorType::new(DType::F32, [2]));
    let single = Program::new(f.finish(&[x]).unwrap());
    let four = Mesh::new(&client, "x", 4).unwrap();
    let err = client.compile_program(&single, &four).unwrap_err();
    assert!(
        matches!(
            err,
            Error::MeshSize {
                program: 1,
                mesh: 4
            }
        ),
        "{err:?}"
    );
}
