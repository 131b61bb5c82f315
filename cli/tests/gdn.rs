//! The chunked Gated DeltaNet against its recurrent reference, executed on the CPU plugin:
//! outputs (f32), gradients of `Σ o·w` (f64), and finiteness under strongly decaying gates.
//!
//! Agreement is measured as `max |a − b| / max |b|` over all elements, `b` the reference, so a
//! tolerance reads as a fraction of the output's scale.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan::rng::Rng;
use stackscan::{DType, Function, Scope, Tensor, TensorType};
use stackscan_models::gdn::{gdn_chunked, gdn_recurrent, gdn_recurrent_from};
use stackscan_runtime::testing as common;
use stackscan_runtime::testing::host::{HostArg as Arg, compile, execute, one, run};

/// The tiny config's GDN head size and sequence; heads reduced to 2.
const T: i64 = 64;
const H: i64 = 2;
const DK: i64 = 32;
const DV: i64 = 32;
const CHUNK: usize = 16;

/// `q, k, v, g, beta` for a GDN of the test's sizes, with log-gates uniform in `gate`.
fn inputs(seed: u64, gate: (f64, f64)) -> Vec<Arg> {
    let mut rng = Rng::new(seed);
    let mut arg = |dims: &[i64], lo: f64, hi: f64| Arg {
        dims: dims.to_vec(),
        values: rng.uniform(lo, hi, dims.iter().product::<i64>() as usize),
    };
    vec![
        arg(&[T, H, DK], -1.0, 1.0),
        arg(&[T, H, DK], -1.0, 1.0),
        arg(&[T, H, DV], -1.0, 1.0),
        arg(&[T, H], gate.0, gate.1),
        arg(&[T, H], 0.05, 0.95),
    ]
}

#[derive(Clone, Copy, Debug)]
enum Form {
    Recurrent,
    Chunked(usize),
}

fn gdn(form: Form, p: &[Tensor]) -> stackscan::Result<Tensor> {
    match form {
        Form::Recurrent => gdn_recurrent(&p[0], &p[1], &p[2], &p[3], &p[4]),
        Form::Chunked(c) => gdn_chunked(&p[0], &p[1], &p[2], &p[3], &p[4], c),
    }
}

/// `o = gdn(q, k, v, g, beta)`.
fn forward(form: Form, dtype: DType, args: &[Arg]) -> Function {
    let s = Scope::new("gdn");
    let p: Vec<Tensor> = args
        .iter()
        .map(|a| s.param(TensorType::new(dtype, a.dims.clone())))
        .collect();
    let o = gdn(form, &p).unwrap();
    s.finish(&[o]).unwrap()
}

/// `Σ o·w`: parameters `q, k, v, g, beta, w`.
fn loss(form: Form, dtype: DType, args: &[Arg]) -> Function {
    let s = Scope::new("gdn_loss");
    let p: Vec<Tensor> = args
        .iter()
        .map(|a| s.param(TensorType::new(dtype, a.dims.clone())))
        .collect();
    let w = s.param(TensorType::new(dtype, [T, H, DV]));
    let loss = gdn(form, &p).unwrap().mul(&w).unwrap().sum_all().unwrap();
    s.finish(&[loss]).unwrap()
}

/// The gradients of `Σ o·w` with respect to `q, k, v, g, beta`. Parameters: `q, k, v, g,
/// beta, w` and the loss's cotangent (pass [`one`]).
fn gradients(form: Form, dtype: DType, args: &[Arg]) -> Function {
    let f = loss(form, dtype, args);
    stackscan::vjp_wrt(&f, &[true, true, true, true, true, false]).unwrap()
}

/// `max |a − b| / max |b|`.
fn relative_error(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    let err = a
        .iter()
        .zip(b)
        .fold(0.0f64, |m, (x, y)| m.max((x - y).abs()));
    err / scale
}

