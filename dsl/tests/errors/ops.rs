//! Mistakes in one op's operands: shapes, element types, axes, permutations, bounds.

use super::*;

#[test]
fn add_of_different_shapes_is_a_shape_mismatch() {
    let s = Scope::new("f");
    let a = s.param(f32s(&[2, 3]));
    let b = s.param(f32s(&[3, 2]));
    let e = err_naming(a.add(&b), "add");
    assert_eq!(
        e,
        Error::ShapeMismatch {
            op: "add",
            lhs: f32s(&[2, 3]),
            rhs: f32s(&[3, 2]),
        }
    );
    assert!(e.to_string().contains("tensor<2x3xf32> vs tensor<3x2xf32>"));
}

#[test]
fn add_of_f32_and_f64_is_a_dtype_mismatch() {
    let s = Scope::new("f");
    let a = s.param(f32s(&[4]));
    let b = s.param(t(DType::F64, &[4]));
    let e = err_naming(a.add(&b), "add");
    assert_eq!(
        e,
        Error::DTypeMismatch {
            op: "add",
            lhs: DType::F32,
            rhs: DType::F64,
        }
    );
    assert!(e.to_string().contains("f32 vs f64"), "{e}");
}

#[test]
fn dot_general_of_different_dtypes_is_a_dtype_mismatch() {
    let s = Scope::new("f");
    let a = s.param(f32s(&[2, 3]));
    let b = s.param(t(DType::BF16, &[3, 4]));
    let e = err_naming(a.matmul(&b), "dot_general");
    assert!(
        matches!(
            e,
            Error::DTypeMismatch {
                op: "dot_general",
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn matmul_with_mismatched_inner_dims_is_invalid() {
    let s = Scope::new("f");
    let a = s.param(f32s(&[2, 3]));
    let b = s.param(f32s(&[4, 5]));
    let e = err_naming(a.matmul(&b), "dot_general");
    assert!(
        matches!(
            e,
            Error::InvalidOp {
                op: "dot_general",
                ..
            }
        ),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("tensor<2x3xf32>") && msg.contains("tensor<4x5xf32>"),
        "{msg}"
    );
}

#[test]
fn matmul_of_a_vector_is_invalid() {
    let s = Scope::new("f");
    let a = s.param(f32s(&[3]));
    let b = s.param(f32s(&[3, 4]));
    let e = err_naming(a.matmul(&b), "dot_general");
    assert!(matches!(e, Error::InvalidOp { .. }), "{e:?}");
}

#[test]
fn exp_of_i32_is_an_unsupported_dtype() {
    let s = Scope::new("f");
    let a = s.param(t(DType::I32, &[3]));
    let e = err_naming(a.exp(), "exponential");
    assert_eq!(
        e,
        Error::UnsupportedDType {
            op: "exponential",
            expected: "a floating-point",
            actual: t(DType::I32, &[3]),
        }
    );
}

#[test]
fn add_of_bools_is_an_unsupported_dtype() {
    let s = Scope::new("f");
    let a = s.param(t(DType::Bool, &[3]));
    let e = err_naming(a.add(&a), "add");
    assert!(
        matches!(e, Error::UnsupportedDType { op: "add", .. }),
        "{e:?}"
    );
}

#[test]
fn sum_over_axis_5_of_a_matrix_is_out_of_range() {
    let s = Scope::new("f");
    let a = s.param(f32s(&[2, 3]));
    let e = err_naming(a.sum(&[5]), "reduce");
    assert_eq!(
        e,
        Error::AxisOutOfRange {
            op: "reduce",
            axis: 5,
            operand: f32s(&[2, 3]),
        }
    );
    // The composites that reduce report the same.
    let e = err_naming(a.mean(&[5]), "reduce");
    assert!(matches!(e, Error::AxisOutOfRange { axis: 5, .. }), "{e:?}");
    // Softmax is an op of its own (its VJP needs only its result), and names itself.
    let e = err_naming(stackscan::nn::softmax(&a, 2), "softmax");
    assert!(matches!(e, Error::AxisOutOfRange { axis: 2, .. }), "{e:?}");
}

#[test]
fn other_axis_arguments_out_of_range() {
    let s = Scope::new("f");
    let a = s.param(f32s(&[2, 3]));
    let idx = s.param(t(DType::I32, &[4]));
    let cases: [(&str, Result<Tensor>); 6] = [
        ("cumsum", a.cumsum(2, false)),
        ("concatenate", concatenate(&[&a, &a], 2)),
        ("take", a.take(&idx, 2)),
        ("slice", a.slice_axis(3, 0, 1)),
        ("reshape", a.expand_dims(3)),
        ("all_gather", a.all_gather(2, &axis(4))),
    ];
    for (op, r) in cases {
        let e = err_naming(r, op);
        assert!(matches!(e, Error::AxisOutOfRange { .. }), "{op}: {e:?}");
    }
    let e = err_naming(s.iota(f32s(&[2]), 1), "iota");
    assert!(matches!(e, Error::AxisOutOfRange { axis: 1, .. }), "{e:?}");
}

#[test]
fn transpose_with_a_bad_permutation_is_invalid() {
    let s = Scope::new("f");
    let a = s.param(f32s(&[2, 3, 4]));
    for perm in [&[0, 0, 1][..], &[0, 1], &[0, 1, 3], &[0, 1, 2, 3]] {
        let e = err_naming(a.transpose(perm), "transpose");
        assert!(
            matches!(
                e,
                Error::InvalidOp {
                    op: "transpose",
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("not a permutation"), "{e}");
    }
}

#[test]
fn reshape_to_another_element_count_is_a_shape_mismatch() {
    let s = Scope::new("f");
    let a = s.param(f32s(&[2, 3]));
    let e = err_naming(a.reshape(&[4, 2]), "reshape");
    assert_eq!(
        e,
        Error::ShapeMismatch {
            op: "reshape",
            lhs: f32s(&[2, 3]),
            rhs: f32s(&[4, 2]),
        }
    );
}

#[test]
fn negative_dimensions_are_invalid() {
    let s = Scope::new("f");
    let empty = s.param(f32s(&[0]));
    // Same element count (zero), so only the negative-dimension check can catch it.
    let e = err_naming(empty.reshape(&[-1, 0]), "reshape");
    assert!(e.to_string().contains("negative dimension"), "{e}");
    let e = err_naming(s.full(1.0, f32s(&[-2])), "constant");
    assert!(matches!(e, Error::InvalidOp { .. }), "{e:?}");
}

#[test]
fn slice_out_of_bounds_is_invalid() {
    let s = Scope::new("f");
    let a = s.param(f32s(&[2, 3]));
    for (start, limit, stride) in [
        (&[0, 0][..], &[2, 4][..], &[1, 1][..]),
        (&[-1, 0], &[2, 3], &[1, 1]),
        (&[2, 0], &[1, 3], &[1, 1]),
        (&[0, 0], &[2, 3], &[1, 0]),
        (&[0], &[2], &[1]),
    ] {
        let e = err_naming(a.slice(start, limit, stride), "slice");
        assert!(matches!(e, Error::InvalidOp { op: "slice", .. }), "{e:?}");
        assert!(
            e.to_string().contains("does not fit tensor<2x3xf32>"),
            "{e}"
        );
    }
    let e = err_naming(a.slice_axis(1, 1, 7), "slice");
    assert!(matches!(e, Error::InvalidOp { .. }), "{e:?}");
}

#[test]
fn take_with_float_indices_is_an_unsupported_dtype() {
    let s = Scope::new("f");
    let table = s.param(f32s(&[10, 4]));
    let idx = s.param(f32s(&[3]));
    let e = err_naming(table.take(&idx, 0), "take");
    assert_eq!(
        e,
        Error::UnsupportedDType {
            op: "take",
            expected: "an integer index",
            actual: f32s(&[3]),
        }
    );
}

#[test]
fn dynamic_slice_with_a_non_scalar_start_is_an_unsupported_dtype() {
    let s = Scope::new("f");
    let a = s.param(f32s(&[4]));
    let start = s.param(t(DType::I64, &[]));
    let e = err_naming(a.dynamic_slice(&[&start], &[2]), "dynamic_slice");
    assert!(matches!(e, Error::UnsupportedDType { .. }), "{e:?}");
    let e = err_naming(a.dynamic_slice(&[], &[2]), "dynamic_slice");
    assert!(matches!(e, Error::InvalidOp { .. }), "{e:?}");
}

#[test]
fn top_k_with_k_too_large_is_invalid() {
    let s = Scope::new("f");
    let a = s.param(f32s(&[2, 5]));
    let e = err_naming(a.top_k(6), "top_k");
    assert!(matches!(e, Error::InvalidOp { op: "top_k", .. }), "{e:?}");
    assert!(e.to_string().contains("k = 6"), "{e}");
    let e = err_naming(a.top_k(0), "top_k");
    assert!(matches!(e, Error::InvalidOp { .. }), "{e:?}");
    let scalar = s.param(f32s(&[]));
    let e = err_naming(scalar.top_k(1), "top_k");
    assert!(matches!(e, Error::InvalidOp { .. }), "{e:?}");
}

#[test]
fn triangular_solve_with_a_non_square_matrix_is_a_shape_mismatch() {
    let s = Scope::new("f");
    let a = s.param(f32s(&[3, 4]));
    let b = s.param(f32s(&[3, 2]));
    let opts = TriangularSolve {
        left_side: true,
        lower: true,
        unit_diagonal: false,
        transpose_a: false,
    };
    let e = err_naming(a.triangular_solve(&b, opts), "triangular_solve");
    assert_eq!(
        e,
        Error::ShapeMismatch {
            op: "triangular_solve",
            lhs: f32s(&[3, 4]),
            rhs: f32s(&[3, 2]),
        }
    );
    // A vector is no matrix at all.
    let v = s.param(f32s(&[3]));
    let e = err_naming(v.triangular_solve(&v, opts), "triangular_solve");
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e:?}");
}

#[test]
fn concatenate_of_mismatched_tensors_is_a_shape_mismatch() {
    let s = Scope::new("f");
    let a = s.param(f32s(&[2, 3]));
    let b = s.param(f32s(&[2, 4]));
    let e = err_naming(concatenate(&[&a, &b], 0), "concatenate");
    assert_eq!(
        e,
        Error::ShapeMismatch {
            op: "concatenate",
            lhs: f32s(&[2, 3]),
            rhs: f32s(&[2, 4]),
        }
    );
    // Along dimension 1 they fit; a different element type does not.
    assert_eq!(concatenate(&[&a, &b], 1).unwrap().dims(), &[2, 7]);
    let c = s.param(t(DType::F64, &[2, 3]));
    let e = err_naming(concatenate(&[&a, &c], 1), "concatenate");
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e:?}");
}

#[test]
fn concatenate_of_nothing_is_invalid() {
    let e = err_naming(concatenate(&[], 0), "concatenate");
    assert!(matches!(e, Error::InvalidOp { .. }), "{e:?}");
    let e = err_naming(optimization_barrier(&[]), "optimization_barrier");
    assert!(matches!(e, Error::InvalidOp { .. }), "{e:?}");
}

#[test]
fn select_with_a_non_bool_predicate_is_an_unsupported_dtype() {
    let s = Scope::new("f");
    let p = s.param(f32s(&[3]));
    let a = s.param(f32s(&[3]));
    let e = err_naming(p.select(&a, &a), "select");
    assert_eq!(
        e,
        Error::UnsupportedDType {
            op: "select",
            expected: "a bool predicate",
            actual: f32s(&[3]),
        }
    );
    let bp = s.param(t(DType::Bool, &[4]));
    let e = err_naming(bp.select(&a, &a), "select");
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e:?}");
}
