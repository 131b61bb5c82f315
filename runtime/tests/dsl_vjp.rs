//! Every op's VJP against central finite differences in f64, by executing the emitted
//! programs on the CPU plugin. One test per op family; failures name the op and element.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan_runtime::testing as common;

use common::graph::{TOL, check_vjp, check_vjp_mesh, float_arg, function};
use stackscan::rng::Rng;
use stackscan::{LhsCotangent, Program};

#[test]
fn unary_ops() {
    let client = common::cpu_client(1);
    let mut rng = Rng::new(1);
    let any = [float_arg(&mut rng, &[2, 3], -1.5, 1.5)];
    let pos = [float_arg(&mut rng, &[2, 3], 0.3, 2.0)];
    check_vjp(&client, "negate", &any, TOL, |p| p[0].neg());
    check_vjp(&client, "exponential", &any, TOL, |p| p[0].exp());
    check_vjp(&client, "log", &pos, TOL, |p| p[0].log());
    check_vjp(&client, "log_plus_one", &pos, TOL, |p| p[0].log1p());
    check_vjp(&client, "tanh", &any, TOL, |p| p[0].tanh());
    check_vjp(&client, "logistic", &any, TOL, |p| p[0].sigmoid());
    check_vjp(&client, "sqrt", &pos, TOL, |p| p[0].sqrt());
    check_vjp(&client, "rsqrt", &pos, TOL, |p| p[0].rsqrt());
    check_vjp(&client, "abs", &any, TOL, |p| p[0].abs());
    check_vjp(&client, "sine", &any, TOL, |p| p[0].sin());
    check_vjp(&client, "cosine", &any, TOL, |p| p[0].cos());
    // sign is flat almost everywhere: its VJP is zero, which the check confirms.
    check_vjp(&client, "sign", &any, TOL, |p| p[0].sign()?.add(&p[0]));
}

#[test]
fn binary_ops() {
    let client = common::cpu_client(1);
    let mut rng = Rng::new(2);
    let a = float_arg(&mut rng, &[3, 2], -1.5, 1.5);
    let b = float_arg(&mut rng, &[3, 2], -1.5, 1.5);
    let pa = float_arg(&mut rng, &[3, 2], 0.5, 2.0);
    let pb = float_arg(&mut rng, &[3, 2], 0.5, 2.0);
    let args = [a, b];
    check_vjp(&client, "add", &args, TOL, |p| p[0].add(&p[1]));
    check_vjp(&client, "subtract", &args, TOL, |p| p[0].sub(&p[1]));
    check_vjp(&client, "multiply", &args, TOL, |p| p[0].mul(&p[1]));
    check_vjp(&client, "maximum", &args, TOL, |p| p[0].max(&p[1]));
    check_vjp(&client, "minimum", &args, TOL, |p| p[0].min(&p[1]));
    let pos = [pa, pb];
    check_vjp(&client, "divide", &pos, TOL, |p| p[0].div(&p[1]));
    check_vjp(&client, "power", &pos, TOL, |p| p[0].pow(&p[1]));
    // The same operand twice: cotangents accumulate.
    check_vjp(&client, "multiply_self", &args[..1], TOL, |p| {
        p[0].mul(&p[0])
    });
}

#[test]
fn select_and_convert() {
    let client = common::cpu_client(1);
    let mut rng = Rng::new(3);
    let args = [
        float_arg(&mut rng, &[4], -1.0, 1.0),
        float_arg(&mut rng, &[4], -1.0, 1.0),
    ];
    check_vjp(&client, "select", &args, TOL, |p| {
        p[0].gt(&p[1])?.select(&p[0], &p[1])
    });
    // Through f32 and back: linear, so a large step is exact and hides f32 rounding.
    let loose = common::graph::Tol {
        step: 0.25,
        rtol: 1e-6,
        atol: 1e-6,
    };
    let coarse = [common::graph::Arg {
        ty: stackscan::TensorType::new(stackscan::DType::F64, [3]),
        data: common::graph::Data::F(vec![0.5, -1.0, 2.0]),
    }];
    check_vjp(&client, "convert", &coarse, loose, |p| {
        p[0].convert(stackscan::DType::F32)?
            .scale(3.0)?
            .convert(stackscan::DType::F64)
    });
}

