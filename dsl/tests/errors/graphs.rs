//! Mistakes in loops, collectives, scopes and differentiation.

use super::*;

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
fn case_with_a_bad_index_or_disagreeing_branches_is_invalid() {
    let s = Scope::new("f");
    let x = s.param(f32s(&[2]));
    let index = s.scalar(1.0, DType::I32).unwrap();
    // Branches that return different types.
    let r = s.case_with_attributes(
        &index,
        vec![
            Box::new(|_| Ok(vec![x.clone()])),
            Box::new(|_| Ok(vec![x.sum(&[0])?])),
        ],
        &[],
    );
    let e = err_naming(r, "case");
    assert!(e.to_string().contains("branch 1"), "{e}");
    // An index that is not an i32 scalar, and no branch at all.
    let r = s.case_with_attributes(&x, vec![Box::new(|_| Ok(vec![x.clone()]))], &[]);
    assert!(err_naming(r, "case").to_string().contains("index"));
    let r = s.case_with_attributes(&index, vec![], &[]);
    assert!(matches!(err_naming(r, "case"), Error::InvalidOp { .. }));
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