/// The recurrence on the host in f64, straight from its definition: an independent check
/// of `gdn_recurrent` itself.
fn host_reference(args: &[Arg]) -> Vec<f64> {
    let (t, h, dk, dv) = (T as usize, H as usize, DK as usize, DV as usize);
    let (q, k, v, g, beta) = (
        &args[0].values,
        &args[1].values,
        &args[2].values,
        &args[3].values,
        &args[4].values,
    );
    let normalized = |x: &[f64], scale: f64| -> Vec<f64> {
        let norm = (x.iter().map(|a| a * a).sum::<f64>() + 1e-6).sqrt();
        x.iter().map(|a| a / norm * scale).collect()
    };
    let mut o = vec![0.0; t * h * dv];
    for head in 0..h {
        let mut s = vec![0.0; dv * dk];
        for step in 0..t {
            let at = (step * h + head) * dk;
            let qt = normalized(&q[at..at + dk], 1.0 / (dk as f64).sqrt());
            let kt = normalized(&k[at..at + dk], 1.0);
            let vt = &v[(step * h + head) * dv..][..dv];
            let alpha = g[step * h + head].exp();
            let b = beta[step * h + head];
            for r in 0..dv {
                let row = &mut s[r * dk..][..dk];
                let sk: f64 = row.iter().zip(&kt).map(|(a, b)| a * b).sum();
                let u = b * (vt[r] - alpha * sk);
                for (x, kc) in row.iter_mut().zip(&kt) {
                    *x = alpha * *x + u * kc;
                }
                o[(step * h + head) * dv + r] = row.iter().zip(&qt).map(|(a, b)| a * b).sum();
            }
        }
    }
    o
}

#[test]
fn chunked_output_matches_recurrent_f32() {
    let client = common::cpu_client(1);
    let args = inputs(1, (-0.3, 0.0));
    let recurrent = &run(
        &client,
        &forward(Form::Recurrent, DType::F32, &args),
        DType::F32,
        &args,
    )[0];
    let chunked = &run(
        &client,
        &forward(Form::Chunked(CHUNK), DType::F32, &args),
        DType::F32,
        &args,
    )[0];
    let exact = host_reference(&args);
    let vs_host = relative_error(recurrent, &exact);
    let err = relative_error(chunked, recurrent);
    eprintln!("f32: chunked vs recurrent {err:e}; recurrent vs host f64 {vs_host:e}");
    assert!(vs_host <= 1e-5, "recurrent vs host reference: {vs_host:e}");
    assert!(err <= 1e-5, "chunked vs recurrent: {err:e}");
}

#[test]
fn every_chunk_size_matches_recurrent_f64() {
    let client = common::cpu_client(1);
    let args = inputs(2, (-0.3, 0.0));
    let recurrent = &run(
        &client,
        &forward(Form::Recurrent, DType::F64, &args),
        DType::F64,
        &args,
    )[0];
    let vs_host = relative_error(recurrent, &host_reference(&args));
    eprintln!("f64: recurrent vs host {vs_host:e}");
    assert!(vs_host <= 1e-12, "recurrent vs host reference: {vs_host:e}");
    for chunk in [1, 4, 64] {
        let f = forward(Form::Chunked(chunk), DType::F64, &args);
        let err = relative_error(&run(&client, &f, DType::F64, &args)[0], recurrent);
        eprintln!("f64: chunk {chunk}: chunked vs recurrent {err:e}");
        assert!(err <= 1e-12, "chunk {chunk}: chunked vs recurrent {err:e}");
    }
}

