//! Composites (softmax, RMSNorm, cross-entropy, RoPE, …) against hand-derived values, and their
//! gradients against finite differences.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan_runtime::testing as common;

use common::graph::{Arg, Compiled, Data, TOL, check_vjp, float_arg, function, int_arg};
use stackscan::rng::Rng;
use stackscan::{DType, TensorType, nn};

fn f64_arg(dims: &[i64], v: Vec<f64>) -> Arg {
    Arg {
        ty: TensorType::new(DType::F64, dims),
        data: Data::F(v),
    }
}

fn run1(
    args: &[Arg],
    build: impl FnOnce(&[stackscan::Tensor]) -> stackscan::Result<stackscan::Tensor>,
) -> Vec<f64> {
    let client = common::cpu_client(1);
    let f = function("composite", args, |p| Ok(vec![build(p)?]));
    Compiled::new(&client, &f).run(args).remove(0)
}

fn close(a: &[f64], b: &[f64], tol: f64) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= tol, "{a:?} vs {b:?}");
    }
}

#[test]
fn softmax_rows_sum_to_one_and_match_the_formula() {
    let x = f64_arg(&[2, 3], vec![1.0, 2.0, 3.0, -5.0, 0.0, 100.0]);
    let p = run1(&[x], |p| nn::softmax(&p[0], 1));
    let z: f64 = [1.0f64, 2.0, 3.0].iter().map(|v| v.exp()).sum();
    close(
        &p[..3],
        &[1f64.exp() / z, 2f64.exp() / z, 3f64.exp() / z],
        1e-15,
    );
    assert!((p[..3].iter().sum::<f64>() - 1.0).abs() < 1e-15);
    assert!(
        (p[3..].iter().sum::<f64>() - 1.0).abs() < 1e-15,
        "large logits stay finite: {p:?}"
    );
    let lp = run1(&[f64_arg(&[1, 3], vec![1.0, 2.0, 3.0])], |p| {
        nn::log_softmax(&p[0], 1)
    });
    close(&lp, &[1.0 - z.ln(), 2.0 - z.ln(), 3.0 - z.ln()], 1e-14);
}

#[test]
fn rms_norm_of_a_known_vector() {
    // mean(3², 4²) = 12.5, so x / √12.5 · [1, 2].
    let out = run1(
        &[f64_arg(&[2], vec![3.0, 4.0]), f64_arg(&[2], vec![1.0, 2.0])],
        |p| nn::rms_norm(&p[0], &p[1], 0.0),
    );
    let r = 12.5f64.sqrt();
    close(&out, &[3.0 / r, 8.0 / r], 1e-15);
}

#[test]
fn cross_entropy_of_one_hot_and_uniform_logits() {
    // Uniform logits over 4 classes: ln 4 whatever the label.
    let uniform = run1(
        &[f64_arg(&[1, 4], vec![0.0; 4]), int_arg(&[1], vec![1])],
        |p| nn::cross_entropy(&p[0], &p[1])?.reshape(&[1]),
    );
    close(&uniform, &[4f64.ln()], 1e-15);
    // A confident one-hot logit: −log softmax = ln(1 + 2e^-10); averaged with a wrong row.
    let ce = run1(
        &[
            f64_arg(&[2, 3], vec![10.0, 0.0, 0.0, 10.0, 0.0, 0.0]),
            int_arg(&[2], vec![0, 1]),
        ],
        |p| nn::cross_entropy(&p[0], &p[1])?.reshape(&[1]),
    );
    let right = (1.0 + 2.0 * (-10f64).exp()).ln();
    let wrong = 10.0 + (2.0 + (10f64).exp()).ln() - 10.0;
    close(&ce, &[(right + wrong) / 2.0], 1e-12);
}

#[test]
fn rope_rotates_a_unit_vector_by_position() {
    // x: [T=3, H=1, D=2], the unit vector e₀ at every position; angle = position · θ⁰.
    let out = run1(
        &[f64_arg(&[3, 1, 2], vec![1.0, 0.0, 1.0, 0.0, 1.0, 0.0])],
        |p| nn::rope(&p[0], 10000.0, 2),
    );
    close(
        &out,
        &[1.0, 0.0, 1f64.cos(), 1f64.sin(), 2f64.cos(), 2f64.sin()],
        1e-12,
    );
    // Partial RoPE leaves the tail alone.
    let out = run1(
        &[f64_arg(
            &[2, 1, 4],
            vec![1.0, 0.0, 5.0, 6.0, 1.0, 0.0, 5.0, 6.0],
        )],
        |p| nn::rope(&p[0], 10000.0, 2),
    );
    close(
        &out,
        &[1.0, 0.0, 5.0, 6.0, 1f64.cos(), 1f64.sin(), 5.0, 6.0],
        1e-12,
    );
}

