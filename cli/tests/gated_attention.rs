//! The gated attention mixer module behind its pre-norm and residual (`h + attn(RMSNorm(h))`,
//! as the Qwen3.5 layer holds it) executed on the CPU plugin: values against an independent
//! host evaluation in f64 on a small input, the VJP against f64 central differences, and
//! typed errors for misshapen weights.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan::fsdp::ParamSpec;
use stackscan::layer::Params;
use stackscan::rng::Rng;
use stackscan::{DType, Function, Module, Result, Scope, Tensor, TensorType, nn};
use stackscan_models::gated_attention::{AttentionConfig, GatedAttention, GatedAttentionDims};
use stackscan_runtime::testing as common;
use stackscan_runtime::testing::host::{HostArg as Arg, compile, execute, one};

/// `max |a − b| / max |b|`.
fn relative_error(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0.0f64, |m, x| m.max(x.abs())).max(1e-30);
    a.iter()
        .zip(b)
        .fold(0.0f64, |m, (x, y)| m.max((x - y).abs()))
        / scale
}

/// A small layer with two query heads sharing one key/value head, rotary on 2 of 8
/// features (25 %).
fn config() -> GatedAttentionDims {
    GatedAttentionDims::new(
        8,
        2,
        AttentionConfig {
            heads: 2,
            kv_heads: 1,
            head_dim: 8,
            rotary_dim: 2,
            rope_theta: 10_000.0,
        },
    )
}

/// The pre-norm's scale and the mixer's parameters, in the order the layer takes them.
fn layer_params(c: &GatedAttentionDims) -> Vec<ParamSpec> {
    let norm = ParamSpec::replicated("norm", &[c.d_model], DType::F32);
    std::iter::once(norm)
        .chain(GatedAttention::<Tensor>::param_specs(c))
        .collect()
}

/// `h + attn(RMSNorm(h))` with weights `[norm, mixer…]` (the Qwen3.5 attention layer's
/// first half).
fn layer(c: &GatedAttentionDims, h: &Tensor, w: &[Tensor]) -> Result<Tensor> {
    let [norm, mixer @ ..] = w else {
        panic!("no weights")
    };
    let attn = GatedAttention::from_values(mixer.to_vec())?;
    h.add(&attn.forward(c, &nn::rms_norm(h, norm, 1e-6)?)?)
}

/// `h: [b, t, d]`, the layer's weights and the loss weights `w` (`Σ layer(h)·w`).
fn inputs(c: &GatedAttentionDims, seed: u64, b: i64, t: i64) -> Vec<Arg> {
    let mut rng = Rng::new(seed);
    let mut arg = |dims: &[i64], lo: f64, hi: f64| Arg {
        dims: dims.to_vec(),
        values: rng.uniform(lo, hi, dims.iter().product::<i64>() as usize),
    };
    let mut args = vec![arg(&[b, t, c.d_model], -1.0, 1.0)];
    for p in layer_params(c) {
        let (lo, hi) = if p.name.ends_with("norm") {
            (0.5, 1.5)
        } else {
            (-0.7, 0.7)
        };
        args.push(arg(&p.shape, lo, hi));
    }
    args.push(arg(&[b, t, c.d_model], -1.0, 1.0));
    args
}

/// `layer(h, weights…)`.
fn forward(c: &GatedAttentionDims, args: &[Arg]) -> Function {
    let s = Scope::new("attention");
    let p: Vec<Tensor> = args
        .iter()
        .map(|a| s.param(TensorType::new(DType::F64, a.dims.clone())))
        .collect();
    let y = layer(c, &p[0], &p[1..]).unwrap();
    s.finish(&[y]).unwrap()
}

/// `Σ layer(h, weights…)·w`.
fn loss(c: &GatedAttentionDims, args: &[Arg]) -> Function {
    let s = Scope::new("attention_loss");
    let p: Vec<Tensor> = args
        .iter()
        .map(|a| s.param(TensorType::new(DType::F64, a.dims.clone())))
        .collect();
    let n = p.len();
    let y = layer(c, &p[0], &p[1..n - 1]).unwrap();
    s.finish(&[y.mul(&p[n - 1]).unwrap().sum_all().unwrap()])
        .unwrap()
}