#[test]
fn chunked_gradients_match_recurrent_f64() {
    let client = common::cpu_client(1);
    let mut args = inputs(3, (-0.3, 0.0));
    let mut rng = Rng::new(4);
    args.push(Arg {
        dims: vec![T, H, DV],
        values: rng.uniform(-1.0, 1.0, (T * H * DV) as usize),
    });
    args.push(one());
    let reference = run(
        &client,
        &gradients(Form::Recurrent, DType::F64, &args[..5]),
        DType::F64,
        &args,
    );
    let chunked = run(
        &client,
        &gradients(Form::Chunked(CHUNK), DType::F64, &args[..5]),
        DType::F64,
        &args,
    );
    assert_eq!(reference.len(), 5);
    assert_eq!(chunked.len(), 5);
    for (name, (a, b)) in ["q", "k", "v", "g", "beta"]
        .iter()
        .zip(chunked.iter().zip(&reference))
    {
        let err = relative_error(a, b);
        eprintln!("f64: d/d{name}: chunked vs recurrent {err:e}");
        assert!(err <= 1e-9, "d/d{name}: chunked vs recurrent {err:e}");
    }
    // Both could share a wrong rule; central differences of the loss pin a few elements of
    // each gradient to the function itself.
    let loss_exe = compile(&client, &loss(Form::Chunked(CHUNK), DType::F64, &args[..5]));
    let at = |args: &[Arg]| execute(&client, &loss_exe, DType::F64, &args[..6])[0][0];
    let step = 1e-5;
    let mut worst = 0.0f64;
    for (i, name) in ["q", "k", "v", "g", "beta"].iter().enumerate() {
        let picks = rng.uniform(0.0, args[i].values.len() as f64, 4);
        for j in picks.into_iter().map(|x| x as usize) {
            let mut shifted = args.clone();
            shifted[i].values[j] += step;
            let plus = at(&shifted);
            shifted[i].values[j] -= 2.0 * step;
            let minus = at(&shifted);
            let fd = (plus - minus) / (2.0 * step);
            let err = (chunked[i][j] - fd).abs() / fd.abs().max(chunked[i][j].abs()).max(1e-3);
            worst = worst.max(err);
            assert!(
                err <= 1e-6,
                "d/d{name}[{j}]: vjp {} vs finite difference {fd}",
                chunked[i][j]
            );
        }
    }
    eprintln!("f64: chunked vjp vs central differences (20 elements) {worst:e}");
}

/// Log-gates of −20 to −40 per step sum to about −500 within a chunk, so `exp(γ_i − γ_j)` above
/// the diagonal would be `exp(+hundreds) = inf` in f32. Masking by a product after `exp` makes
/// the output NaN; masking by a select after `exp` keeps the output finite but not the
/// gradient, whose `exp` rule multiplies the zero cotangent by `inf`.
#[test]
fn strong_decay_gives_no_nan_f32() {
    let client = common::cpu_client(1);
    let mut args = inputs(5, (-40.0, -20.0));
    let mut rng = Rng::new(6);
    args.push(Arg {
        dims: vec![T, H, DV],
        values: rng.uniform(-1.0, 1.0, (T * H * DV) as usize),
    });
    args.push(one());
    let fwd = forward(Form::Chunked(CHUNK), DType::F32, &args[..5]);
    let chunked = &run(&client, &fwd, DType::F32, &args[..5])[0];
    assert!(chunked.iter().all(|x| x.is_finite()), "non-finite output");
    let recurrent = &run(
        &client,
        &forward(Form::Recurrent, DType::F32, &args[..5]),
        DType::F32,
        &args[..5],
    )[0];
    let err = relative_error(chunked, recurrent);
    eprintln!("f32, g ≈ −30: chunked vs recurrent {err:e}");
    assert!(err <= 1e-5, "chunked vs recurrent: {err:e}");
    let grads = run(
        &client,
        &gradients(Form::Chunked(CHUNK), DType::F32, &args[..5]),
        DType::F32,
        &args,
    );
    for (name, grad) in ["q", "k", "v", "g", "beta"].iter().zip(&grads) {
        assert!(grad.iter().all(|x| x.is_finite()), "non-finite d/d{name}");
    }
}

