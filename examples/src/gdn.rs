//! The Gated DeltaNet core for one sequence, in two forms that compute the same function: a
//! step-by-step recurrence (the reference) and the chunked form used for training.
//!
//! Per value head the state `S ∈ R^{dv×dk}` starts at zero and follows
//!
//! ```text
//! S_t = α_t S_{t−1} + β_t (v_t − α_t S_{t−1} k_t) k_tᵀ,    o_t = S_t q_t,
//! ```
//!
//! with `q`, `k` L2-normalised along `dk` and `q` also scaled by `1/√dk`. The inputs are
//! already projected: `q, k: [T, Hk, dk]`, `v: [T, H, dv]`, the log-gate `g = ln α: [T, H]`
//! (`g ≤ 0`) and `β: [T, H]` in `(0, 1)`; both forms return `o: [T, H, dv]`. As in Qwen3.5
//! (16 key heads, 32 value heads) there may be fewer key heads than value heads: `H` must be a
//! multiple of `Hk`, and value head `j` reads key head `j / (H / Hk)`. Heads are a batch
//! dimension throughout.
//!
//! ```
//! use stackscan::{DType, Scope, TensorType};
//! use stackscan_examples::gdn::{gdn_chunked, gdn_recurrent};
//!
//! let (t, h, dk, dv) = (8, 2, 4, 3);
//! let s = Scope::new("gdn");
//! let q = s.param(TensorType::new(DType::F32, [t, h, dk]));
//! let k = s.param(TensorType::new(DType::F32, [t, h, dk]));
//! let v = s.param(TensorType::new(DType::F32, [t, h, dv]));
//! let g = s.param(TensorType::new(DType::F32, [t, h]));
//! let beta = s.param(TensorType::new(DType::F32, [t, h]));
//! let reference = gdn_recurrent(&q, &k, &v, &g, &beta)?;
//! let chunked = gdn_chunked(&q, &k, &v, &g, &beta, 4)?;
//! assert_eq!(reference.dims(), &[t, h, dv]);
//! assert_eq!(chunked.dims(), reference.dims());
//! // A chunk that does not divide the sequence is a typed error, not a panic.
//! assert!(gdn_chunked(&q, &k, &v, &g, &beta, 3).is_err());
//! # Ok::<(), stackscan::Error>(())
//! ```

use stackscan::{DotDims, Error, Result, Tensor, TensorType, TriangularSolve};

/// Added to `Σ x²` before the inverse square root of the L2 normalisation.
const L2_EPS: f64 = 1e-6;

/// The sizes shared by both forms, read from validated inputs.
#[derive(Clone, Copy, Debug)]
struct Sizes {
    t: i64,
    h: i64,
    dk: i64,
    dv: i64,
}

/// Checks the five inputs against `q`'s `[T, H, dk]` and returns the sizes.
fn check_inputs(
    op: &'static str,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    g: &Tensor,
    beta: &Tensor,
) -> Result<Sizes> {
    let invalid = |message: String| Error::InvalidOp { op, message };
    let [t, h, dk] = *q.dims() else {
        return Err(invalid(format!("expected q: [T, H, dk], got {}", q.ty())));
    };
    let dtype = q.dtype();
    if !dtype.is_float() {
        return Err(Error::UnsupportedDType {
            op,
            expected: "a floating-point",
            actual: q.ty().clone(),
        });
    }
    let dv = match v.dims() {
        [vt, vh, dv] if (*vt, *vh) == (t, h) => *dv,
        _ => {
            return Err(invalid(format!(
                "expected v: [{t}, {h}, dv], got {}",
                v.ty()
            )));
        }
    };
    let expected = [
        (k, TensorType::new(dtype, [t, h, dk])),
        (v, TensorType::new(dtype, [t, h, dv])),
        (g, TensorType::new(dtype, [t, h])),
        (beta, TensorType::new(dtype, [t, h])),
    ];
    for (x, want) in expected {
        if *x.ty() != want {
            return Err(Error::ShapeMismatch {
                op,
                lhs: want,
                rhs: x.ty().clone(),
            });
        }
    }
    if t == 0 {
        return Err(invalid("the sequence is empty".into()));
    }
    Ok(Sizes { t, h, dk, dv })
}