#[test]
fn causal_mask_zeroes_future_positions() {
    let p = run1(&[f64_arg(&[3, 3], vec![0.0; 9])], |p| {
        nn::softmax(&nn::causal_mask(&p[0])?, 1)
    });
    close(
        &p,
        &[
            1.0,
            0.0,
            0.0,
            0.5,
            0.5,
            0.0,
            1.0 / 3.0,
            1.0 / 3.0,
            1.0 / 3.0,
        ],
        1e-15,
    );
}

#[test]
fn one_hot_and_silu_values() {
    let hot = run1(&[int_arg(&[2], vec![2, 0])], |p| {
        p[0].one_hot(3, DType::F64)
    });
    close(&hot, &[0.0, 0.0, 1.0, 1.0, 0.0, 0.0], 0.0);
    let s = run1(&[f64_arg(&[2], vec![0.0, 2.0])], |p| nn::silu(&p[0]));
    close(&s, &[0.0, 2.0 / (1.0 + (-2f64).exp())], 1e-15);
    let sp = run1(&[f64_arg(&[3], vec![0.0, 50.0, -50.0])], |p| {
        nn::softplus(&p[0])
    });
    close(&sp, &[2f64.ln(), 50.0, (-50f64).exp()], 1e-15);
}

#[test]
fn composite_gradients() {
    let client = common::cpu_client(1);
    let mut rng = Rng::new(12);
    let x = [float_arg(&mut rng, &[2, 4], -2.0, 2.0)];
    check_vjp(&client, "softmax", &x, TOL, |p| nn::softmax(&p[0], 1));
    // Softmax is one op with its own VJP (from its result alone): every axis of a rank-3
    // value, so the sum's broadcast back is checked along each.
    let x3 = [float_arg(&mut rng, &[2, 3, 4], -2.0, 2.0)];
    for axis in 0..3 {
        check_vjp(&client, &format!("softmax_axis_{axis}"), &x3, TOL, |p| {
            nn::softmax(&p[0], axis)
        });
    }
    check_vjp(&client, "log_softmax", &x, TOL, |p| {
        nn::log_softmax(&p[0], 0)
    });
    check_vjp(&client, "silu", &x, TOL, |p| nn::silu(&p[0]));
    check_vjp(&client, "softplus", &x, TOL, |p| nn::softplus(&p[0]));
    check_vjp(&client, "l2_normalize", &x, TOL, |p| {
        nn::l2_normalize(&p[0], 1, 1e-6)
    });
    let xw = [x[0].clone(), float_arg(&mut rng, &[4], 0.5, 1.5)];
    check_vjp(&client, "rms_norm", &xw, TOL, |p| {
        nn::rms_norm(&p[0], &p[1], 1e-6)
    });
    let q = [float_arg(&mut rng, &[3, 2, 4], -1.0, 1.0)];
    check_vjp(&client, "rope", &q, TOL, |p| nn::rope(&p[0], 500.0, 4));
    check_vjp(&client, "rope_partial", &q, TOL, |p| {
        nn::rope(&p[0], 500.0, 2)
    });
    let s = [float_arg(&mut rng, &[3, 3], -1.0, 1.0)];
    check_vjp(&client, "causal_softmax", &s, TOL, |p| {
        nn::softmax(&nn::causal_mask(&p[0])?, 1)
    });
    let ce = [
        float_arg(&mut rng, &[3, 5], -2.0, 2.0),
        int_arg(&[3], vec![4, 0, 2]),
    ];
    check_vjp(&client, "cross_entropy", &ce, TOL, |p| {
        nn::cross_entropy(&p[0], &p[1])?.reshape(&[1])
    });
}

#[test]
fn while_loop_with_captures_in_condition_and_body() {
    // Count up by `step` until above `limit`; both are outer values the regions capture.
    let out = run1(&[f64_arg(&[], vec![0.75]), f64_arg(&[], vec![5.0])], |p| {
        let s = p[0].scope();
        let start = s.scalar(0.0, DType::F64)?;
        let r = s.while_loop(
            &[start],
            |_, c| c[0].lt(&p[1]),
            |_, c| Ok(vec![c[0].add(&p[0])?]),
            &[("skip-simplify-while-loops_trip-count-one", "true")],
        )?;
        r[0].reshape(&[1])
    });
    close(&out, &[5.25], 0.0);
}

