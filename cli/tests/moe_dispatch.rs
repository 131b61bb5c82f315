//! Capacity-padded expert dispatch on the CPU plugin against a dense reference that runs
//! every expert on every token and combines with the router's weights scattered to `[T, E]`;
//! both token-gather paths; the whole layer, as a function and as the declared `GatedMoe`
//! module, against a hand-written one; VJPs against f64 central differences with each flag
//! off and on; the program-text checks of `direct_token_gather` and `dlhs_transpose_rhs`.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan::{Program, Result, Tensor, nn};
use stackscan_models::moe::{
    DispatchOptions, ExpertMesh, ExpertWeights, RouterConfig, RouterKind, capacity, route,
    routed_experts,
};
use stackscan_runtime::testing as common;

use common::graph::{Arg, Compiled, TOL, check_vjp, float_arg, function};
use stackscan::rng::Rng;

const T: i64 = 6;
/// Differs from `E`, so a token-matrix broadcast cannot be confused with the router's.
const D: i64 = 5;
const F: i64 = 3;
const E: usize = 4;
const K: usize = 2;

const ROUTER: RouterConfig = RouterConfig {
    experts: E,
    top_k: K,
    kind: RouterKind::SigmoidGrouped {
        groups: 2,
        top_groups: 1,
        scaling: 2.5,
    },
};

fn args(seed: u64) -> Vec<Arg> {
    let mut rng = Rng::new(seed);
    vec![
        float_arg(&mut rng, &[T, D], -1.0, 1.0),
        float_arg(&mut rng, &[D, E as i64], -1.0, 1.0),
        float_arg(&mut rng, &[E as i64, D, F], -1.0, 1.0),
        float_arg(&mut rng, &[E as i64, D, F], -1.0, 1.0),
        float_arg(&mut rng, &[E as i64, F, D], -1.0, 1.0),
    ]
}

/// Every token may land on one expert twice over the batch: `C = T · K` drops nothing.
fn moe(p: &[Tensor], direct_token_gather: bool, cap: usize) -> Result<Tensor> {
    moe_with(p, direct_token_gather, false, cap)
}

fn moe_with(
    p: &[Tensor],
    direct_token_gather: bool,
    dlhs_transpose_rhs: bool,
    cap: usize,
) -> Result<Tensor> {
    let routing = route(&ROUTER, &p[0].matmul(&p[1])?, None)?;
    let w = ExpertWeights {
        gate: &p[2],
        up: &p[3],
        down: &p[4],
    };
    let opts = DispatchOptions {
        capacity: cap,
        direct_token_gather,
        dlhs_transpose_rhs,
        ..DispatchOptions::default()
    };
    routed_experts(&p[0], &routing, w, opts)
}

/// All experts on all tokens, combined densely.
fn dense(p: &[Tensor]) -> Result<Tensor> {
    let routing = route(&ROUTER, &p[0].matmul(&p[1])?, None)?;
    let (t, e) = (T, E as i64);
    let hot = routing.experts.one_hot(E, p[0].dtype())?; // [T, K, E]
    let combine = hot
        .mul(
            &routing
                .weights
                .broadcast_in_dim(&[t, K as i64, e], &[0, 1])?,
        )?
        .sum(&[1])?; // [T, E]
    let xs = p[0].broadcast_in_dim(&[e, t, D], &[1, 2])?;
    let y = nn::silu(&xs.matmul(&p[2])?)?
        .mul(&xs.matmul(&p[3])?)?
        .matmul(&p[4])?; // [E, T, D]
    let c = combine
        .transpose(&[1, 0])?
        .broadcast_in_dim(&[e, t, D], &[0, 1])?;
    y.mul(&c)?.sum(&[0])
}

fn run(a: &[Arg], build: impl FnOnce(&[Tensor]) -> Result<Tensor>) -> Vec<f64> {
    let client = common::cpu_client(1);
    let f = function("moe", a, |p| Ok(vec![build(p)?]));
    Compiled::new(&client, &f).run(a).remove(0)
}

