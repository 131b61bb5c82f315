//! MLA on the CPU plugin: a one-token case whose output is derived by hand, a small case
//! against a plain f64 host implementation written loop by loop from the definition, shape
//! errors naming the weight, and the VJP against central differences.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan::layer::Params;
use stackscan::{DType, Error, Scope, Tensor, TensorType};
use stackscan_models::mla::{Mla, MlaConfig, mla};
use stackscan_runtime::testing as common;

use common::graph::{Arg, Compiled, Data, TOL, check_vjp, float_arg, function};
use stackscan::rng::Rng;
use stackscan_models::yarn::Yarn;

const SMALL: MlaConfig = MlaConfig {
    d: 6,
    heads: 2,
    q_lora: 4,
    kv_lora: 4,
    nope: 2,
    rope: 2,
    v: 3,
    rope_theta: 10_000.0,
    eps: 1e-6,
    rope_scaling: None,
    attention_block: None,
    context: 1,
};

fn layer(c: &MlaConfig) -> impl Fn(&[Tensor]) -> stackscan::Result<Tensor> + '_ {
    move |p: &[Tensor]| Mla::from_values(p[1..].to_vec())?.forward(c, &p[0])
}

fn random_args(c: &MlaConfig, t: i64, seed: u64) -> Vec<Arg> {
    let mut rng = Rng::new(seed);
    let mut a = vec![float_arg(&mut rng, &[1, t, c.d], -1.0, 1.0)];
    for (name, dims) in c.weight_shapes() {
        let (lo, hi) = if name.ends_with("norm") {
            (0.5, 1.5)
        } else {
            (-1.0, 1.0)
        };
        a.push(float_arg(&mut rng, &dims, lo, hi));
    }
    a
}

fn values(a: &Arg) -> &[f64] {
    let Data::F(v) = &a.data else { panic!("float") };
    v
}

fn run(c: &MlaConfig, a: &[Arg]) -> Vec<f64> {
    let client = common::cpu_client(1);
    let f = function("mla", a, |p| Ok(vec![layer(c)(p)?]));
    Compiled::new(&client, &f).run(a).remove(0)
}

/// Row-major `[n, k] · [k, m]`.
fn matmul(a: &[f64], b: &[f64], n: usize, k: usize, m: usize) -> Vec<f64> {
    let mut y = vec![0.0; n * m];
    for i in 0..n {
        for j in 0..m {
            y[i * m + j] = (0..k).map(|l| a[i * k + l] * b[l * m + j]).sum();
        }
    }
    y
}

fn rms(x: &[f64], w: &[f64], eps: f64) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let r = 1.0 / (ms + eps).sqrt();
    x.iter().zip(w).map(|(v, w)| v * r * w).collect()
}

/// Rotate-half RoPE of one head's rotary features at position `pos`: pair `i` turns by
/// `pos · inv[i]`, its cosine and sine scaled by `mag`.
fn rope(x: &[f64], pos: usize, inv: &[f64], mag: f64) -> Vec<f64> {
    let half = x.len() / 2;
    let mut y = x.to_vec();
    for i in 0..half {
        let a = pos as f64 * inv[i];
        let (cos, sin) = (mag * a.cos(), mag * a.sin());
        y[i] = x[i] * cos - x[i + half] * sin;
        y[i + half] = x[i + half] * cos + x[i] * sin;
    }
    y
}

/// The rotary frequencies, magnitude and attention factor of `c`: plain RoPE's written out
/// here, YaRN's from its own (hand-checked) definition.
fn rotation(c: &MlaConfig) -> (Vec<f64>, f64, f64) {
    let r = c.rope as usize;
    match &c.rope_scaling {
        None => (
            (0..r / 2)
                .map(|i| c.rope_theta.powf(-2.0 * i as f64 / r as f64))
                .collect(),
            1.0,
            1.0,
        ),
        Some(y) => (
            y.inv_freq(c.rope_theta, r),
            y.rotation_magnitude(),
            y.attention_factor(),
        ),
    }
}