/// A step kept as a unit (a scan of one trip that asks XLA to keep it) with a stacked output
/// is lowered to a `case` whose results are rebuilt around it: a carry it returns as it is,
/// a row it writes into a carried stack, a new carry and the stacked output all come out as
/// the loop's would (hand-derived values).
#[test]
fn a_kept_single_step_returns_what_its_loop_would() {
    let h0 = [0.5, -1.0, 2.0, 0.0];
    let t = [7.0, 8.0, 9.0, 10.0];
    let stack: Vec<f64> = (0..12).map(f64::from).collect();
    let w = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, -1.0, 2.0];
    let args = [
        f64_arg(&[4], h0.to_vec()),
        f64_arg(&[4], t.to_vec()),
        f64_arg(&[3, 4], stack.clone()),
        f64_arg(&[4, 2], w.to_vec()),
    ];
    let f = function("kept_step", &args, |p| {
        let s = p[0].scope();
        let attributes = [("skip-simplify-while-loops_trip-count-one", "true")];
        let (mut carry, ys) =
            s.scan_with_attributes(&p[..3], &[], 1, false, &attributes, |bs, c, _| {
                let h = c[0].tanh()?;
                let row = bs.scalar(1.0, DType::I32)?;
                let zero = bs.scalar(0.0, DType::I32)?;
                let stack = c[2].dynamic_update_slice(&h.expand_dims(0)?, &[&row, &zero])?;
                let y = h.reshape(&[1, 4])?.matmul(&p[3])?.reshape(&[2])?;
                Ok((vec![h, c[1].clone(), stack], vec![y]))
            })?;
        carry.extend(ys);
        Ok(carry)
    });
    let text = stackscan::Program::new(f.clone()).emit().unwrap();
    // The step is a case; the row it writes is written after it, in a loop of its own.
    assert_eq!(text.matches("\"stablehlo.case\"").count(), 1, "{text}");
    assert_eq!(text.matches("\"stablehlo.while\"").count(), 1, "{text}");
    let out = Compiled::new(&common::cpu_client(1), &f).run(&args);
    let h: Vec<f64> = h0.iter().map(|v: &f64| v.tanh()).collect();
    close(&out[0], &h, 1e-15);
    close(&out[1], &t, 0.0);
    let mut written = stack;
    written[4..8].copy_from_slice(&h);
    close(&out[2], &written, 1e-15);
    let y = [h[0] + h[2] - h[3], h[1] + h[2] + 2.0 * h[3]];
    close(&out[3], &y, 1e-15);
}

/// `case` runs the branch its index names, and the last for an index out of range.
#[test]
fn case_runs_the_branch_its_index_names() {
    let x = f64_arg(&[2], vec![3.0, -4.0]);
    for (index, expected) in [
        (0, [6.0, -8.0]),
        (1, [9.0, 16.0]),
        (2, [4.0, -3.0]),
        (7, [4.0, -3.0]),
        (-1, [4.0, -3.0]),
    ] {
        let args = [x.clone(), int_arg(&[], vec![index])];
        let out = run1(&args, |p| {
            let s = p[0].scope();
            let twice: stackscan::Branch<'_> = Box::new(|_| Ok(vec![p[0].scale(2.0)?]));
            let squared: stackscan::Branch<'_> = Box::new(|_| Ok(vec![p[0].mul(&p[0])?]));
            let plus_one: stackscan::Branch<'_> = Box::new(|bs| {
                Ok(vec![
                    p[0].add(&bs.scalar(1.0, DType::F64)?.broadcast_to(&[2])?)?,
                ])
            });
            let out = s.case_with_attributes(&p[1], vec![twice, squared, plus_one], &[])?;
            Ok(out[0].clone())
        });
        close(&out, &expected, 0.0);
    }
}

#[test]
fn bf16_programs_run() {
    // Values exactly representable in bf16.
    let client = common::cpu_client(1);
    let args = [Arg {
        ty: TensorType::new(DType::BF16, [4]),
        data: Data::F(vec![0.5, -1.0, 2.0, 0.25]),
    }];
    let f = function("bf16", &args, |p| {
        Ok(vec![p[0].add(&p[0])?.convert(DType::F32)?])
    });
    let mesh = stackscan_runtime::Mesh::new(&client, "x", 1).unwrap();
    let exe = client
        .compile_program(&stackscan::Program::new(f), &mesh)
        .unwrap();
    let bf = |v: f32| half::bf16::from_f32(v);
    let x = client
        .buffer(
            &[bf(0.5), bf(-1.0), bf(2.0), bf(0.25)],
            &[4],
            &client.devices()[0],
        )
        .unwrap();
    let out = exe.execute(&[[&x]]).unwrap();
    assert_eq!(
        out[0][0].to_host::<f32>().unwrap(),
        vec![1.0, -2.0, 4.0, 0.5]
    );
    assert_eq!(args[0].ty.dtype, DType::BF16);
}

