//! The reader on hand-written programs: what it accepts, and what it refuses.

use stackscan::{DType, TensorType};

use super::Signature;
use crate::error::Error;

fn read(text: &str, partitions: i64) -> Vec<TensorType> {
    match Signature::read(text, partitions) {
        Ok(sig) => sig.params,
        Err(e) => panic!("{e}\n{text}"),
    }
}

/// The reason of the refusal, which must be an `Error::Signature`.
fn refused(text: &str, partitions: i64) -> String {
    match Signature::read(text, partitions) {
        Err(Error::Signature { reason }) => reason,
        other => panic!("expected a refusal, got {other:?}\n{text}"),
    }
}

fn t(dtype: DType, dims: &[i64]) -> TensorType {
    TensorType::new(dtype, dims.to_vec())
}

const SHARDY: &str = r#"module @m attributes {mhlo.num_partitions = 4 : i32} {
  sdy.mesh @mesh = <["fsdp"=4]>
  func.func public @main(%arg0: tensor<8x3xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"fsdp"}, {}]>}, %arg1: tensor<5xbf16> {sdy.sharding = #sdy.sharding<@mesh, [{}]>}) -> (tensor<8x3xf32>) {
  }
}"#;

#[test]
fn plain_arguments() {
    let text = "module { func.func @main(%arg0: tensor<2x3xf32>, %arg1: tensor<i32>) -> tensor<2x3xf32> { } }";
    assert_eq!(read(text, 1), [t(DType::F32, &[2, 3]), t(DType::I32, &[])]);
}

#[test]
fn shardy_arguments_are_divided_per_device() {
    assert_eq!(
        read(SHARDY, 4),
        [t(DType::F32, &[2, 3]), t(DType::BF16, &[5])]
    );
}

/// JAX gives a replicated scalar the mesh without axes (`@empty_mesh = <[]>`) beside the
/// step's real mesh: whole on every device, whatever the partition count.
#[test]
fn a_mesh_without_axes_replicates() {
    let text = r#"module @jit_step attributes {mhlo.num_partitions = 4 : i32} {
  sdy.mesh @mesh = <["fsdp"=4]>
  sdy.mesh @empty_mesh = <[]>
  func.func public @main(%arg0: tensor<8x2xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"fsdp"}, {}]>}, %arg1: tensor<f32> {sdy.sharding = #sdy.sharding<@empty_mesh, []>}, %arg2: tensor<3xi32> {sdy.sharding = #sdy.sharding<@empty_mesh, [{}]>}) -> (tensor<f32>) {
  }
}"#;
    assert_eq!(
        read(text, 4),
        [
            t(DType::F32, &[2, 2]),
            t(DType::F32, &[]),
            t(DType::I32, &[3])
        ]
    );
}

#[test]
fn spacing_visibility_quoting_and_locations_do_not_matter() {
    let text = "// func.func @main(%x: tensor<1xi1>)\nfunc.func private @\"main\" (\n  %a : tensor<4 x 8 x f32> loc(\"f.py\":1:2),\n\t%b: tensor<0x2xi64> loc(#loc3)\n) -> tensor<f32> {}\n#loc3 = loc(\"f.py\":3:4)";
    assert_eq!(
        read(text, 1),
        [t(DType::F32, &[4, 8]), t(DType::I64, &[0, 2])]
    );
}

#[test]
fn decoys_in_comments_strings_and_other_functions_are_ignored() {
    let text = r#"module attributes {note = "func.func @main(%z: tensor<9xi32>)"} {
  // func.func @main(%x: tensor<3xf32>) was the old signature
  func.func private @main_helper(%q: tensor<7xf64>) -> tensor<7xf64> { }
  func.func @main(%a: tensor<2xi32>) -> tensor<2xi32> { }
}"#;
    assert_eq!(read(text, 1), [t(DType::I32, &[2])]);
}

#[test]
fn generic_form_with_properties() {
    let text = r#""builtin.module"() ({
  "sdy.mesh"() <{mesh = #sdy.mesh<["x"=2, "y"=2]>, sym_name = "grid"}> : () -> ()
  "func.func"() <{arg_attrs = [{sdy.sharding = #sdy.sharding<@grid, [{"x", "y"}, {}]>}, {sdy.sharding = #sdy.sharding<@grid, []>}], function_type = (tensor<8x2xf32>, tensor<i1>) -> tensor<8x2xf32>, sym_name = "main", sym_visibility = "public"}> ({
  ^bb0(%arg0: tensor<8x2xf32> loc("a"), %arg1: tensor<i1>):
    "func.return"(%arg0) : (tensor<8x2xf32>) -> ()
  }) : () -> ()
}) : () -> ()"#;
    assert_eq!(read(text, 4), [t(DType::F32, &[2, 2]), t(DType::Bool, &[])]);
}

#[test]
fn generic_form_with_the_dictionary_after_the_regions() {
    let text = r#""func.func"() ({
  ^bb0(%arg0: tensor<3xf64>):
    "func.return"(%arg0) : (tensor<3xf64>) -> ()
}) {function_type = (tensor<3xf64>) -> tensor<3xf64>, sym_name = "main"} : () -> ()"#;
    assert_eq!(read(text, 1), [t(DType::F64, &[3])]);
}