#[test]
fn shape_ops() {
    let client = common::cpu_client(1);
    let mut rng = Rng::new(4);
    let m = [float_arg(&mut rng, &[2, 3], -1.0, 1.0)];
    let col = [float_arg(&mut rng, &[3, 1], -1.0, 1.0)];
    check_vjp(&client, "broadcast_in_dim", &col, TOL, |p| {
        p[0].broadcast_in_dim(&[2, 3, 4], &[1, 2])
    });
    check_vjp(&client, "reshape", &m, TOL, |p| p[0].reshape(&[3, 2]));
    check_vjp(&client, "transpose", &m, TOL, |p| p[0].transpose(&[1, 0]));
    let big = [float_arg(&mut rng, &[5, 6], -1.0, 1.0)];
    check_vjp(&client, "slice", &big, TOL, |p| {
        p[0].slice(&[1, 0], &[5, 5], &[2, 2])
    });
    check_vjp(&client, "dynamic_slice", &big, TOL, |p| {
        let s = p[0].scope();
        let (i, j) = (
            s.scalar(2.0, stackscan::DType::I32)?,
            s.scalar(1.0, stackscan::DType::I32)?,
        );
        p[0].dynamic_slice(&[&i, &j], &[2, 3])
    });
    let upd = [big[0].clone(), float_arg(&mut rng, &[2, 2], -1.0, 1.0)];
    check_vjp(&client, "dynamic_update_slice", &upd, TOL, |p| {
        let s = p[0].scope();
        let (i, j) = (
            s.scalar(3.0, stackscan::DType::I32)?,
            s.scalar(4.0, stackscan::DType::I32)?,
        );
        p[0].dynamic_update_slice(&p[1], &[&i, &j])
    });
    let cat = [m[0].clone(), float_arg(&mut rng, &[2, 2], -1.0, 1.0)];
    check_vjp(&client, "concatenate", &cat, TOL, |p| {
        stackscan::concatenate(&[&p[0], &p[1], &p[0]], 1)
    });
    let padded = [m[0].clone(), float_arg(&mut rng, &[], -1.0, 1.0)];
    check_vjp(&client, "pad", &padded, TOL, |p| {
        p[0].pad(&p[1], &[1, 0], &[0, 2], &[1, 1])
    });
}

#[test]
fn reductions() {
    let client = common::cpu_client(1);
    let mut rng = Rng::new(5);
    let x = [float_arg(&mut rng, &[3, 4], -1.0, 1.0)];
    check_vjp(&client, "reduce_sum", &x, TOL, |p| p[0].sum(&[1]));
    check_vjp(&client, "reduce_sum_all", &x, TOL, |p| {
        p[0].sum(&[0, 1])?.reshape(&[1])
    });
    check_vjp(&client, "reduce_max", &x, TOL, |p| p[0].max_over(&[0]));
    check_vjp(&client, "cumsum", &x, TOL, |p| p[0].cumsum(1, false));
    check_vjp(&client, "cumsum_reverse", &x, TOL, |p| p[0].cumsum(0, true));
}

