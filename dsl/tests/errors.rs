//! Every kind of `stackscan::Error`, from a mistake a user can make, with the op it names.
//!
//! Each test checks the variant, its fields where they say something, and that the message
//! names the op in backticks. `no_panics` feeds many more malformed inputs through the front
//! end, differentiation and emission and requires an `Err` (never a panic) from each.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use std::fmt::Debug;
use std::panic::{AssertUnwindSafe, catch_unwind};

use stackscan::{
    Axis, DType, DotDims, Error, Program, Result, Scope, Sharding, Tensor, TensorType,
    TriangularSolve, concatenate, optimization_barrier, vjp, vjp_wrt,
};

fn t(dtype: DType, dims: &[i64]) -> TensorType {
    TensorType::new(dtype, dims)
}

fn f32s(dims: &[i64]) -> TensorType {
    t(DType::F32, dims)
}

fn axis(size: usize) -> Axis {
    Axis {
        name: "x".to_owned(),
        size,
    }
}

/// The error of `r`, after checking that its message names `op` in backticks.
fn err_naming<T: Debug>(r: Result<T>, op: &str) -> Error {
    let e = r.expect_err("expected an error");
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("`{op}`")),
        "message does not name `{op}`: {msg}"
    );
    e
}

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
    let e = err_naming(stackscan::nn::softmax(&a, 2), "reduce");
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

#[test]
fn scan_whose_body_changes_the_carry_type_is_invalid() {
    let s = Scope::new("f");
    let h0 = s.param(f32s(&[4]));
    let xs = s.param(f32s(&[3, 4]));
    let r = s.scan(
        std::slice::from_ref(&h0),
        std::slice::from_ref(&xs),
        3,
        false,
        |_, c, x| {
            let next = c[0].add(&x[0])?.convert(DType::F64)?;
            Ok((vec![next], vec![]))
        },
    );
    let e = err_naming(r, "scan");
    assert!(matches!(e, Error::InvalidOp { op: "scan", .. }), "{e:?}");
    assert!(e.to_string().contains("carry"), "{e}");

    let r = s.scan(
        std::slice::from_ref(&h0),
        std::slice::from_ref(&xs),
        3,
        false,
        |_, c, x| Ok((vec![c[0].add(&x[0])?.slice_axis(0, 0, 2)?], vec![])),
    );
    assert!(matches!(err_naming(r, "scan"), Error::InvalidOp { .. }));

    // Wrong number of carries, and scanned inputs of the wrong length.
    let r = s.scan(std::slice::from_ref(&h0), &[], 3, false, |_, c, _| {
        Ok((vec![c[0].clone(), c[0].clone()], vec![]))
    });
    assert!(matches!(err_naming(r, "scan"), Error::InvalidOp { .. }));
    let r = s.scan(std::slice::from_ref(&h0), &[xs], 5, false, |_, c, _| {
        Ok((c.to_vec(), vec![]))
    });
    assert!(err_naming(r, "scan").to_string().contains("5 rows"));
}

#[test]
fn while_loop_with_a_bad_condition_or_body_is_invalid() {
    let s = Scope::new("f");
    let x = s.param(f32s(&[2]));
    let r = s.while_loop(
        std::slice::from_ref(&x),
        |_, c| Ok(c[0].clone()),
        |_, c| Ok(c.to_vec()),
        &[],
    );
    assert!(matches!(err_naming(r, "while"), Error::InvalidOp { .. }));
    let r = s.while_loop(
        std::slice::from_ref(&x),
        |cs, _| cs.full(1.0, t(DType::Bool, &[])),
        |_, c| Ok(vec![c[0].sum(&[0])?]),
        &[],
    );
    assert!(matches!(err_naming(r, "while"), Error::InvalidOp { .. }));
}