/// `x / √(mean x² + ε) · w` on one vector.
fn host_rms(x: &[f64], w: &[f64]) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let r = 1.0 / (ms + 1e-6).sqrt();
    x.iter().zip(w).map(|(v, g)| v * r * g).collect()
}

/// `x · W` for a row vector and a row-major `[x.len(), n]` matrix.
fn host_matvec(x: &[f64], w: &[f64], n: usize) -> Vec<f64> {
    (0..n)
        .map(|j| x.iter().enumerate().map(|(i, v)| v * w[i * n + j]).sum())
        .collect()
}

/// Rotate-half RoPE on the first `r` features at position `pos`.
fn host_rope(x: &mut [f64], pos: usize, r: usize, theta: f64) {
    let half = r / 2;
    for i in 0..half {
        let a = pos as f64 * theta.powf(-2.0 * i as f64 / r as f64);
        let (x1, x2) = (x[i], x[i + half]);
        x[i] = x1 * a.cos() - x2 * a.sin();
        x[i + half] = x2 * a.cos() + x1 * a.sin();
    }
}

/// The layer evaluated token by token on the host, written from the definition (query and
/// gate interleaved per head, QK-norm before RoPE, softmax over earlier tokens only).
fn host_reference(dims: &GatedAttentionDims, args: &[Arg]) -> Vec<f64> {
    let c = &dims.attention;
    let (b, t) = (args[0].dims[0] as usize, args[0].dims[1] as usize);
    let (d, nh, nkv, hd) = (
        dims.d_model as usize,
        c.heads as usize,
        c.kv_heads as usize,
        c.head_dim as usize,
    );
    let w: Vec<&[f64]> = args[1..8].iter().map(|a| a.values.as_slice()).collect();
    // The layer's weights in declaration order: input norm, query + gate, key, value, the
    // per-head query and key norms, output.
    let [norm, w_qg, w_k, w_v, q_norm, k_norm, w_o] = w[..] else {
        panic!("the layer's seven weights, got {}", w.len())
    };
    let mut out = args[0].values.clone();
    for bi in 0..b {
        let row = |ti: usize| &args[0].values[(bi * t + ti) * d..(bi * t + ti + 1) * d];
        let mut qs = Vec::new();
        let mut gates = Vec::new();
        let mut ks = Vec::new();
        let mut vs = Vec::new();
        for ti in 0..t {
            let x = host_rms(row(ti), norm);
            let qg = host_matvec(&x, w_qg, 2 * nh * hd);
            let kx = host_matvec(&x, w_k, nkv * hd);
            let mut q_t = Vec::new();
            let mut g_t = Vec::new();
            for hh in 0..nh {
                let mut q = host_rms(&qg[hh * 2 * hd..hh * 2 * hd + hd], q_norm);
                host_rope(&mut q, ti, c.rotary_dim as usize, c.rope_theta);
                q_t.push(q);
                g_t.push(qg[hh * 2 * hd + hd..(hh + 1) * 2 * hd].to_vec());
            }
            let mut k_t = Vec::new();
            for j in 0..nkv {
                let mut k = host_rms(&kx[j * hd..(j + 1) * hd], k_norm);
                host_rope(&mut k, ti, c.rotary_dim as usize, c.rope_theta);
                k_t.push(k);
            }
            qs.push(q_t);
            gates.push(g_t);
            ks.push(k_t);
            vs.push(host_matvec(&x, w_v, nkv * hd));
        }
        for ti in 0..t {
            let mut mixed = vec![0.0; nh * hd];
            for hh in 0..nh {
                let j = hh / (nh / nkv);
                let scores: Vec<f64> = (0..=ti)
                    .map(|s| {
                        qs[ti][hh]
                            .iter()
                            .zip(&ks[s][j])
                            .map(|(a, b)| a * b)
                            .sum::<f64>()
                            / (hd as f64).sqrt()
                    })
                    .collect();
                let m = scores.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b));
                let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
                let z: f64 = e.iter().sum();
                for f in 0..hd {
                    let a: f64 = (0..=ti).map(|s| e[s] / z * vs[s][j * hd + f]).sum();
                    let g = 1.0 / (1.0 + (-gates[ti][hh][f]).exp());
                    mixed[hh * hd + f] = a * g;
                }
            }
            let y = host_matvec(&mixed, w_o, d);
            for (o, v) in out[(bi * t + ti) * d..(bi * t + ti + 1) * d]
                .iter_mut()
                .zip(y)
            {
                *o += v;
            }
        }
    }
    out
}