#[test]
fn dispatch_matches_the_dense_reference_on_both_gather_paths() {
    let a = args(5);
    let reference = run(&a, dense);
    let full = (T as usize) * K;
    for direct in [false, true] {
        let got = run(&a, |p| moe(p, direct, full));
        for (i, (g, r)) in got.iter().zip(&reference).enumerate() {
            assert!(
                (g - r).abs() <= 1e-12 * (1.0 + r.abs()),
                "direct_token_gather={direct}: [{i}] {g} vs {r}"
            );
        }
    }
}

#[test]
fn dispatch_vjp_matches_central_differences() {
    let client = common::cpu_client(1);
    let a = args(9);
    let full = (T as usize) * K;
    for (direct, dlhs) in [(false, false), (true, false), (false, true), (true, true)] {
        let name = format!("moe direct_token_gather={direct} dlhs_transpose_rhs={dlhs}");
        check_vjp(&client, &name, &a, TOL, |p| moe_with(p, direct, dlhs, full));
    }
}

#[test]
fn direct_token_gather_builds_no_replicated_token_copy() {
    let a = args(1);
    // Forward and backward programs of the layer.
    let texts = |direct| {
        let f = function("moe", &a, |p| Ok(vec![moe(p, direct, 4)?]));
        let grads = stackscan::vjp(&f).unwrap();
        [f, grads].map(|f| Program::new(f).emit().unwrap())
    };
    // The replicated copy: the token matrix broadcast to [T, k, d] (then viewed as [T·k, d]).
    let copy = format!("(tensor<{T}x{D}xf64>) -> tensor<{T}x{K}x{D}xf64>");
    let copies = |text: &str| {
        text.lines()
            .filter(|l| l.contains("broadcast_in_dim") && l.contains(&copy))
            .count()
    };
    let [forward_off, _] = texts(false);
    assert_eq!(copies(&forward_off), 1, "the off path builds the copy once");
    for (which, text) in ["forward", "backward"].iter().zip(texts(true)) {
        assert_eq!(copies(&text), 0, "{which}: a [T·k, d] token copy found");
        assert!(text.contains("stablehlo.gather"), "{which}: no gather");
    }
}

#[test]
fn capacity_from_factor() {
    assert_eq!(capacity(64, 4, 16, 1.0), 16);
    assert_eq!(capacity(64, 4, 16, 1.25), 20);
    assert_eq!(capacity(1, 1, 16, 1.0), 1);
    // Never more slots than tokens: an expert cannot receive more.
    assert_eq!(capacity(8, 2, 8, 8.0), 8);
}

/// The tiny DeepSeek-V3 config's MoE layer (64 tokens, d 128, 16 experts of width 64, top 4)
/// at capacity factor 1.25: the program's FLOPs, router included, stay within twice the
/// FLOPs of the experts the tokens actually use, where dense all-experts compute is 4×.
#[test]
fn program_flops_stay_within_twice_the_active_experts() {
    use stackscan::{DType, Scope, TensorType};
    let (t, d, f, e, k) = (64_i64, 128_i64, 64_i64, 16_usize, 4_usize);
    let router = RouterConfig {
        experts: e,
        top_k: k,
        kind: RouterKind::SigmoidGrouped {
            groups: 4,
            top_groups: 2,
            scaling: 2.5,
        },
    };
    let s = Scope::new("moe");
    let ty = |dims: &[i64]| TensorType::new(DType::F32, dims);
    let x = s.param(ty(&[t, d]));
    let wr = s.param(ty(&[d, e as i64]));
    let gate = s.param(ty(&[e as i64, d, f]));
    let up = s.param(ty(&[e as i64, d, f]));
    let down = s.param(ty(&[e as i64, f, d]));
    let routing = route(&router, &x.matmul(&wr).unwrap(), None).unwrap();
    let opts = DispatchOptions {
        capacity: capacity(t as usize, k, e, 1.25),
        direct_token_gather: true,
        ..DispatchOptions::default()
    };
    let w = ExpertWeights {
        gate: &gate,
        up: &up,
        down: &down,
    };
    let y = routed_experts(&x, &routing, w, opts).unwrap();
    let program = s.finish(&[y]).unwrap();
    let cost = stackscan::cost::of(&program).unwrap();
    // Three [d × f] products of 2·d·f FLOPs per routed row, plus the SwiGLU's elementwise.
    let active = (t as u64) * (k as u64) * (3 * 2 * d * f) as u64;
    let total = cost.flops();
    assert!(
        total <= 2 * active,
        "program FLOPs {total} exceed twice the active experts' {active}"
    );
    assert!(
        cost.matrix_flops.total() >= active,
        "the experts' products are missing: {} < {active}",
        cost.matrix_flops.total()
    );
}