#[test]
fn reduce_scatter_of_an_indivisible_dim_is_invalid() {
    let s = Scope::new("f");
    let a = s.param(f32s(&[6, 3]));
    let e = err_naming(a.reduce_scatter(0, &axis(4)), "reduce_scatter");
    assert!(
        matches!(
            e,
            Error::InvalidOp {
                op: "reduce_scatter",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        e.to_string().contains("does not split over 4 devices"),
        "{e}"
    );
    let e = err_naming(a.all_to_all(1, 0, &axis(2)), "all_to_all");
    assert!(matches!(e, Error::InvalidOp { .. }), "{e:?}");
}

#[test]
fn collectives_on_an_axis_of_no_devices_are_invalid() {
    let s = Scope::new("f");
    let a = s.param(f32s(&[4, 4]));
    let e = err_naming(a.reduce_scatter(0, &axis(0)), "reduce_scatter");
    assert!(matches!(e, Error::InvalidOp { .. }), "{e:?}");
    let e = err_naming(a.all_to_all(0, 1, &axis(0)), "all_to_all");
    assert!(matches!(e, Error::InvalidOp { .. }), "{e:?}");
}

#[test]
fn tensors_of_two_top_level_scopes_are_foreign() {
    let s1 = Scope::new("one");
    let s2 = Scope::new("two");
    let a = s1.param(f32s(&[3]));
    let b = s2.param(f32s(&[3]));
    let e = err_naming(a.add(&b), "add");
    assert_eq!(e, Error::ForeignTensor { op: "add" });
    let m1 = s1.param(f32s(&[3, 3]));
    let m2 = s2.param(f32s(&[3, 3]));
    assert_eq!(
        err_naming(m1.matmul(&m2), "dot_general"),
        Error::ForeignTensor { op: "dot_general" }
    );
    // Returning another scope's tensor.
    assert_eq!(
        err_naming(s1.finish(&[b]), "return"),
        Error::ForeignTensor { op: "return" }
    );
}

#[test]
fn tensors_of_sibling_loop_bodies_are_foreign() {
    let s = Scope::new("f");
    let x = s.param(f32s(&[2]));
    let leaked = std::cell::RefCell::new(None);
    let r = s.while_loop(
        std::slice::from_ref(&x),
        |cs, c| {
            leaked.replace(Some(c[0].clone()));
            c[0].sum(&[0])?.gt(&cs.scalar(0.0, DType::F32)?)
        },
        |_, c| {
            let from_cond = leaked.borrow().clone().unwrap();
            Ok(vec![c[0].add(&from_cond)?])
        },
        &[],
    );
    assert_eq!(err_naming(r, "add"), Error::ForeignTensor { op: "add" });
}

#[test]
fn vjp_through_a_while_loop_is_not_differentiable() {
    let s = Scope::new("f");
    let x = s.param(f32s(&[2]));
    let out = s
        .while_loop(
            &[x],
            |cs, c| c[0].sum(&[0])?.lt(&cs.scalar(100.0, DType::F32)?),
            |_, c| Ok(vec![c[0].scale(2.0)?]),
            &[],
        )
        .unwrap();
    let f = s.finish(&out).unwrap();
    let e = err_naming(vjp(&f), "while");
    assert!(
        matches!(e, Error::NotDifferentiable { op: "while", .. }),
        "{e:?}"
    );
    assert!(
        e.to_string().contains("scan"),
        "the message should point at `scan`: {e}"
    );
}

#[test]
fn vjp_wrt_an_integer_parameter_is_not_differentiable() {
    let s = Scope::new("f");
    let x = s.param(f32s(&[3]));
    let n = s.param(t(DType::I32, &[3]));
    let y = x.mul(&n.convert(DType::F32).unwrap()).unwrap();
    let f = s.finish(&[y]).unwrap();
    let e = err_naming(vjp_wrt(&f, &[true, true]), "vjp");
    assert!(
        matches!(e, Error::NotDifferentiable { op: "vjp", .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("parameter 1"), "{e}");
    // The float parameter alone is fine, and the flags must match the parameters.
    assert!(vjp_wrt(&f, &[true, false]).is_ok());
    assert!(matches!(
        err_naming(vjp_wrt(&f, &[true]), "vjp"),
        Error::InvalidOp { .. }
    ));
}

#[test]
fn program_on_mesh_with_the_wrong_sharding_count_is_invalid() {
    let s = Scope::new("main");
    let x = s.param(f32s(&[2, 4]));
    let y = x.all_gather(0, &axis(4)).unwrap();
    let f = s.finish(&[y]).unwrap();
    let r = Program::on_mesh(
        f.clone(),
        axis(4),
        vec![Sharding::Dim(0), Sharding::Replicated],
        vec![Sharding::Replicated],
    );
    let e = err_naming(r, "program");
    assert!(matches!(e, Error::InvalidOp { op: "program", .. }), "{e:?}");
    assert!(
        e.to_string().contains("2 parameter and 1 result shardings"),
        "{e}"
    );
    let r = Program::on_mesh(f.clone(), axis(4), vec![Sharding::Dim(0)], vec![]);
    assert!(matches!(err_naming(r, "program"), Error::InvalidOp { .. }));
    let r = Program::on_mesh(
        f.clone(),
        axis(4),
        vec![Sharding::Dim(2)],
        vec![Sharding::Replicated],
    );
    assert!(matches!(
        err_naming(r, "program"),
        Error::AxisOutOfRange { axis: 2, .. }
    ));
    let r = Program::on_mesh(f, axis(0), vec![Sharding::Dim(0)], vec![Sharding::Dim(0)]);
    assert!(matches!(err_naming(r, "program"), Error::InvalidOp { .. }));
}

#[test]
fn emitting_a_collective_in_a_single_device_program_is_invalid() {
    let s = Scope::new("main");
    let x = s.param(f32s(&[8]));
    let y = x.reduce_scatter(0, &axis(4)).unwrap();
    let f = s.finish(&[y]).unwrap();
    // Building is fine: only emission knows where the program runs.
    let e = err_naming(Program::new(f).emit(), "reduce_scatter");
    assert!(
        matches!(
            e,
            Error::InvalidOp {
                op: "reduce_scatter",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("Program::on_mesh"), "{e}");

    for (op, build) in [
        (
            "all_gather",
            (|x: &Tensor| x.all_gather(0, &axis(2))) as fn(&Tensor) -> Result<Tensor>,
        ),
        ("all_reduce", |x| x.psum(&axis(2))),
        ("all_to_all", |x| x.all_to_all(0, 0, &axis(2))),
    ] {
        let s = Scope::new("main");
        let x = s.param(f32s(&[8]));
        let y = build(&x).unwrap();
        let f = s.finish(&[y]).unwrap();
        let e = err_naming(Program::new(f).emit(), op);
        assert!(matches!(e, Error::InvalidOp { .. }), "{e:?}");
    }
}

#[test]
fn emitting_a_collective_on_another_axis_is_invalid() {
    let s = Scope::new("main");
    let x = s.param(f32s(&[2]));
    let other = Axis {
        name: "y".to_owned(),
        size: 4,
    };
    let y = x.all_gather(0, &other).unwrap();
    let f = s.finish(&[y]).unwrap();
    let p = Program::on_mesh(
        f,
        axis(4),
        vec![Sharding::Dim(0)],
        vec![Sharding::Replicated],
    )
    .unwrap();
    let e = err_naming(p.emit(), "all_gather");
    assert!(e.to_string().contains("axis `y`"), "{e}");

    let s = Scope::new("main");
    let i = s.axis_index(&axis(4)).unwrap();
    let f = s.finish(&[i]).unwrap();
    let e = err_naming(Program::new(f).emit(), "axis_index");
    assert!(matches!(e, Error::InvalidOp { .. }), "{e:?}");
}

#[test]
fn constants_that_do_not_fit_their_type_are_invalid() {
    let s = Scope::new("f");
    let e = err_naming(s.from_f64s(&[1.0, 2.0], DType::I32, &[2]), "constant");
    assert!(matches!(e, Error::InvalidOp { .. }), "{e:?}");
    let e = err_naming(s.from_f64s(&[1.0, 2.0], DType::F32, &[3]), "constant");
    assert!(e.to_string().contains("2 values"), "{e}");
}

#[test]
fn inlining_with_the_wrong_arguments_fails() {
    let g = Scope::new("g");
    let a = g.param(f32s(&[2]));
    let gf = g.finish(&[a.exp().unwrap()]).unwrap();
    let s = Scope::new("f");
    let x = s.param(f32s(&[3]));
    assert!(matches!(
        err_naming(s.inline(&gf, &[]), "call"),
        Error::InvalidOp { .. }
    ));
    assert!(matches!(
        err_naming(s.inline(&gf, &[x]), "call"),
        Error::ShapeMismatch { .. }
    ));
}

/// Runs `f`, turning a panic into a description of it.
fn without_panic<T>(f: impl FnOnce() -> Result<T>) -> std::result::Result<Result<T>, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
        p.downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "non-string panic".to_owned())
    })
}

/// A scalar-carry scan of `length` steps with no scanned inputs, emitted.
fn emit_empty_scan(length: usize, reverse: bool) -> Result<String> {
    let s = Scope::new("main");
    let h = s.param(f32s(&[]));
    let (carry, ys) = s.scan(&[h], &[], length, reverse, |_, c, _| {
        Ok((vec![c[0].scale(2.0)?], vec![c[0].clone()]))
    })?;
    let f = s.finish(&[carry[0].clone(), ys[0].clone()])?;
    vjp(&f)?;
    Program::new(f).emit()
}

#[test]
fn no_panics() {
    type Case = (&'static str, Box<dyn FnOnce() -> Result<String>>);
    let s = Scope::new("f");
    let m = s.param(f32s(&[2, 3]));
    let v = s.param(f32s(&[3]));
    let scalar = s.param(f32s(&[]));
    let idx = s.param(t(DType::I32, &[2]));
    let dbg = |r: Result<Tensor>| r.map(|t| format!("{t:?}"));
    let must_fail: Vec<Case> = vec![
        (
            "broadcast to a lower rank",
            Box::new({
                let m = m.clone();
                move || dbg(m.broadcast_to(&[3]))
            }),
        ),
        (
            "broadcast with an out-of-range mapping",
            Box::new({
                let v = v.clone();
                move || dbg(v.broadcast_in_dim(&[2, 3], &[7]))
            }),
        ),
        (
            "broadcast with a mapping of the wrong length",
            Box::new({
                let v = v.clone();
                move || dbg(v.broadcast_in_dim(&[2, 3], &[]))
            }),
        ),
        (
            "dot_general with out-of-range dims",
            Box::new({
                let m = m.clone();
                move || {
                    dbg(m.dot_general(
                        &m,
                        DotDims {
                            lhs_contract: vec![9],
                            rhs_contract: vec![0],
                            ..DotDims::default()
                        },
                    ))
                }
            }),
        ),
        (
            "dot_general with unpaired dims",
            Box::new({
                let m = m.clone();
                move || {
                    dbg(m.dot_general(
                        &m,
                        DotDims {
                            lhs_batch: vec![0],
                            lhs_contract: vec![1],
                            rhs_contract: vec![1],
                            ..DotDims::default()
                        },
                    ))
                }
            }),
        ),
        (
            "reduce over a repeated axis",
            Box::new({
                let m = m.clone();
                move || dbg(m.sum(&[1, 1]))
            }),
        ),
        (
            "slice of a scalar with indices",
            Box::new({
                let sc = scalar.clone();
                move || dbg(sc.slice(&[0], &[1], &[1]))
            }),
        ),
        (
            "dynamic_update_slice of a larger update",
            Box::new({
                let (v, m) = (v.clone(), m.clone());
                move || {
                    let z = v.scope().scalar(0.0, DType::I32)?;
                    dbg(v.dynamic_update_slice(&m, &[&z]))
                }
            }),
        ),
        (
            "pad with a non-scalar value",
            Box::new({
                let m = m.clone();
                move || dbg(m.pad(&m, &[0, 0], &[0, 0], &[0, 0]))
            }),
        ),
        (
            "pad with negative interior",
            Box::new({
                let (m, sc) = (m.clone(), scalar.clone());
                move || dbg(m.pad(&sc, &[0, 0], &[0, 0], &[-1, 0]))
            }),
        ),
        (
            "pad cropping below zero",
            Box::new({
                let (m, sc) = (m.clone(), scalar.clone());
                move || dbg(m.pad(&sc, &[-5, 0], &[0, 0], &[0, 0]))
            }),
        ),
        (
            "scatter_add of mismatched updates",
            Box::new({
                let (m, v, idx) = (m.clone(), v.clone(), idx.clone());
                move || dbg(m.scatter_add(&idx, &v, 0))
            }),
        ),
        (
            "squeeze of a non-unit dimension",
            Box::new({
                let m = m.clone();
                move || dbg(m.squeeze(0))
            }),
        ),
        (
            "one_hot into a bad dtype",
            Box::new({
                let m = m.clone();
                move || dbg(m.one_hot(3, DType::I32)?.exp())
            }),
        ),
        (
            "cross_entropy of a vector",
            Box::new({
                let (v, idx) = (v.clone(), idx.clone());
                move || dbg(stackscan::nn::cross_entropy(&v, &idx))
            }),
        ),
        (
            "rope of a matrix",
            Box::new({
                let m = m.clone();
                move || dbg(stackscan::nn::rope(&m, 10000.0, 2))
            }),
        ),
        (
            "rms_norm of a scalar",
            Box::new({
                let sc = scalar.clone();
                move || dbg(stackscan::nn::rms_norm(&sc, &sc, 1e-6))
            }),
        ),
        (
            "causal_mask of a vector",
            Box::new({
                let v = v.clone();
                move || dbg(stackscan::nn::causal_mask(&v))
            }),
        ),
        (
            "scan of a scalar input",
            Box::new({
                let (v, sc) = (v.clone(), scalar.clone());
                move || {
                    v.scope()
                        .scan(std::slice::from_ref(&v), &[sc], 1, false, |_, c, _| {
                            Ok((c.to_vec(), vec![]))
                        })
                        .map(|(c, _)| format!("{c:?}"))
                }
            }),
        ),
        (
            "finishing a loop body as a function",
            Box::new({
                let v = v.clone();
                move || {
                    v.scope()
                        .scan(std::slice::from_ref(&v), &[], 2, false, |bs, c, _| {
                            bs.clone().finish(c)?;
                            Ok((c.to_vec(), vec![]))
                        })
                        .map(|(c, _)| format!("{c:?}"))
                }
            }),
        ),
    ];
    let mut failures = Vec::new();
    for (name, case) in must_fail {
        match without_panic(case) {
            Err(p) => failures.push(format!("{name}: panicked: {p}")),
            Ok(Ok(v)) => failures.push(format!("{name}: succeeded: {v}")),
            Ok(Err(e)) => assert!(e.to_string().starts_with('`'), "{name}: {e}"),
        }
    }
    // Legal edge cases must neither panic nor fail.
    let must_pass: Vec<Case> = vec![
        ("empty scan", Box::new(|| emit_empty_scan(0, false))),
        ("empty reverse scan", Box::new(|| emit_empty_scan(0, true))),
        (
            "one-step reverse scan",
            Box::new(|| emit_empty_scan(1, true)),
        ),
    ];
    for (name, case) in must_pass {
        match without_panic(case) {
            Err(p) => failures.push(format!("{name}: panicked: {p}")),
            Ok(Err(e)) => failures.push(format!("{name}: failed: {e}")),
            Ok(Ok(_)) => {}
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn absurd_sizes_are_errors_not_overflows() {
    let s = Scope::new("f");
    let huge = s.param(f32s(&[i64::MAX / 2]));
    let e = err_naming(huge.all_gather(0, &axis(4)), "all_gather");
    assert!(matches!(e, Error::InvalidOp { .. }), "{e:?}");
    let e = err_naming(s.iota(f32s(&[1 << 40, 1 << 40]), 0), "iota");
    assert!(e.to_string().contains("too large"), "{e}");
    let x = s.param(f32s(&[3]));
    let zero = s.scalar(0.0, DType::F32).unwrap();
    let e = err_naming(x.pad(&zero, &[i64::MAX], &[i64::MAX], &[0]), "pad");
    assert!(e.to_string().contains("overflows"), "{e}");
}

#[test]
fn integer_constants_must_fit_their_type() {
    let s = Scope::new("f");
    let e = err_naming(s.from_i64s(&[3_000_000_000], DType::I32, &[1]), "constant");
    assert!(e.to_string().contains("3000000000"), "{e}");
    let e = err_naming(s.scalar(1e30, DType::I32), "constant");
    assert!(matches!(e, Error::InvalidOp { .. }), "{e:?}");
    assert!(s.from_i64s(&[3_000_000_000], DType::I64, &[1]).is_ok());
}

#[test]
fn pad_of_an_empty_dimension_differentiates_to_the_right_shape() {
    let s = Scope::new("f");
    let x = s.param(f32s(&[0, 2]));
    let zero = s.scalar(0.0, DType::F32).unwrap();
    let y = x.pad(&zero, &[1, 0], &[2, 0], &[0, 0]).unwrap();
    let f = s.finish(&[y]).unwrap();
    let g = vjp(&f).unwrap();
    assert_eq!(g.result_types(), vec![f32s(&[0, 2])]);
}
