//! The GDN mixer module behind its pre-norm and residual (`h + gdn(RMSNorm(h))`, as the
//! Qwen3.5 layer holds it) executed on the CPU plugin: its VJP against f64 central
//! differences of the loss, chunked against recurrent delta rule, causality, finiteness under
//! strongly negative gates, and typed errors for misshapen weights.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan::fsdp::ParamSpec;
use stackscan::layer::Params;
use stackscan::rng::Rng;
use stackscan::{DType, Function, Module, Result, Scope, Tensor, TensorType, nn};
use stackscan_models::gdn_layer::{GatedDeltaNet, GdnConfig, GdnDims, GdnForm};
use stackscan_runtime::testing as common;
use stackscan_runtime::testing::host::{HostArg as Arg, compile, execute, one};

/// Batch and sequence of the small test layer.
const B: i64 = 2;
const T: i64 = 8;

/// A small layer with fewer key than value heads, so the head grouping is exercised.
fn config(form: GdnForm) -> GdnDims {
    GdnDims::new(
        16,
        2,
        GdnConfig {
            key_heads: 1,
            value_heads: 2,
            key_dim: 4,
            value_dim: 4,
            conv_kernel: 4,
            form,
        },
    )
}

/// The pre-norm's scale and the mixer's parameters, in the order the layer takes them.
fn layer_params(c: &GdnDims) -> Vec<ParamSpec> {
    let norm = ParamSpec::replicated("norm", &[c.d_model], DType::F32);
    std::iter::once(norm)
        .chain(GatedDeltaNet::<Tensor>::param_specs(c))
        .collect()
}

/// `h + gdn(RMSNorm(h))` with weights `[norm, mixer…]` (the Qwen3.5 GDN layer's first half).
fn layer(c: &GdnDims, h: &Tensor, w: &[Tensor]) -> Result<Tensor> {
    let [norm, mixer @ ..] = w else {
        panic!("no weights")
    };
    let gdn = GatedDeltaNet::from_values(mixer.to_vec())?;
    h.add(&gdn.forward(c, &nn::rms_norm(h, norm, 1e-6)?)?)
}

/// `h`, the layer's weights and the loss weights `w` (`Σ layer(h)·w`), uniform in `±1`
/// except norm scales near 1 and `A_log`/`dt_bias` as given.
fn inputs(c: &GdnDims, seed: u64, a_log: f64, dt_bias: f64) -> Vec<Arg> {
    let mut rng = Rng::new(seed);
    let mut arg = |dims: &[i64], lo: f64, hi: f64| Arg {
        dims: dims.to_vec(),
        values: rng.uniform(lo, hi, dims.iter().product::<i64>() as usize),
    };
    let mut args = vec![arg(&[B, T, c.d_model], -1.0, 1.0)];
    for p in layer_params(c) {
        let (lo, hi) = match p.name.as_str() {
            "norm" | "o_norm" => (0.5, 1.5),
            "a_log" => (a_log - 0.5, a_log + 0.5),
            "dt_bias" => (dt_bias - 0.5, dt_bias + 0.5),
            "wq" | "wk" | "wv" | "wz" | "wa" | "wb" | "wo" => (-0.5, 0.5),
            _ => (-1.0, 1.0),
        };
        args.push(arg(&p.shape, lo, hi));
    }
    args.push(arg(&[B, T, c.d_model], -1.0, 1.0));
    args
}

/// `layer(h, weights…)`.
fn forward(c: &GdnDims, dtype: DType, args: &[Arg]) -> Function {
    let s = Scope::new("gdn_layer");
    let p: Vec<Tensor> = args
        .iter()
        .map(|a| s.param(TensorType::new(dtype, a.dims.clone())))
        .collect();
    let y = layer(c, &p[0], &p[1..]).unwrap();
    s.finish(&[y]).unwrap()
}

/// `Σ layer(h, weights…)·w`.
fn loss(c: &GdnDims, dtype: DType, args: &[Arg]) -> Function {
    let s = Scope::new("gdn_layer_loss");
    let p: Vec<Tensor> = args
        .iter()
        .map(|a| s.param(TensorType::new(dtype, a.dims.clone())))
        .collect();
    let n = p.len();
    let y = layer(c, &p[0], &p[1..n - 1]).unwrap();
    let l = y.mul(&p[n - 1]).unwrap().sum_all().unwrap();
    s.finish(&[l]).unwrap()
}

/// Gradients of [`loss`] with respect to `h` and every weight; one more parameter, the
/// loss's cotangent.
fn gradients(c: &GdnDims, dtype: DType, args: &[Arg]) -> Function {
    let f = loss(c, dtype, args);
    let mut wrt = vec![true; args.len()];
    wrt[args.len() - 1] = false;
    stackscan::vjp_wrt(&f, &wrt).unwrap()
}

/// Names of the differentiated arguments, in order.
fn names(c: &GdnDims) -> Vec<String> {
    std::iter::once("h".to_string())
        .chain(layer_params(c).into_iter().map(|p| p.name))
        .collect()
}