/// The whole sub-layer: routed experts (dense reference above) plus a sigmoid-gated shared
/// expert computed by hand; and its VJP.
#[test]
fn moe_layer_with_gated_shared_expert() {
    use stackscan::Module;
    use stackscan::layer::Params;
    use stackscan_models::moe::{GatedMoe, MoeConfig, MoeDims, MoeWeights, SharedExpert, moe};
    let mut rng = Rng::new(21);
    let mut a = args(21);
    a.push(float_arg(&mut rng, &[D, 2], -1.0, 1.0));
    a.push(float_arg(&mut rng, &[D, 2], -1.0, 1.0));
    a.push(float_arg(&mut rng, &[2, D], -1.0, 1.0));
    a.push(float_arg(&mut rng, &[D, 1], -1.0, 1.0));
    let cfg = MoeConfig {
        router: ROUTER,
        // C = T·K: nothing dropped.
        capacity_factor: E as f64,
        bias_update_speed: 0.0,
        aux_loss_coef: 0.0,
        direct_token_gather: true,
        dlhs_transpose_rhs: true,
        gated_shared: true,
        expert_mesh: ExpertMesh::OFF,
    };
    let layer = |p: &[Tensor]| {
        let w = MoeWeights {
            router: &p[1],
            router_bias: None,
            experts: ExpertWeights {
                gate: &p[2],
                up: &p[3],
                down: &p[4],
            },
            shared: Some(SharedExpert {
                gate: &p[5],
                up: &p[6],
                down: &p[7],
                gate_proj: Some(&p[8]),
            }),
        };
        moe(&cfg, &p[0], &w, 1)
    };
    let reference = |p: &[Tensor]| {
        let shared = nn::silu(&p[0].matmul(&p[5])?)?
            .mul(&p[0].matmul(&p[6])?)?
            .matmul(&p[7])?;
        let g = p[0]
            .matmul(&p[8])?
            .sigmoid()?
            .broadcast_in_dim(&[T, D], &[0, 1])?;
        dense(p)?.add(&shared.mul(&g)?)
    };
    // The declared module: the same weights read by name (`router`, `experts.gate`, …,
    // `shared.w_down`, `shared_gate`, declared in the order of `p[1..]`).
    let dims = MoeDims {
        d_model: D,
        expert_width: F,
        shared_width: 2,
        out_std: 0.02,
        layer: cfg,
    };
    let module = |p: &[Tensor]| GatedMoe::from_values(p[1..].to_vec())?.forward(&dims, &p[0]);
    let names: Vec<String> = <GatedMoe<Tensor> as Module>::param_specs(&dims)
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(
        names,
        [
            "router",
            "experts.gate",
            "experts.up",
            "experts.down",
            "shared.w_gate",
            "shared.w_up",
            "shared.w_down",
            "shared_gate"
        ]
    );
    let want = run(&a, reference);
    for (what, got) in [("function", run(&a, layer)), ("module", run(&a, module))] {
        for (i, (g, r)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - r).abs() <= 1e-12 * (1.0 + r.abs()),
                "{what}: [{i}] {g} vs {r}"
            );
        }
    }
    let client = common::cpu_client(1);
    check_vjp(&client, "moe_layer", &a, TOL, layer);
    check_vjp(&client, "moe_module", &a, TOL, module);
}