/// MLA for one sequence, token by token and head by head.
fn host_mla(c: &MlaConfig, a: &[Arg], t: usize) -> Vec<f64> {
    let u = |n: i64| n as usize;
    let (d, h, nope, rp, vd) = (u(c.d), u(c.heads), u(c.nope), u(c.rope), u(c.v));
    let (ql, kl, qk) = (u(c.q_lora), u(c.kv_lora), nope + rp);
    let w: Vec<&[f64]> = a.iter().map(values).collect();
    let [x, q_down, q_norm, q_up, kv_down, kv_norm, kv_up, out] = w[..] else {
        panic!(
            "the input and MLA's seven weights, got {} arguments",
            w.len()
        )
    };
    let (inv, mag, factor) = rotation(c);
    let mut qs = vec![vec![vec![0.0; qk]; h]; t];
    let mut ks = vec![vec![vec![0.0; qk]; h]; t];
    let mut vs = vec![vec![vec![0.0; vd]; h]; t];
    for i in 0..t {
        let xi = &x[i * d..(i + 1) * d];
        let cq = rms(&matmul(xi, q_down, 1, d, ql), q_norm, c.eps);
        let q = matmul(&cq, q_up, 1, ql, h * qk);
        let lat = matmul(xi, kv_down, 1, d, kl + rp);
        let k_rope = rope(&lat[kl..], i, &inv, mag);
        let kv = matmul(
            &rms(&lat[..kl], kv_norm, c.eps),
            kv_up,
            1,
            kl,
            h * (nope + vd),
        );
        for hh in 0..h {
            let qh = &q[hh * qk..(hh + 1) * qk];
            qs[i][hh][..nope].copy_from_slice(&qh[..nope]);
            qs[i][hh][nope..].copy_from_slice(&rope(&qh[nope..], i, &inv, mag));
            let kvh = &kv[hh * (nope + vd)..(hh + 1) * (nope + vd)];
            ks[i][hh][..nope].copy_from_slice(&kvh[..nope]);
            ks[i][hh][nope..].copy_from_slice(&k_rope);
            vs[i][hh].copy_from_slice(&kvh[nope..]);
        }
    }
    let mut attn = vec![0.0; t * h * vd];
    for i in 0..t {
        for hh in 0..h {
            let s: Vec<f64> = (0..=i)
                .map(|j| {
                    let dot: f64 = (0..qk).map(|l| qs[i][hh][l] * ks[j][hh][l]).sum();
                    factor * dot / (qk as f64).sqrt()
                })
                .collect();
            let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = s.iter().map(|v| (v - m).exp()).collect();
            let z: f64 = e.iter().sum();
            for (j, ej) in e.iter().enumerate() {
                for l in 0..vd {
                    attn[(i * h + hh) * vd + l] += ej / z * vs[j][hh][l];
                }
            }
        }
    }
    matmul(&attn, out, t, h * vd, d)
}

fn f64_arg(dims: &[i64], data: Vec<f64>) -> Arg {
    Arg {
        ty: TensorType::new(DType::F64, dims),
        data: Data::F(data),
    }
}

#[test]
fn one_token_output_is_its_own_value_projected() {
    // One token at position 0: the softmax over one key is 1 and RoPE is the identity, so
    // the output is out(v), whatever the queries. With x = (1, 1, 0, 0, 0, 0) (mean square
    // 1/3) and kv_down taking x's first two features into latent 0 and 1 (value 1 each),
    // the latent (1, 1, 0, 0) has mean square 1/2, so RMSNorm (weights 1) gives
    // (√2, √2, 0, 0). kv_up maps latent 0 to head 0's value feature 0 and latent 1 to head
    // 1's value feature 2: values (√2, 0, 0) and (0, 0, √2). out maps head 0 feature 0 to
    // output 0 and head 1 feature 2 to output 5 with weight 3: y = (√2, 0, 0, 0, 0, 3√2).
    let c = MlaConfig { eps: 0.0, ..SMALL };
    let mut a = random_args(&c, 1, 3);
    a[0] = f64_arg(&[1, 1, 6], vec![1.0, 1.0, 0.0, 0.0, 0.0, 0.0]);
    let (kl, rp) = (c.kv_lora as usize, c.rope as usize);
    let mut kv_down = vec![0.0; 6 * (kl + rp)];
    kv_down[0] = 1.0; // x0 → latent 0
    kv_down[(kl + rp) + 1] = 1.0; // x1 → latent 1
    a[4] = f64_arg(&[6, (kl + rp) as i64], kv_down);
    a[5] = f64_arg(&[kl as i64], vec![1.0; kl]);
    let per_head = (c.nope + c.v) as usize; // 5: key features 0..2, value features 2..5
    let cols = 2 * per_head;
    let mut kv_up = vec![0.0; kl * cols];
    kv_up[c.nope as usize] = 1.0; // latent 0 → head 0 value 0
    kv_up[cols + per_head + c.nope as usize + 2] = 1.0; // latent 1 → head 1 value 2
    a[6] = f64_arg(&[kl as i64, cols as i64], kv_up);
    let mut out = vec![0.0; 6 * 6];
    out[0] = 1.0; // head 0 value 0 → output 0
    out[5 * 6 + 5] = 3.0; // head 1 value 2 → output 5
    a[7] = f64_arg(&[6, 6], out);
    let y = run(&c, &a);
    let r2 = 2f64.sqrt();
    let want = [r2, 0.0, 0.0, 0.0, 0.0, 3.0 * r2];
    for (i, (g, w)) in y.iter().zip(&want).enumerate() {
        assert!((g - w).abs() < 1e-12, "y[{i}] = {g}, want {w}");
    }
}