#[test]
fn products_and_solves() {
    let client = common::cpu_client(1);
    let mut rng = Rng::new(6);
    let ab = [
        float_arg(&mut rng, &[2, 3, 4], -1.0, 1.0),
        float_arg(&mut rng, &[2, 4, 5], -1.0, 1.0),
    ];
    check_vjp(&client, "matmul_batched", &ab, TOL, |p| p[0].matmul(&p[1]));
    // Batch and contracting dimensions in unusual places: rhs [5, 2, 4] with batch 1, contract 2.
    let odd = [
        float_arg(&mut rng, &[4, 2, 3], -1.0, 1.0),
        float_arg(&mut rng, &[5, 2, 4], -1.0, 1.0),
    ];
    check_vjp(&client, "dot_general", &odd, TOL, |p| {
        p[0].dot_general(
            &p[1],
            stackscan::DotDims {
                lhs_batch: vec![1],
                rhs_batch: vec![1],
                lhs_contract: vec![0],
                rhs_contract: vec![2],
            },
        )
    });
    // Both ways of forming the left cotangent, on a batched product and on two contracting
    // dimensions paired out of order (lhs [4, 2, 3, 6] · rhs [6, 5, 2, 4], batch 1 ↔ 2,
    // contract (0, 3) ↔ (3, 0)).
    let two = [
        float_arg(&mut rng, &[4, 2, 3, 6], -1.0, 1.0),
        float_arg(&mut rng, &[6, 5, 2, 4], -1.0, 1.0),
    ];
    let two_dims = stackscan::DotDims {
        lhs_batch: vec![1],
        rhs_batch: vec![2],
        lhs_contract: vec![0, 3],
        rhs_contract: vec![3, 0],
    };
    for mode in [LhsCotangent::InPlace, LhsCotangent::TransposedRhs] {
        check_vjp(&client, &format!("matmul_{mode:?}"), &ab, TOL, |p| {
            p[0].matmul_with(&p[1], mode)
        });
        check_vjp(&client, &format!("dot_two_{mode:?}"), &two, TOL, |p| {
            p[0].dot_general_with(&p[1], two_dims.clone(), mode)
        });
    }
    for (name, left_side, lower, unit_diagonal, transpose_a) in [
        ("triangular_solve_left_lower", true, true, false, false),
        ("triangular_solve_left_upper_t", true, false, false, true),
        (
            "triangular_solve_right_lower_unit",
            false,
            true,
            true,
            false,
        ),
        (
            "triangular_solve_right_upper_t_unit",
            false,
            false,
            true,
            true,
        ),
    ] {
        // A well-conditioned triangle: a dominant diagonal.
        let mut a = float_arg(&mut rng, &[2, 3, 3], -0.5, 0.5);
        if let common::graph::Data::F(v) = &mut a.data {
            for b in 0..2 {
                for i in 0..3 {
                    v[b * 9 + i * 3 + i] += 3.0;
                }
            }
        }
        let b = if left_side {
            float_arg(&mut rng, &[2, 3, 2], -1.0, 1.0)
        } else {
            float_arg(&mut rng, &[2, 2, 3], -1.0, 1.0)
        };
        let opts = stackscan::TriangularSolve {
            left_side,
            lower,
            unit_diagonal,
            transpose_a,
        };
        check_vjp(&client, name, &[a, b], TOL, |p| {
            p[0].triangular_solve(&p[1], opts)
        });
    }
}

/// What each [`LhsCotangent`] emits for a batched `[2, 3, 4] · [2, 4, 5]`: in place, no
/// transpose of the right operand; transposed, exactly one, to `[2, 5, 4]`, which the
/// cotangent's product then reads.
#[test]
fn lhs_cotangent_modes_in_the_emitted_backward() {
    let mut rng = Rng::new(7);
    let ab = [
        float_arg(&mut rng, &[2, 3, 4], -1.0, 1.0),
        float_arg(&mut rng, &[2, 4, 5], -1.0, 1.0),
    ];
    let copy = "(tensor<2x4x5xf64>) -> tensor<2x5x4xf64>";
    for (mode, copies) in [(LhsCotangent::InPlace, 0), (LhsCotangent::TransposedRhs, 1)] {
        let f = function("mm", &ab, |p| Ok(vec![p[0].matmul_with(&p[1], mode)?]));
        let text = Program::new(stackscan::vjp(&f).unwrap()).emit().unwrap();
        let transposes: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("stablehlo.transpose") && l.contains(copy))
            .collect();
        assert_eq!(
            transposes.len(),
            copies,
            "{mode:?}: {transposes:#?}\n{text}"
        );
        if let Some(line) = transposes.first() {
            let name = line.trim().split(' ').next().unwrap();
            let read = text
                .lines()
                .filter(|l| l.contains("stablehlo.dot_general") && l.contains(name))
                .count();
            assert_eq!(
                read, 1,
                "{mode:?}: the copy {name} feeds no product\n{text}"
            );
        }
    }
}