/// `dlhs_transpose_rhs`: on, the backward's input gradient of each grouped product contracts
/// the stacked expert weight in place, so no transposed copy of an expert weight appears in
/// the gradient program; off, each of the three banks is transposed exactly once (`gate` and
/// `up` `[E, d, f] → [E, f, d]`, `down` `[E, f, d] → [E, d, f]`) and the copy feeds a product.
/// Read from the StableHLO we emit, for both token-gather paths.
#[test]
fn backward_contracts_expert_weights_in_place() {
    let a = args(2);
    let full = (T as usize) * K;
    let e = E as i64;
    // The weights are the function's parameters 2, 3, 4 (gate, up, down).
    let copies = [
        (
            "%arg2",
            format!("(tensor<{e}x{D}x{F}xf64>) -> tensor<{e}x{F}x{D}xf64>"),
        ),
        (
            "%arg3",
            format!("(tensor<{e}x{D}x{F}xf64>) -> tensor<{e}x{F}x{D}xf64>"),
        ),
        (
            "%arg4",
            format!("(tensor<{e}x{F}x{D}xf64>) -> tensor<{e}x{D}x{F}xf64>"),
        ),
    ];
    let weight_types = [
        format!("tensor<{e}x{D}x{F}xf64>"),
        format!("tensor<{e}x{F}x{D}xf64>"),
    ];
    for direct in [false, true] {
        for dlhs in [false, true] {
            let what = format!("direct_token_gather={direct} dlhs_transpose_rhs={dlhs}");
            let f = function("moe", &a, |p| Ok(vec![moe_with(p, direct, dlhs, full)?]));
            let text = Program::new(stackscan::vjp(&f).unwrap()).emit().unwrap();
            // Every transpose whose operand has an expert bank's type.
            let transposed: Vec<&str> = text
                .lines()
                .filter(|l| l.contains("stablehlo.transpose"))
                .filter(|l| weight_types.iter().any(|w| l.contains(&format!("({w})"))))
                .collect();
            if dlhs {
                assert!(
                    transposed.is_empty(),
                    "{what}: weight transposed: {transposed:#?}"
                );
            } else {
                assert_eq!(transposed.len(), 3, "{what}: {transposed:#?}");
                for (arg, ty) in &copies {
                    let line = transposed
                        .iter()
                        .find(|l| l.contains(&format!("transpose\"({arg})")) && l.contains(ty))
                        .unwrap_or_else(|| {
                            panic!("{what}: no transpose of {arg}: {transposed:#?}")
                        });
                    // The copy is what the input gradient's product reads.
                    let copy = line.trim().split(' ').next().unwrap();
                    let reads = text
                        .lines()
                        .filter(|l| l.contains("stablehlo.dot_general"))
                        .filter(|l| {
                            l.contains(&format!("({copy},")) || l.contains(&format!(", {copy})"))
                        })
                        .count();
                    assert_eq!(
                        reads, 1,
                        "{what}: the copy {copy} of {arg} feeds {reads} products"
                    );
                }
            }
            // The weights do reach the backward's products: three forward, three for dX
            // (in place) or three reading the copies.
            let batched_with_weight = text
                .lines()
                .filter(|l| l.contains("stablehlo.dot_general"))
                .filter(|l| weight_types.iter().any(|ty| l.contains(ty.as_str())))
                .count();
            assert!(
                batched_with_weight >= 6,
                "{what}: {batched_with_weight} weight products"
            );
        }
    }
}