#[test]
fn matches_a_loop_by_loop_host_implementation() {
    matches_host(&SMALL, 4);
}

/// YaRN (`rope_scaling`): interpolated frequencies on the rotary features, scaled rotations
/// and attention logits. A context of 6 positions over 4 pairs puts the ramp between pairs.
#[test]
fn yarn_matches_the_host_implementation() {
    let c = MlaConfig {
        rope: 8,
        rope_scaling: Some(Yarn {
            factor: 4.0,
            original_context: 6.0,
            beta_fast: 2.0,
            beta_slow: 0.5,
            mscale: 0.7,
            mscale_all_dim: 1.0,
        }),
        ..SMALL
    };
    let (inv, mag, factor) = rotation(&c);
    let plain: Vec<f64> = (0..4)
        .map(|i| 10_000f64.powf(-2.0 * i as f64 / 8.0))
        .collect();
    assert!(inv.iter().zip(&plain).any(|(a, b)| a != b), "{inv:?}");
    assert!(mag != 1.0 && factor != 1.0);
    matches_host(&c, 5);
}

fn matches_host(c: &MlaConfig, t: i64) {
    let a = random_args(c, t, 7);
    let got = run(c, &a);
    let want = host_mla(c, &a, t as usize);
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-12 * (1.0 + w.abs()),
            "y[{i}] = {g}, want {w}"
        );
    }
}

/// Blockwise attention (`attention_block`: the online softmax over key blocks) is the same
/// attention: blocks of 2 and 3 of 6 positions against the host implementation, which attends
/// to every earlier position at once, and its VJP against central differences.
#[test]
fn blockwise_attention_matches_the_host_implementation() {
    for block in [2, 3] {
        let c = MlaConfig {
            attention_block: Some(block),
            ..SMALL
        };
        matches_host(&c, 6);
    }
    let c = MlaConfig {
        attention_block: Some(2),
        ..SMALL
    };
    let client = common::cpu_client(1);
    check_vjp(
        &client,
        "mla, blocks of 2",
        &random_args(&c, 4, 17),
        TOL,
        layer(&c),
    );
}

/// A block that does not split the sequence is refused with the config, naming the field.
#[test]
fn an_attention_block_that_does_not_split_the_sequence_is_refused() {
    let small = stackscan_models::deepseek3::DeepSeek3Config::small(3, 1, 1);
    let bad = stackscan_models::deepseek3::DeepSeek3Config {
        mla: MlaConfig {
            attention_block: Some(3),
            ..small.mla
        },
        ..small
    };
    let e = bad.validate().unwrap_err().to_string();
    assert!(
        e.contains("mla.attention_block` 3") && e.contains("`seq` 8"),
        "{e}"
    );
}

#[test]
fn vjp_matches_central_differences() {
    let client = common::cpu_client(1);
    let a = random_args(&SMALL, 3, 13);
    check_vjp(&client, "mla", &a, TOL, layer(&SMALL));
}

#[test]
fn a_wrong_weight_shape_names_the_weight() {
    let s = Scope::new("f");
    let c = SMALL;
    let shapes = c.weight_shapes();
    let mut w: Vec<Tensor> = shapes
        .iter()
        .map(|(_, d)| s.param(TensorType::new(DType::F32, d.clone())))
        .collect();
    let kv_norm = shapes
        .iter()
        .position(|(name, _)| name == "kv_norm")
        .expect("MLA has a kv_norm weight");
    w[kv_norm] = s.param(TensorType::new(DType::F32, [3]));
    let x = s.param(TensorType::new(DType::F32, [1, 2, 6]));
    let err = mla(&c, &x, &Mla::from_values(w).unwrap()).unwrap_err();
    let Error::InvalidOp { op, message } = &err else {
        panic!("{err}")
    };
    assert_eq!(*op, "mla");
    assert!(message.contains("`kv_norm`"), "{message}");
}