#[test]
fn indexing() {
    let client = common::cpu_client(1);
    let mut rng = Rng::new(7);
    let table = float_arg(&mut rng, &[5, 3], -1.0, 1.0);
    let idx = common::graph::int_arg(&[2, 2], vec![4, 0, 4, 2]);
    check_vjp(&client, "take", &[table.clone(), idx.clone()], TOL, |p| {
        p[0].take(&p[1], 0)
    });
    check_vjp(
        &client,
        "take_axis1",
        &[table.clone(), common::graph::int_arg(&[3], vec![2, 2, 0])],
        TOL,
        |p| p[0].take(&p[1], 1),
    );
    let upd = float_arg(&mut rng, &[2, 2, 3], -1.0, 1.0);
    check_vjp(
        &client,
        "scatter_add",
        &[table.clone(), idx, upd],
        TOL,
        |p| p[0].scatter_add(&p[1], &p[2], 0),
    );
    // Distinct values so the ranking is stable under the finite-difference step.
    let scores = common::graph::Arg {
        ty: stackscan::TensorType::new(stackscan::DType::F64, [2, 5]),
        data: common::graph::Data::F(vec![0.3, -0.2, 0.9, 0.1, 0.5, -0.7, 0.8, 0.2, -0.1, 0.4]),
    };
    check_vjp(&client, "top_k", &[scores], TOL, |p| Ok(p[0].top_k(2)?.0));
}

#[test]
fn barrier_passes_cotangents_through() {
    let client = common::cpu_client(1);
    let mut rng = Rng::new(8);
    let args = [
        float_arg(&mut rng, &[3], -1.0, 1.0),
        float_arg(&mut rng, &[3], -1.0, 1.0),
    ];
    check_vjp(&client, "optimization_barrier", &args, TOL, |p| {
        let out = stackscan::optimization_barrier(&[&p[0], &p[1]])?;
        out[0].mul(&out[1])
    });
}

/// One RNN-like step: `h' = tanh(h·W + x)`, `y = h' · c` with an integer step counter carried
/// along (no cotangent) to exercise mixed carries.
fn rnn_step(
    h: &stackscan::Tensor,
    x: &stackscan::Tensor,
    w: &stackscan::Tensor,
) -> stackscan::Result<(stackscan::Tensor, stackscan::Tensor)> {
    let hw = h.reshape(&[1, 3])?.matmul(w)?.reshape(&[3])?;
    let h2 = hw.add(x)?.tanh()?;
    let y = h2.mul(&h.sin()?)?;
    Ok((h2, y))
}

#[test]
fn scan_matches_unrolled_and_finite_differences() {
    let client = common::cpu_client(1);
    let mut rng = Rng::new(9);
    let args = [
        float_arg(&mut rng, &[3], -1.0, 1.0),
        float_arg(&mut rng, &[4, 3], -1.0, 1.0),
        float_arg(&mut rng, &[3, 3], -0.8, 0.8),
    ];
    for reverse in [false, true] {
        let scanned = |p: &[stackscan::Tensor]| -> stackscan::Result<stackscan::Tensor> {
            let s = p[0].scope();
            let steps = s.scalar(0.0, stackscan::DType::I32)?;
            let (carry, ys) = s.scan(
                &[p[0].clone(), steps],
                &[p[1].clone()],
                4,
                reverse,
                |bs, c, x| {
                    let (h, y) = rnn_step(&c[0], &x[0], &p[2])?;
                    let n = c[1].add(&bs.scalar(1.0, stackscan::DType::I32)?)?;
                    Ok((vec![h, n], vec![y]))
                },
            )?;
            let four = carry[1]
                .convert(stackscan::DType::F64)?
                .broadcast_to(&[3])?;
            let h = carry[0].mul(&four)?;
            stackscan::concatenate(&[&h, &ys[0].reshape(&[12])?], 0)
        };
        let unrolled = |p: &[stackscan::Tensor]| -> stackscan::Result<stackscan::Tensor> {
            let mut h = p[0].clone();
            let mut ys = vec![None, None, None, None];
            let order: Vec<i64> = if reverse {
                vec![3, 2, 1, 0]
            } else {
                vec![0, 1, 2, 3]
            };
            for i in order {
                let x = p[1].slice_axis(0, i, i + 1)?.reshape(&[3])?;
                let (h2, y) = rnn_step(&h, &x, &p[2])?;
                ys[i as usize] = Some(y);
                h = h2;
            }
            let mut parts = vec![h.scale(4.0)?];
            parts.extend(ys.into_iter().flatten());
            let refs: Vec<&stackscan::Tensor> = parts.iter().collect();
            stackscan::concatenate(&refs, 0)
        };
        let name = if reverse { "scan_reverse" } else { "scan" };
        check_vjp(&client, name, &args, TOL, scanned);

        // Same values and gradients as the unrolled computation.
        let run_both =
            |build: &dyn Fn(&[stackscan::Tensor]) -> stackscan::Result<stackscan::Tensor>| {
                let f = common::graph::function(name, &args, |p| Ok(vec![build(p)?]));
                let g = stackscan::value_and_vjp(&f, &[true, true, true]).unwrap();
                let mut a = args.to_vec();
                a.push(common::graph::Arg {
                    ty: f.result_types()[0].clone(),
                    data: common::graph::Data::F(
                        (0..15).map(|i| 0.1 * f64::from(i) - 0.7).collect(),
                    ),
                });
                common::graph::Compiled::new(&client, &g).run(&a)
            };
        let s = run_both(&scanned);
        let u = run_both(&unrolled);
        for (k, (a, b)) in s.iter().zip(&u).enumerate() {
            for (x, y) in a.iter().zip(b) {
                assert!(
                    (x - y).abs() <= 1e-12 * (1.0 + y.abs()),
                    "{name} output {k}: {x} vs unrolled {y}"
                );
            }
        }
    }
}

