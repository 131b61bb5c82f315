//! The MoE routers on the CPU plugin: decisions and weights against values derived by hand
//! (in the comments), deterministic ties, config errors, and the weights' VJP against f64
//! central differences.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan::{DType, Error, Scope, TensorType};
use stackscan_models::moe::{RouterConfig, RouterKind, route};
use stackscan_runtime::testing as common;

use common::graph::{Arg, Compiled, Data, TOL, check_vjp, float_arg, function};
use stackscan::rng::Rng;

fn f64_arg(dims: &[i64], values: Vec<f64>) -> Arg {
    Arg {
        ty: TensorType::new(DType::F64, dims),
        data: Data::F(values),
    }
}

/// `logit(p)`, so that `sigmoid` gives back `p`.
fn logit(p: f64) -> f64 {
    (p / (1.0 - p)).ln()
}

/// Runs the router; returns (weights, experts) row-major.
fn run(cfg: &RouterConfig, logits: Arg, bias: Option<Arg>) -> (Vec<f64>, Vec<f64>) {
    let client = common::cpu_client(1);
    let mut args = vec![logits];
    args.extend(bias);
    let f = function("router", &args, |p| {
        let r = route(cfg, &p[0], p.get(1))?;
        Ok(vec![r.weights, r.experts])
    });
    let out = Compiled::new(&client, &f).run(&args);
    (out[0].clone(), out[1].clone())
}

fn assert_close(what: &str, actual: &[f64], expected: &[f64]) {
    assert_eq!(actual.len(), expected.len(), "{what}: length");
    for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
        assert!((a - e).abs() <= 1e-12, "{what}[{i}]: {a} vs {e}");
    }
}

const DEEPSEEK: RouterConfig = RouterConfig {
    experts: 8,
    top_k: 2,
    kind: RouterKind::SigmoidGrouped {
        groups: 4,
        top_groups: 2,
        scaling: 2.5,
    },
};

#[test]
fn softmax_router_renormalises_the_top_k() {
    let cfg = RouterConfig {
        experts: 4,
        top_k: 2,
        kind: RouterKind::Softmax,
    };
    // Row 0: logits ln 1 … ln 4 give probabilities .1 .2 .3 .4; the top two are experts 3
    // and 2, renormalised .4/.7 and .3/.7. Row 1: equal logits tie everywhere, so the
    // lowest indices win, with equal weights.
    let logits = f64_arg(
        &[2, 4],
        vec![0.0, 2f64.ln(), 3f64.ln(), 4f64.ln(), 0.7, 0.7, 0.7, 0.7],
    );
    let (w, e) = run(&cfg, logits, None);
    assert_eq!(e, [3.0, 2.0, 0.0, 1.0]);
    assert_close("weights", &w, &[4.0 / 7.0, 3.0 / 7.0, 0.5, 0.5]);
}

#[test]
fn deepseek_router_limits_groups_selects_on_bias_and_weights_unbiased() {
    // Token 0, scores s (groups of two):  [.9 .1 | .2 .3 | .8 .7 | .4 .05]
    // bias +.65 on expert 2, so biased:   [.9 .1 | .85 .3 | .8 .7 | .4 .05]
    // group scores (sum of the two best): 1.0, 1.15, 1.5, .45 → groups 2 and 1.
    // Candidates e2 .85, e3 .3, e4 .8, e5 .7 → experts 2, 4; expert 0 (the best score)
    // is outside the chosen groups. Weights from the unbiased scores .2 and .8, which sum
    // to 1, times 2.5: 0.5 and 2.0.
    // Token 1: all scores .5 (+ the bias on expert 2 → .5 + .65 = 1.15): groups score
    // 1.0, 1.65, 1.0, 1.0 → group 1, then group 0 (tie with 2 and 3, lowest index wins);
    // candidates e0 .5, e1 .5, e2 1.15, e3 .5 → expert 2, then expert 0 (tie, lowest).
    // Unbiased weights .5 and .5, renormalised and scaled: 1.25 each.
    let s0 = [0.9, 0.1, 0.2, 0.3, 0.8, 0.7, 0.4, 0.05];
    let mut logits: Vec<f64> = s0.iter().map(|&p| logit(p)).collect();
    logits.extend([0.0; 8]);
    let mut bias = vec![0.0; 8];
    bias[2] = 0.65;
    let (w, e) = run(
        &DEEPSEEK,
        f64_arg(&[2, 8], logits),
        Some(f64_arg(&[8], bias)),
    );
    assert_eq!(e, [2.0, 4.0, 2.0, 0.0]);
    assert_close("weights", &w, &[0.5, 2.0, 1.25, 1.25]);
}

