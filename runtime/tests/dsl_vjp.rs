//! Every op's VJP against central finite differences in f64, by executing the emitted
//! programs on the CPU plugin. One test per op family; failures name the op and element.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

mod common;

use common::graph::{Rng, TOL, check_vjp, float_arg};

#[test]
fn unary_ops() {
    let client = common::cpu_client(1);
    let mut rng = Rng::new(1);
    let any = [float_arg(&mut rng, &[2, 3], -1.5, 1.5)];
    let pos = [float_arg(&mut rng, &[2, 3], 0.3, 2.0)];
    check_vjp(&client, "negate", &any, TOL, |p| p[0].neg());
    check_vjp(&client, "exponential", &any, TOL, |p| p[0].exp());
    check_vjp(&client, "log", &pos, TOL, |p| p[0].log());
    check_vjp(&client, "log_plus_one", &pos, TOL, |p| {
        p[0].log1p()
    });
    check_vjp(&client, "tanh", &any, TOL, |p| p[0].tanh());
    check_vjp(&client, "logistic", &any, TOL, |p| p[0].sigmoid());
    check_vjp(&client, "sqrt", &pos, TOL, |p| p[0].sqrt());
    check_vjp(&client, "rsqrt", &pos, TOL, |p| p[0].rsqrt());
    check_vjp(&client, "abs", &any, TOL, |p| p[0].abs());
    check_vjp(&client, "sine", &any, TOL, |p| p[0].sin());
    check_vjp(&client, "cosine", &any, TOL, |p| p[0].cos());
    // sign is flat almost everywhere: its VJP is zero, which the check confirms.
    check_vjp(&client, "sign", &any, TOL, |p| {
        p[0].sign()?.add(&p[0])
    });
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