#[test]
fn aliases_of_meshes_shardings_and_types() {
    let text = r#"#grid = #sdy.mesh<["a"=2]>
#split = #sdy.sharding<@m, [{"a"}]>
!vec = tensor<6xf32>
module {
  sdy.mesh @m = #grid
  func.func @main(%x: !vec {sdy.sharding = #split}, %y: tensor<4xi32> {sdy.sharding = #sdy.sharding<mesh<["a"=2]>, [{"a":(1)2}]>}) { }
}"#;
    assert_eq!(read(text, 2), [t(DType::F32, &[3]), t(DType::I32, &[2])]);
}

#[test]
fn priorities_replicated_axes_and_device_ids_are_understood() {
    let text = r#"sdy.mesh @m = <["a"=2, "b"=2], device_ids=[3, 2, 1, 0]>
func.func @main(%x: tensor<4x4xf32> {sdy.sharding = #sdy.sharding<@m, [{"a"}p0, {}p1], replicated={"b"}>}) { }"#;
    assert_eq!(read(text, 4), [t(DType::F32, &[2, 4])]);
}

#[test]
fn gspmd_shardings_are_whole_values_on_one_partition() {
    let text = r#"func.func @main(%x: tensor<8xf32> {mhlo.sharding = "{devices=[4]<=[4]}"}) { }"#;
    assert_eq!(read(text, 1), [t(DType::F32, &[8])]);
}

#[test]
fn the_golden_programs_are_read() {
    let fsdp = include_str!("../../../dsl/tests/golden/fsdp_collectives.mlir");
    assert_eq!(read(fsdp, 4), [t(DType::F32, &[2, 8])]);
    let mlp = include_str!("../../../dsl/tests/golden/mlp.mlir");
    assert_eq!(read(mlp, 1).len(), 4);
}

#[test]
fn what_cannot_be_read_is_refused() {
    let cases: &[(&str, i64, &str)] = &[
        ("module {}", 1, "no `func.func @main`"),
        (
            "func.func @main(%a: tensor<1xf32>) {}\nfunc.func @main(%a: tensor<1xf32>) {}",
            1,
            "2 functions",
        ),
        (
            r#"func.func @main(%a: tensor<4xf32> {sdy.sharding = #sdy.sharding<@nowhere, [{"x"}]>}) {}"#,
            4,
            "no `sdy.mesh @nowhere`",
        ),
        (
            r#"sdy.mesh @m = <["x"=4]> func.func @main(%a: tensor<4xf32> {sdy.sharding = #sdy.sharding<@m, [{"x", ?}]>}) {}"#,
            4,
            "open",
        ),
        (
            r#"sdy.mesh @m = <["x"=4]> func.func @main(%a: tensor<6xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}]>}) {}"#,
            4,
            "does not split evenly",
        ),
        (
            r#"sdy.mesh @m = <["x"=4]> func.func @main(%a: tensor<8xf32> {sdy.sharding = #sdy.sharding<@m, [{"y"}]>}) {}"#,
            4,
            "axis `\"y\"` is not in the mesh",
        ),
        (
            r#"sdy.mesh @m = <["x"=4]> func.func @main(%a: tensor<8xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}]>}) {}"#,
            2,
            "4 devices but the program is compiled for 2 partitions",
        ),
        (
            r#"sdy.mesh @m = <["x"=4]> func.func @main(%a: tensor<8x2xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}]>}) {}"#,
            4,
            "names 1 dimensions",
        ),
        (
            r#"sdy.mesh @e = <[]> func.func @main(%a: tensor<8x2xf32> {sdy.sharding = #sdy.sharding<@e, [{}]>}) {}"#,
            4,
            "names 1 dimensions",
        ),
        (
            r#"sdy.mesh @e = <[]> func.func @main(%a: tensor<8xf32> {sdy.sharding = #sdy.sharding<@e, [{?}]>}) {}"#,
            4,
            "open",
        ),
        ("func.func @main(%a: tensor<?x4xf32>) {}", 1, "dynamic"),
        ("func.func @main(%a: tensor<*xf32>) {}", 1, "unranked"),
        ("func.func @main(%a: tensor<4xf16>) {}", 1, "`f16`"),
        (
            "func.func @main(%a: tensor<4xcomplex<f32>>) {}",
            1,
            "`complex`",
        ),
        (
            "func.func @main(%a: tensor<4xf32, #enc>) {}",
            1,
            "encodings",
        ),
        (
            "func.func @main(%t: !stablehlo.token) {}",
            1,
            "`!stablehlo.token` is not a tensor",
        ),
        ("func.func @main(%a: f32) {}", 1, "`f32` is not a tensor"),
        (
            "func.func @main(%a: tensor<4 8xf32>) {}",
            1,
            "expected a dimension",
        ),
        (
            r#"func.func @main(%a: tensor<8xf32> {mhlo.sharding = "{replicated}"}) {}"#,
            4,
            "GSPMD",
        ),
        (
            "func.func @main(%a: tensor<8xf32>) {}",
            4,
            "no `sdy.sharding`",
        ),
        (
            "!t = tensor<1xf32>\n!t = tensor<2xf32>\nfunc.func @main(%a: !t) {}",
            1,
            "defined more than once",
        ),
        (
            "!a = !b\n!b = !a\nfunc.func @main(%a: !a) {}",
            1,
            "nested more than",
        ),
        (
            r#"func.func @main(%a: tensor<1xf32>) { "unterminated }"#,
            1,
            "unterminated",
        ),
        (
            r#""func.func"() <{function_type = (tensor<1xf32>) -> (), sym_name = "main", arg_attrs = [{}, {}]}> ({}) : () -> ()"#,
            1,
            "1 inputs but `arg_attrs` has 2",
        ),
    ];
    for &(text, partitions, expected) in cases {
        let reason = refused(text, partitions);
        assert!(
            reason.contains(expected),
            "{reason:?} lacks {expected:?}\n{text}"
        );
    }
}

#[test]
fn the_error_says_what_and_suggests_compile_program() {
    let err = Signature::read("func.func @main(%a: tensor<?xf32>) {}", 1).unwrap_err();
    let message = err.to_string();
    assert!(message.contains("parameter 0: dynamic"), "{message}");
    assert!(message.contains("`Client::compile_program`"), "{message}");
}