/// `q` and `k` with their `Hk` key heads repeated to the `H` value heads of `v` (each key
/// head serves `H / Hk` consecutive value heads); unchanged when the counts are equal.
fn expand_key_heads(
    op: &'static str,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
) -> Result<(Tensor, Tensor)> {
    let (Some(&hk), Some(&hv)) = (q.dims().get(1), v.dims().get(1)) else {
        // Ranks are wrong; `check_inputs` names the problem.
        return Ok((q.clone(), k.clone()));
    };
    if hk == hv || q.rank() != 3 || k.dims() != q.dims() {
        return Ok((q.clone(), k.clone()));
    }
    if hk == 0 || hv % hk != 0 {
        return Err(Error::InvalidOp {
            op,
            message: format!("{hv} value heads do not split over {hk} key heads"),
        });
    }
    let (t, dk, group) = (q.dims()[0], q.dims()[2], hv / hk);
    let expand = |x: &Tensor| -> Result<Tensor> {
        x.broadcast_in_dim(&[t, hk, group, dk], &[0, 1, 3])?
            .reshape(&[t, hv, dk])
    };
    Ok((expand(q)?, expand(k)?))
}

/// `q` and `k` normalised along `dk` (their last dimension), `q` also scaled by `1/√dk`, so
/// that `|k| ≈ 1` keeps the delta-rule update `S (I − β k kᵀ)` a contraction.
fn normalize_qk(q: &Tensor, k: &Tensor, dk: i64) -> Result<(Tensor, Tensor)> {
    let last = q.rank() - 1;
    let q = stackscan::nn::l2_normalize(q, last, L2_EPS)?.scale(1.0 / (dk as f64).sqrt())?;
    let k = stackscan::nn::l2_normalize(k, last, L2_EPS)?;
    Ok((q, k))
}

/// `dot_general` with the leading `batch` dimensions of both operands as batch dimensions,
/// contracting `lhs_contract` with `rhs_contract`.
fn batched_dot(
    lhs: &Tensor,
    rhs: &Tensor,
    batch: usize,
    lhs_contract: usize,
    rhs_contract: usize,
) -> Result<Tensor> {
    let b: Vec<usize> = (0..batch).collect();
    lhs.dot_general(
        rhs,
        DotDims {
            lhs_batch: b.clone(),
            rhs_batch: b,
            lhs_contract: vec![lhs_contract],
            rhs_contract: vec![rhs_contract],
        },
    )
}

/// The recurrence itself, one `scan` step per token; the reference the chunked form must
/// match.
///
/// The carry is the state of every head, `S: [H, dv, dk]`. A step reads `S_{t−1} k_t` once
/// and uses the rank-one form of the update, so its cost is `O(H·dv·dk)` and nothing larger
/// than the state is materialised. Fails with a typed error on inputs that do not have the
/// shapes of the module docs or differ in element type.
pub fn gdn_recurrent(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    g: &Tensor,
    beta: &Tensor,
) -> Result<Tensor> {
    let (q, k) = expand_key_heads("gdn_recurrent", q, k, v)?;
    let Sizes { t, h, dk, dv } = check_inputs("gdn_recurrent", &q, &k, v, g, beta)?;
    let (q, k) = normalize_qk(&q, &k, dk)?;
    let scope = q.scope().clone();
    let state = TensorType::new(q.dtype(), [h, dv, dk]);
    let s0 = scope.full(0.0, state.clone())?;
    let xs = [q, k, v.clone(), g.clone(), beta.clone()];
    let (_, ys) = scope.scan(&[s0], &xs, t as usize, false, |_, carry, x| {
        let ([s], [q, k, v, g, beta]) = (carry, x) else {
            return Err(Error::InvalidOp {
                op: "gdn_recurrent",
                message: "the scan body got the wrong inputs".into(),
            });
        };
        let alpha = g.exp()?;
        let per_head = |x: &Tensor| x.broadcast_in_dim(&[h, dv], &[0]);
        // u_t = β_t (v_t − α_t S_{t−1} k_t): the part of v_t the decayed state does not predict.
        let predicted = batched_dot(s, k, 1, 2, 1)?.mul(&per_head(&alpha)?)?;
        let u = v.sub(&predicted)?.mul(&per_head(beta)?)?;
        let decayed = s.mul(&alpha.broadcast_in_dim(&state.dims, &[0])?)?;
        let write = u
            .broadcast_in_dim(&state.dims, &[0, 1])?
            .mul(&k.broadcast_in_dim(&state.dims, &[0, 2])?)?;
        let s = decayed.add(&write)?;
        let o = batched_dot(&s, q, 1, 2, 1)?;
        Ok((vec![s], vec![o]))
    })?;
    ys.into_iter().next().ok_or_else(|| Error::InvalidOp {
        op: "gdn_recurrent",
        message: "the scan returned no output".into(),
    })
}