#[test]
fn deepseek_router_without_bias_takes_the_best_groups() {
    // Scores [.9 .1 | .2 .3 | .8 .7 | .4 .05]: groups 1.0, .5, 1.5, .45 → groups 2, 0;
    // candidates .9 .1 .8 .7 → experts 0, 4; weights .9/1.7 and .8/1.7, times 2.5.
    let s0 = [0.9, 0.1, 0.2, 0.3, 0.8, 0.7, 0.4, 0.05];
    let logits: Vec<f64> = s0.iter().map(|&p| logit(p)).collect();
    let (w, e) = run(&DEEPSEEK, f64_arg(&[1, 8], logits), None);
    assert_eq!(e, [0.0, 4.0]);
    assert_close("weights", &w, &[0.9 / 1.7 * 2.5, 0.8 / 1.7 * 2.5]);
}

#[test]
fn router_weights_vjp_matches_central_differences() {
    let client = common::cpu_client(1);
    let mut rng = Rng::new(11);
    let logits = float_arg(&mut rng, &[5, 8], -2.0, 2.0);
    let bias = float_arg(&mut rng, &[8], -0.3, 0.3);
    check_vjp(
        &client,
        "router_sigmoid_grouped",
        &[logits.clone(), bias],
        TOL,
        |p| Ok(route(&DEEPSEEK, &p[0], Some(&p[1]))?.weights),
    );
    let softmax = RouterConfig {
        experts: 8,
        top_k: 3,
        kind: RouterKind::Softmax,
    };
    check_vjp(&client, "router_softmax", &[logits], TOL, |p| {
        Ok(route(&softmax, &p[0], None)?.weights)
    });
}

#[test]
fn bad_configs_and_inputs_are_typed_errors_naming_the_router() {
    let s = Scope::new("f");
    let logits = s.param(TensorType::new(DType::F32, [4, 8]));
    let bad = |cfg: RouterConfig, needle: &str| {
        let err = route(&cfg, &logits, None).unwrap_err();
        let Error::InvalidOp { op, message } = &err else {
            panic!("unexpected error {err}");
        };
        assert_eq!(*op, "moe_router");
        assert!(message.contains(needle), "{message}");
    };
    let grouped = |groups, top_groups, top_k| RouterConfig {
        experts: 8,
        top_k,
        kind: RouterKind::SigmoidGrouped {
            groups,
            top_groups,
            scaling: 1.0,
        },
    };
    bad(grouped(3, 1, 2), "must divide");
    bad(grouped(8, 2, 2), "scored by its best 2");
    bad(grouped(4, 5, 2), "top_groups 5");
    bad(grouped(4, 1, 3), "exceeds the 2 experts");
    bad(
        RouterConfig {
            experts: 8,
            top_k: 9,
            kind: RouterKind::Softmax,
        },
        "top_k 9",
    );
    bad(
        RouterConfig {
            experts: 6,
            top_k: 2,
            kind: RouterKind::Softmax,
        },
        "[T, 6]",
    );
    let bias = s.param(TensorType::new(DType::F32, [8]));
    let softmax = RouterConfig {
        experts: 8,
        top_k: 2,
        kind: RouterKind::Softmax,
    };
    assert!(route(&softmax, &logits, Some(&bias)).is_err());
}