/// `max |a − b| / max |b|`.
fn relative_error(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0.0f64, |m, x| m.max(x.abs())).max(1e-30);
    a.iter()
        .zip(b)
        .fold(0.0f64, |m, (x, y)| m.max((x - y).abs()))
        / scale
}

/// Every gradient (input and 12 weights) of the chunked layer matches f64 central
/// differences of the loss at sampled elements, and the chunked layer's gradients match the
/// recurrent layer's in full.
#[test]
fn layer_vjp_matches_central_differences_f64() {
    let client = common::cpu_client(1);
    let c = config(GdnForm::Chunked(4));
    let mut args = inputs(&c, 11, 0.0, 0.5);
    let n = args.len();
    let mut with_one = args.clone();
    with_one.push(one());
    let grads = execute(
        &client,
        &compile(&client, &gradients(&c, DType::F64, &args)),
        DType::F64,
        &with_one,
    );
    assert_eq!(grads.len(), n - 1);
    let reference = execute(
        &client,
        &compile(
            &client,
            &gradients(&config(GdnForm::Recurrent), DType::F64, &args),
        ),
        DType::F64,
        &with_one,
    );
    let names = names(&c);
    for (i, name) in names.iter().enumerate() {
        let err = relative_error(&grads[i], &reference[i]);
        assert!(err <= 1e-9, "d/d{name}: chunked vs recurrent layer {err:e}");
    }
    let loss_exe = compile(&client, &loss(&c, DType::F64, &args));
    let step = 1e-5;
    let mut rng = Rng::new(12);
    let mut worst = 0.0f64;
    for (i, name) in names.iter().enumerate() {
        let picks = rng.uniform(0.0, args[i].values.len() as f64, 3);
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
    eprintln!("gdn layer: vjp vs central differences (39 elements) worst {worst:e}");
}

/// Changing the last token leaves every earlier output unchanged: the convolution and the
/// delta rule are causal.
#[test]
fn later_tokens_do_not_reach_earlier_outputs() {
    let client = common::cpu_client(1);
    let c = config(GdnForm::Chunked(4));
    let args = inputs(&c, 21, 0.0, 0.5);
    let args = &args[..args.len() - 1];
    let exe = compile(&client, &forward(&c, DType::F64, args));
    let base = execute(&client, &exe, DType::F64, args)[0].clone();
    let mut shifted = args.to_vec();
    let d = c.d_model as usize;
    for b in 0..B as usize {
        let last = (b * T as usize + T as usize - 1) * d;
        for x in &mut shifted[0].values[last..last + d] {
            *x += 1.0;
        }
    }
    let moved = execute(&client, &exe, DType::F64, &shifted)[0].clone();
    for b in 0..B as usize {
        for t in 0..T as usize {
            let at = (b * T as usize + t) * d;
            let same = base[at..at + d] == moved[at..at + d];
            assert_eq!(same, t + 1 < T as usize, "sequence {b}, token {t}");
        }
    }
}

/// `A_log ≈ 3` and `dt_bias ≈ 20` give log-gates near `−e³·20 ≈ −400` per token; the f32
/// layer's output and every gradient stay finite.
#[test]
fn strongly_negative_gates_give_no_nan_f32() {
    let client = common::cpu_client(1);
    let c = config(GdnForm::Chunked(4));
    let args = inputs(&c, 31, 3.0, 20.0);
    let mut with_one = args.clone();
    with_one.push(one());
    let grads = execute(
        &client,
        &compile(&client, &gradients(&c, DType::F32, &args)),
        DType::F32,
        &with_one,
    );
    let out = execute(
        &client,
        &compile(&client, &forward(&c, DType::F32, &args[..args.len() - 1])),
        DType::F32,
        &args[..args.len() - 1],
    );
    assert!(out[0].iter().all(|x| x.is_finite()), "output not finite");
    for (name, g) in names(&c).iter().zip(&grads) {
        assert!(g.iter().all(|x| x.is_finite()), "d/d{name} not finite");
    }
}

/// A weight of the wrong shape is a typed error naming it; so is a head split that does
/// not divide.
#[test]
fn bad_weights_are_typed_errors() {
    let c = config(GdnForm::Chunked(4));
    let s = Scope::new("bad");
    let x = s.param(TensorType::new(DType::F32, [B, T, c.d_model]));
    let weights = |c: &GdnDims| -> GatedDeltaNet<Tensor> {
        let w = GatedDeltaNet::<Tensor>::param_specs(c)
            .iter()
            .map(|p| s.param(p.full_type()))
            .collect();
        GatedDeltaNet::from_values(w).unwrap()
    };
    let mut gdn = weights(&c);
    gdn.conv = s.param(TensorType::new(DType::F32, [3, c.gdn.conv_channels()]));
    let err = gdn.forward(&c, &x).unwrap_err().to_string();
    assert!(err.contains("`conv`"), "{err}");
    let odd = GdnDims {
        gdn: GdnConfig {
            key_heads: 2,
            value_heads: 3,
            ..c.gdn
        },
        ..c
    };
    let err = weights(&odd).forward(&odd, &x).unwrap_err().to_string();
    assert!(err.contains("do not split"), "{err}");
}
