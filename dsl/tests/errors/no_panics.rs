//! Many more malformed inputs through the front end, differentiation and emission: each gives an `Err`, never a panic.

use super::*;

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
