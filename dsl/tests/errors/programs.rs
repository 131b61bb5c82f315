//! Mistakes in whole programs, constants, calls and sizes.

use super::*;

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