/// The chunked form: the same function as [`gdn_recurrent`], with the sequential work cut from
/// `T` steps to `T / chunk` and the rest done as batched matrix products.
///
/// Inside a chunk that starts from state `S₀`, let `γ_i = Σ_{s≤i} g_s` (the cumulative
/// log-gate from the chunk's start) and `Γ_ij = exp(γ_i − γ_j)` for `i ≥ j`. Unrolling the
/// recurrence shows that every state in the chunk has the form
///
/// ```text
/// S_i = e^{γ_i} S₀ + Σ_{j≤i} Γ_ij u_j k_jᵀ,
/// u_i = β_i (v_i − e^{γ_i} S₀ k_i − Σ_{j<i} Γ_ij (k_jᵀ k_i) u_j),
/// ```
///
/// so the rows `u_i` solve the unit lower-triangular system `(I + A) U = β ⊙ (V − e^γ ⊙ K S₀ᵀ)`
/// with `A_ij = β_i Γ_ij k_iᵀ k_j` for `j < i`. The right-hand side is linear in `S₀`, so
/// one solve per chunk, independent of the state, gives `Ũ = (I + A)⁻¹ (β ⊙ V)` and
/// `W = (I + A)⁻¹ (β e^γ ⊙ K)` (the WY representation), and `U = Ũ − W S₀ᵀ`. All the solves
/// run batched before the loop; the `scan` over chunks carries only `S` and does
///
/// ```text
/// O     = (e^γ ⊙ Q) S₀ᵀ + (Γ ⊙ Q Kᵀ) U,
/// S_end = e^{γ_C} S₀ + Uᵀ (e^{γ_C − γ} ⊙ K).
/// ```
///
/// Every exponent used is `≤ 0` when `g ≤ 0`, except `γ_i − γ_j` above the diagonal, which
/// can be hundreds for strongly decaying gates: there the exponent is replaced by 0 *before*
/// `exp` and the result selected away, since `exp` would give `inf` and `inf · 0` is NaN in
/// the forward pass and again in the gradient. Fails with a typed error if `chunk` is 0 or
/// does not divide `T`, or on inputs that do not fit the module docs.
pub fn gdn_chunked(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    g: &Tensor,
    beta: &Tensor,
    chunk: usize,
) -> Result<Tensor> {
    const OP: &str = "gdn_chunked";
    let (q, k) = expand_key_heads(OP, q, k, v)?;
    let Sizes { t, h, dk, dv } = check_inputs(OP, &q, &k, v, g, beta)?;
    let c = chunk as i64;
    if c == 0 || t % c != 0 {
        return Err(Error::InvalidOp {
            op: OP,
            message: format!("chunk {chunk} must be positive and divide the sequence length {t}"),
        });
    }
    let n = t / c;
    let (q, k) = normalize_qk(&q, &k, dk)?;
    let scope = q.scope().clone();
    let dtype = q.dtype();

    // [T, H, d] → [N, H, C, d] and [T, H] → [N, H, C]: chunks and heads lead as batch dims.
    let by_chunk = |x: &Tensor, d: i64| -> Result<Tensor> {
        x.reshape(&[n, c, h, d])?.transpose(&[0, 2, 1, 3])
    };
    let gate_by_chunk =
        |x: &Tensor| -> Result<Tensor> { x.reshape(&[n, c, h])?.transpose(&[0, 2, 1]) };
    let (q, k, v) = (by_chunk(&q, dk)?, by_chunk(&k, dk)?, by_chunk(v, dv)?);
    let (g, beta) = (gate_by_chunk(g)?, gate_by_chunk(beta)?);

    let pairs = [n, h, c, c];
    let rows = |x: &Tensor| x.broadcast_in_dim(&pairs, &[0, 1, 2]);
    let cols = |x: &Tensor| x.broadcast_in_dim(&pairs, &[0, 1, 3]);
    let feature = |x: &Tensor, d: i64| x.broadcast_in_dim(&[n, h, c, d], &[0, 1, 2]);
    let index = TensorType::new(stackscan::DType::I32, pairs);
    let (i, j) = (scope.iota(index.clone(), 2)?, scope.iota(index, 3)?);
    let (causal, strict) = (i.ge(&j)?, i.gt(&j)?);
    let zeros = scope.full(0.0, TensorType::new(dtype, pairs))?;

    let gamma = g.cumsum(2, false)?;
    let exponent = causal.select(&rows(&gamma)?.sub(&cols(&gamma)?)?, &zeros)?;
    let decay = causal.select(&exponent.exp()?, &zeros)?;

    let kk = batched_dot(&k, &k, 2, 3, 3)?;
    let a = strict.select(&rows(&beta)?.mul(&decay)?.mul(&kk)?, &zeros)?;
    let gate_start = gamma.exp()?;
    let rhs = stackscan::concatenate(
        &[
            &v.mul(&feature(&beta, dv)?)?,
            &k.mul(&feature(&beta.mul(&gate_start)?, dk)?)?,
        ],
        3,
    )?;
    let solved = a.triangular_solve(
        &rhs,
        TriangularSolve {
            left_side: true,
            lower: true,
            unit_diagonal: true,
            transpose_a: false,
        },
    )?;
    let u_free = solved.slice_axis(3, 0, dv)?;
    let w = solved.slice_axis(3, dv, dv + dk)?;
    let attend = decay.mul(&batched_dot(&q, &k, 2, 3, 3)?)?;
    let q_decayed = q.mul(&feature(&gate_start, dk)?)?;
    let gamma_end = gamma.slice_axis(2, c - 1, c)?;
    let to_end = gamma_end
        .broadcast_in_dim(&[n, h, c], &[0, 1, 2])?
        .sub(&gamma)?
        .exp()?;
    let k_to_end = k.mul(&feature(&to_end, dk)?)?;
    let chunk_decay = gamma_end.reshape(&[n, h])?.exp()?;

    let state = TensorType::new(dtype, [h, dv, dk]);
    let s0 = scope.full(0.0, state.clone())?;
    let xs = [u_free, w, attend, q_decayed, k_to_end, chunk_decay];
    let (_, ys) = scope.scan(&[s0], &xs, n as usize, false, |_, carry, x| {
        let ([s], [u_free, w, attend, q_decayed, k_to_end, chunk_decay]) = (carry, x) else {
            return Err(Error::InvalidOp {
                op: OP,
                message: "the scan body got the wrong inputs".into(),
            });
        };
        let u = u_free.sub(&batched_dot(w, s, 1, 2, 2)?)?;
        let o = batched_dot(q_decayed, s, 1, 2, 2)?.add(&batched_dot(attend, &u, 1, 2, 1)?)?;
        let carried = s.mul(&chunk_decay.broadcast_in_dim(&state.dims, &[0])?)?;
        let s = carried.add(&batched_dot(&u, k_to_end, 1, 1, 1)?)?;
        Ok((vec![s], vec![o]))
    })?;
    let o = ys.into_iter().next().ok_or_else(|| Error::InvalidOp {
        op: OP,
        message: "the scan returned no output".into(),
    })?;
    // [N, H, C, dv] → [T, H, dv]
    o.transpose(&[0, 2, 1, 3])?.reshape(&[t, h, dv])
}