/// The layer's values on a small input match the host evaluation of its definition.
#[test]
fn values_match_host_reference_f64() {
    let client = common::cpu_client(1);
    let c = config();
    let args = inputs(&c, 41, 2, 5);
    let args = &args[..args.len() - 1];
    let got = execute(
        &client,
        &compile(&client, &forward(&c, args)),
        DType::F64,
        args,
    );
    let want = host_reference(&c, args);
    let err = relative_error(&got[0], &want);
    assert!(err <= 1e-12, "gated attention vs host reference {err:e}");
}

/// Every gradient (input and 7 weights) matches f64 central differences of the loss at
/// sampled elements.
#[test]
fn layer_vjp_matches_central_differences_f64() {
    let client = common::cpu_client(1);
    let c = config();
    let mut args = inputs(&c, 42, 2, 6);
    let n = args.len();
    let mut wrt = vec![true; n];
    wrt[n - 1] = false;
    let grad_fn = stackscan::vjp_wrt(&loss(&c, &args), &wrt).unwrap();
    let mut with_one = args.clone();
    with_one.push(one());
    let grads = execute(&client, &compile(&client, &grad_fn), DType::F64, &with_one);
    assert_eq!(grads.len(), n - 1);
    let names: Vec<String> = std::iter::once("h".to_string())
        .chain(layer_params(&c).into_iter().map(|p| p.name))
        .collect();
    let loss_exe = compile(&client, &loss(&c, &args));
    let step = 1e-5;
    let mut rng = Rng::new(43);
    let mut worst = 0.0f64;
    for (i, name) in names.iter().enumerate() {
        let picks = rng.uniform(0.0, args[i].values.len() as f64, 4);
        for j in picks.into_iter().map(|x| x as usize) {
            let saved = args[i].values[j];
            args[i].values[j] = saved + step;
            let plus = execute(&client, &loss_exe, DType::F64, &args)[0][0];
            args[i].values[j] = saved - step;
            let minus = execute(&client, &loss_exe, DType::F64, &args)[0][0];
            args[i].values[j] = saved;
            let fd = (plus - minus) / (2.0 * step);
            let g = grads[i][j];
            let err = (g - fd).abs() / fd.abs().max(g.abs()).max(1e-3);
            worst = worst.max(err);
            assert!(
                err <= 1e-6,
                "d/d{name}[{j}]: vjp {g} vs central difference {fd}"
            );
        }
        assert!(
            grads[i].iter().any(|&g| g != 0.0),
            "d/d{name} is identically zero"
        );
    }
    eprintln!("gated attention: vjp vs central differences (32 elements) worst {worst:e}");
}

/// A weight of the wrong shape is a typed error naming it; so is a head split that does
/// not divide.
#[test]
fn bad_weights_are_typed_errors() {
    let c = config();
    let s = Scope::new("bad");
    let x = s.param(TensorType::new(DType::F32, [1, 4, c.d_model]));
    let weights = |c: &GatedAttentionDims| -> GatedAttention<Tensor> {
        let w = GatedAttention::<Tensor>::param_specs(c)
            .iter()
            .map(|p| s.param(p.full_type()))
            .collect();
        GatedAttention::from_values(w).unwrap()
    };
    let mut attn = weights(&c);
    attn.q_norm = s.param(TensorType::new(DType::F32, [c.attention.head_dim + 1]));
    let err = attn.forward(&c, &x).unwrap_err().to_string();
    assert!(err.contains("`q_norm`"), "{err}");
    let odd = GatedAttentionDims {
        attention: AttentionConfig {
            kv_heads: 3,
            ..c.attention
        },
        ..c
    };
    let err = weights(&odd).forward(&odd, &x).unwrap_err().to_string();
    assert!(err.contains("do not split"), "{err}");
}