/// Generation's form: the recurrence run in two pieces, the second continuing from the
/// first's final state, gives the one-pass outputs (f64, to 1e-12 of their scale); a padded
/// position (β and the gate 0) between the pieces leaves the state as it was.
#[test]
fn continuing_from_a_state_equals_one_pass_f64() {
    let client = common::cpu_client(1);
    let args = inputs(21, (-1.0, 0.0));
    let whole = run(
        &client,
        &forward(Form::Recurrent, DType::F64, &args),
        DType::F64,
        &args,
    )
    .remove(0);
    let half = T / 2;
    let s = Scope::new("pieces");
    let p: Vec<Tensor> = args
        .iter()
        .map(|a| {
            let mut dims = vec![1];
            dims.extend(&a.dims);
            s.param(TensorType::new(DType::F64, dims))
        })
        .collect();
    let piece = |from: i64, to: i64| -> Vec<Tensor> {
        p.iter()
            .map(|x| x.slice_axis(1, from, to).unwrap())
            .collect()
    };
    let zero = s
        .full(0.0, TensorType::new(DType::F64, [1, H, DV, DK]))
        .unwrap();
    let step = |x: &[Tensor], state: &Tensor| {
        gdn_recurrent_from(&x[0], &x[1], &x[2], &x[3], &x[4], state).unwrap()
    };
    let (o1, s1) = step(&piece(0, half), &zero);
    // One padded position: the first piece's last, with β and the gate zeroed.
    let mut pad = piece(half - 1, half);
    pad[3] = pad[3].zeros_like().unwrap();
    pad[4] = pad[4].zeros_like().unwrap();
    let (_, padded) = step(&pad, &s1);
    let (o2, _) = step(&piece(half, T), &padded);
    let o = stackscan::concatenate(&[&o1, &o2], 1).unwrap();
    let drift = padded.sub(&s1).unwrap().abs().unwrap().sum_all().unwrap();
    let f = s.finish(&[o, drift]).unwrap();
    let batched: Vec<Arg> = args
        .iter()
        .map(|a| Arg {
            dims: [&[1], a.dims.as_slice()].concat(),
            values: a.values.clone(),
        })
        .collect();
    let out = run(&client, &f, DType::F64, &batched);
    let err = relative_error(&out[0], &whole);
    assert!(err <= 1e-12, "two pieces vs one pass: {err:e}");
    assert_eq!(out[1], vec![0.0], "a padded position moved the state");
}

#[test]
fn bad_shapes_are_typed_errors() {
    let s = Scope::new("bad");
    let p = |dims: &[i64]| s.param(TensorType::new(DType::F32, dims));
    let (q, k, v) = (p(&[8, 2, 4]), p(&[8, 2, 4]), p(&[8, 2, 3]));
    let (g, beta) = (p(&[8, 2]), p(&[8, 2]));
    let short = p(&[7, 2]);
    let flat = p(&[8, 4]);
    let ints = s.param(TensorType::new(DType::I32, [8, 2, 4]));
    assert!(gdn_recurrent(&q, &k, &v, &g, &beta).is_ok());
    assert!(gdn_chunked(&q, &k, &v, &g, &beta, 0).is_err());
    assert!(gdn_chunked(&q, &k, &v, &g, &beta, 3).is_err());
    assert!(gdn_chunked(&q, &k, &v, &short, &beta, 4).is_err());
    assert!(gdn_recurrent(&q, &k, &v, &g, &short).is_err());
    assert!(gdn_recurrent(&flat, &k, &v, &g, &beta).is_err());
    assert!(gdn_recurrent(&q, &v, &v, &g, &beta).is_err());
    assert!(gdn_recurrent(&ints, &ints, &v, &g, &beta).is_err());
}