#[test]
fn nested_scans() {
    let client = common::cpu_client(1);
    let mut rng = Rng::new(10);
    let args = [
        float_arg(&mut rng, &[2], -1.0, 1.0),
        float_arg(&mut rng, &[3, 2, 2], -1.0, 1.0),
    ];
    check_vjp(&client, "nested_scan", &args, TOL, |p| {
        let s = p[0].scope();
        let (c, _) = s.scan(&[p[0].clone()], &[p[1].clone()], 3, false, |bs, c, x| {
            let (inner, _) = bs.scan(&[c[0].clone()], &[x[0].clone()], 2, true, |_, c2, x2| {
                Ok((vec![c2[0].mul(&x2[0])?.sin()?.add(&c2[0])?], vec![]))
            })?;
            Ok((inner, vec![]))
        })?;
        Ok(c[0].clone())
    });
}

#[test]
fn collectives_on_four_devices() {
    let client = common::cpu_client(4);
    let mut rng = Rng::new(11);
    let per_device = |rng: &mut Rng, dims: &[i64]| -> Vec<Vec<common::graph::Arg>> {
        (0..4)
            .map(|_| vec![float_arg(rng, dims, -1.0, 1.0)])
            .collect()
    };
    // A nonlinearity before and after each collective so the check sees real mixing.
    let args = per_device(&mut rng, &[2, 3]);
    check_vjp_mesh(&client, "all_gather", 4, &args, TOL, |p, ax| {
        p[0].sin()?.all_gather(0, ax)?.square()
    });
    let args = per_device(&mut rng, &[4, 3]);
    check_vjp_mesh(&client, "reduce_scatter", 4, &args, TOL, |p, ax| {
        p[0].sin()?.reduce_scatter(0, ax)?.square()
    });
    let args = per_device(&mut rng, &[2, 3]);
    check_vjp_mesh(&client, "psum", 4, &args, TOL, |p, ax| {
        p[0].sin()?.psum(ax)?.square()
    });
    let args = per_device(&mut rng, &[4, 2]);
    check_vjp_mesh(&client, "all_to_all", 4, &args, TOL, |p, ax| {
        p[0].sin()?.all_to_all(0, 1, ax)?.square()
    });
    // The device index only selects data; it carries no gradient.
    let args = per_device(&mut rng, &[2]);
    check_vjp_mesh(&client, "axis_index", 4, &args, TOL, |p, ax| {
        let i = p[0]
            .scope()
            .axis_index(ax)?
            .convert(stackscan::DType::F64)?;
        p[0].mul(&i.add_scalar(1.0)?.broadcast_to(&[2])?)
    });
}