/// The layer reports, as auxiliary outputs, the share of its (token, expert) assignments
/// dropped for capacity and its busiest expert's load over the mean, and adds the
/// load-balancing loss `α·E·Σ_i (count_i / S)·P_i` per sequence (softmax router): six of
/// eight tokens choose expert 0, two expert 1, one choice each, capacity 2 slots.
#[test]
fn the_layer_reports_drops_and_imbalance_and_adds_the_balancing_loss() {
    use common::graph::Data;
    use stackscan::auxiliary::AuxRole;
    use stackscan::{DType, TensorType};
    use stackscan_models::moe::{AUX_LOSS, DROPPED, IMBALANCE, MoeConfig, MoeWeights, moe};
    let (t, e, f) = (8, 4, 2);
    let mut x = Vec::new();
    for token in 0..t {
        x.extend(if token < 6 { [1.0, 0.0] } else { [0.0, 1.0] });
    }
    let mut router = vec![0.0; 2 * e];
    router[0] = 5.0; // d 0 → expert 0
    router[e + 1] = 5.0; // d 1 → expert 1
    let mut rng = Rng::new(3);
    let arg = |dims: &[i64], data: Vec<f64>| Arg {
        ty: TensorType::new(DType::F64, dims),
        data: Data::F(data),
    };
    let args = vec![
        arg(&[t, 2], x),
        arg(&[2, e as i64], router),
        float_arg(&mut rng, &[e as i64, 2, f], -1.0, 1.0),
        float_arg(&mut rng, &[e as i64, 2, f], -1.0, 1.0),
        float_arg(&mut rng, &[e as i64, f, 2], -1.0, 1.0),
    ];
    let alpha = 0.5;
    let cfg = MoeConfig {
        router: RouterConfig {
            experts: e,
            top_k: 1,
            kind: RouterKind::Softmax,
        },
        // ⌈8 · 1 / 4⌉ = 2 slots per expert.
        capacity_factor: 1.0,
        bias_update_speed: 0.0,
        aux_loss_coef: alpha,
        direct_token_gather: false,
        dlhs_transpose_rhs: false,
        gated_shared: false,
        expert_mesh: ExpertMesh::OFF,
    };
    let mut roles = Vec::new();
    let g = function("moe_aux", &args, |p| {
        let w = MoeWeights {
            router: &p[1],
            router_bias: None,
            experts: ExpertWeights {
                gate: &p[2],
                up: &p[3],
                down: &p[4],
            },
            shared: None,
        };
        // Two sequences of four tokens: [0 0 0 0] and [0 0 1 1].
        moe(&cfg, &p[0], &w, 2)?;
        let aux = p[0].scope().take_aux();
        roles = aux.iter().map(|(o, _)| (o.name.clone(), o.role)).collect();
        Ok(aux.into_iter().map(|(_, v)| v).collect())
    });
    assert_eq!(
        roles,
        [
            (DROPPED.to_owned(), AuxRole::Metric),
            (IMBALANCE.to_owned(), AuxRole::Metric),
            (AUX_LOSS.to_owned(), AuxRole::Loss),
        ]
    );
    let client = common::cpu_client(1);
    let out = Compiled::new(&client, &g).run(&args);
    // Expert 0 receives 6 of the 8 assignments and keeps 2.
    assert!((out[0][0] - 4.0 / 8.0).abs() < 1e-6, "dropped {:?}", out[0]);
    // 6 over a mean of 2.
    assert!((out[1][0] - 3.0).abs() < 1e-6, "imbalance {:?}", out[1]);
    // P of a token: softmax of (5, 0, 0, 0) or (0, 5, 0, 0).
    let hi = 5f64.exp() / (5f64.exp() + 3.0);
    let lo = 1.0 / (5f64.exp() + 3.0);
    let seq = |counts: [f64; 4], p: [f64; 4]| -> f64 {
        e as f64 * counts.iter().zip(p).map(|(c, p)| c / 4.0 * p).sum::<f64>()
    };
    let first = seq([4.0, 0.0, 0.0, 0.0], [hi, lo, lo, lo]);
    let second = seq(
        [2.0, 2.0, 0.0, 0.0],
        [(hi + lo) / 2.0, (hi + lo) / 2.0, lo, lo],
    );
    let expected = alpha * (first + second) / 2.0;
    assert!(
        (out[2][0] - expected).abs() < 1e-5,
        "aux loss {} vs {expected}",
        out[2][0]
    );
}