/// Fewer key heads than value heads (Qwen3.5's 16/32, here 1/2): the key head serves both
/// value heads, exactly as if its q and k were repeated, and the forms still agree.
#[test]
fn grouped_key_heads_serve_consecutive_value_heads_f64() {
    let client = common::cpu_client(1);
    let full = inputs(4, (-0.3, 0.0));
    let (t, dk) = (T as usize, DK as usize);
    // Key head 0 of q and k, shape [T, 1, DK].
    let narrow = |a: &Arg| Arg {
        dims: vec![T, 1, DK],
        values: (0..t)
            .flat_map(|i| a.values[i * 2 * dk..i * 2 * dk + dk].to_vec())
            .collect(),
    };
    // That head repeated for both value heads, shape [T, 2, DK].
    let repeated = |a: &Arg| Arg {
        dims: vec![T, H, DK],
        values: (0..t)
            .flat_map(|i| {
                let row = &a.values[i * dk..(i + 1) * dk];
                row.iter().chain(row).copied().collect::<Vec<_>>()
            })
            .collect(),
    };
    let (q1, k1) = (narrow(&full[0]), narrow(&full[1]));
    let grouped = vec![
        q1.clone(),
        k1.clone(),
        full[2].clone(),
        full[3].clone(),
        full[4].clone(),
    ];
    let explicit = vec![
        repeated(&q1),
        repeated(&k1),
        full[2].clone(),
        full[3].clone(),
        full[4].clone(),
    ];
    let out = |form: Form, args: &[Arg]| {
        run(&client, &forward(form, DType::F64, args), DType::F64, args).remove(0)
    };
    let reference = out(Form::Recurrent, &explicit);
    let err = relative_error(&out(Form::Recurrent, &grouped), &reference);
    assert!(err <= 1e-14, "grouped recurrent vs repeated heads: {err:e}");
    let err = relative_error(&out(Form::Chunked(CHUNK), &grouped), &reference);
    assert!(err <= 1e-12, "grouped chunked vs repeated heads: {err:e}");
    // Value heads must be a multiple of key heads.
    let s = Scope::new("bad");
    let q = s.param(TensorType::new(DType::F64, [T, 2, DK]));
    let v = s.param(TensorType::new(DType::F64, [T, 3, DV]));
    let gate = s.param(TensorType::new(DType::F64, [T, 3]));
    let e = gdn_recurrent(&q, &q, &v, &gate, &gate).unwrap_err();
    assert!(e.to_string().contains("do not split"), "{e}");
}

/// A batch of sequences `[B, T, H, d]` gives each sequence exactly what it gives alone
/// (`[T, H, d]`), in both forms and with fewer key than value heads (f64): folding the batch
/// into the heads' batch dimension mixes no sequence with another.
#[test]
fn a_batch_of_sequences_equals_each_sequence_alone_f64() {
    let client = common::cpu_client(1);
    let batch = 3usize;
    let per_sequence: Vec<Vec<Arg>> = (0..batch as u64)
        .map(|i| {
            let mut a = inputs(20 + i, (-0.5, 0.0));
            // One key head for the two value heads: q and k keep head 0.
            for x in &mut a[..2] {
                let dk = DK as usize;
                x.values = x
                    .values
                    .chunks(2 * dk)
                    .flat_map(|row| row[..dk].to_vec())
                    .collect();
                x.dims = vec![T, 1, DK];
            }
            a
        })
        .collect();
    // Stack the sequences along a new leading dimension.
    let stacked: Vec<Arg> = (0..5)
        .map(|j| Arg {
            dims: [batch as i64]
                .into_iter()
                .chain(per_sequence[0][j].dims.iter().copied())
                .collect(),
            values: per_sequence
                .iter()
                .flat_map(|a| a[j].values.clone())
                .collect(),
        })
        .collect();
    for form in [Form::Recurrent, Form::Chunked(CHUNK)] {
        let together = run(
            &client,
            &forward(form, DType::F64, &stacked),
            DType::F64,
            &stacked,
        )
        .remove(0);
        let one_sequence = compile(&client, &forward(form, DType::F64, &per_sequence[0]));
        let alone: Vec<f64> = per_sequence
            .iter()
            .flat_map(|a| execute(&client, &one_sequence, DType::F64, a).remove(0))
            .collect();
        assert_eq!(together.len(), alone.len());
        let err = relative_error(&together, &alone);
        eprintln!("{form:?}: batch of {batch} vs one at a time {err:e}");
        assert!(err <= 1e-14, "{form:?}: batch vs one at a time {err:e}");
    }
}