#[test]
fn constants_beyond_f32_range_become_infinities() {
    // -1e39 is finite in f64 but −∞ in f32, as a splat and inside a dense constant alike.
    let client = common::cpu_client(1);
    let s = stackscan::Scope::new("neg_inf");
    let splat = s.full(-1e39, TensorType::new(DType::F32, [2])).unwrap();
    let dense = s.from_f64s(&[-1e39, 5.0], DType::F32, &[2]).unwrap();
    let f = s.finish(&[splat, dense]).unwrap();
    let out = Compiled::new(&client, &f).run(&[]);
    assert_eq!(out[0], vec![f64::NEG_INFINITY; 2]);
    assert_eq!(out[1], vec![f64::NEG_INFINITY, 5.0]);
}

#[test]
fn causal_attention_of_a_hand_derived_case() {
    // One sequence of two tokens, two query heads of width 1 sharing one key/value head with
    // keys 0 and ln 3 and values 2 and 4; head 0's queries are 0, head 1's are 1.
    let q = f64_arg(&[1, 2, 2, 1], vec![0.0, 1.0, 0.0, 1.0]);
    let k = f64_arg(&[1, 2, 1, 1], vec![0.0, 3f64.ln()]);
    let v = f64_arg(&[1, 2, 1, 1], vec![2.0, 4.0]);
    let y = run1(&[q, k, v], |p| {
        let (k, v) = (nn::repeat_kv(&p[1], 2)?, nn::repeat_kv(&p[2], 2)?);
        nn::causal_attention(&p[0], &k, &v, 1.0)
    });
    // Token 0: both heads see only v0. Token 1, head 0: scores 0·0 = 0·ln3 = 0, weights ½, ½;
    // head 1: scores 0 and ln 3, weights ¼ and ¾, so 2/4 + 3·4/4 = 3.5.
    close(&y, &[2.0, 2.0, 3.0, 3.5], 1e-14);
}

/// Blockwise attention (context parallelism's, `nn::context`) is causal attention: over a
/// whole sequence of 6 in blocks of 2 and 3, and for the last 4 queries of it starting at
/// position 2 (a context-parallel piece) against all 6 keys; its gradient agrees with finite
/// differences, queries, keys and values alike.
#[test]
fn blocked_attention_is_causal_attention() {
    let client = common::cpu_client(1);
    let mut rng = Rng::new(21);
    let qkv: Vec<Arg> = (0..3)
        .map(|_| float_arg(&mut rng, &[2, 6, 2, 3], -1.5, 1.5))
        .collect();
    let start = |p: &stackscan::Tensor, at: f64| p.scope().scalar(at, DType::I32);
    let whole = run1(&qkv, |p| nn::causal_attention(&p[0], &p[1], &p[2], 0.7));
    for block in [2, 3, 6] {
        let blocked = run1(&qkv, |p| {
            let at = start(&p[0], 0.0)?;
            nn::context::blocked_causal_attention(&p[0], &p[1], &p[2], 0.7, &at, block)
        });
        close(&blocked, &whole, 1e-13);
    }
    // Rows 2..6 of each sequence: [2, 4, 6] of the output.
    let piece = run1(&qkv, |p| {
        let q = p[0].slice_axis(1, 2, 6)?;
        let at = start(&p[0], 2.0)?;
        nn::context::blocked_causal_attention(&q, &p[1], &p[2], 0.7, &at, 2)
    });
    let expected: Vec<f64> = (0..2)
        .flat_map(|b| whole[(b * 6 + 2) * 6..(b + 1) * 6 * 6].to_vec())
        .collect();
    close(&piece, &expected, 1e-13);
    check_vjp(&client, "blocked_attention", &qkv, TOL, |p| {
        let at = start(&p[0], 0.0)?;
        nn::context::blocked_causal_attention(&p[0], &p[1], &p[2], 0.7, &at, 2)
    });
}

#[test]
fn attention_shapes_that_do_not_fit_are_typed_errors() {
    let s = stackscan::Scope::new("bad");
    let q = s.param(TensorType::new(DType::F32, [1, 2, 4, 8]));
    let kv = s.param(TensorType::new(DType::F32, [1, 2, 3, 8]));
    let err = nn::repeat_kv(&kv, 4).unwrap_err().to_string();
    assert!(err.contains("4 query heads do not split over 3"), "{err}");
    let short = s.param(TensorType::new(DType::F32, [1, 2, 4, 7]));
    let err = nn::causal_attention(&q, &short, &q, 1.0)
        .unwrap_err()
        .to_string();
    assert!(err.contains("expected k [1, 2, 4, 8]"), "{err}");
}
