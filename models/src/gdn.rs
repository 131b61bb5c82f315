//! The Gated DeltaNet core, in two forms that compute the same function: a step-by-step
//! recurrence (the reference) and the chunked form used for training.
//!
//! Per value head the state `S ∈ R^{dv×dk}` starts at zero and follows
//!
//! ```text
//! S_t = α_t S_{t−1} + β_t (v_t − α_t S_{t−1} k_t) k_tᵀ,    o_t = S_t q_t,
//! ```
//!
//! with `q`, `k` L2-normalised along `dk` and `q` also scaled by `1/√dk`. The inputs are
//! already projected: `q, k: [T, Hk, dk]`, `v: [T, H, dv]`, the log-gate `g = ln α: [T, H]`
//! (`g ≤ 0`) and `β: [T, H]` in `(0, 1)`; both forms return `o: [T, H, dv]`. A batch of
//! independent sequences may lead every input (`[B, T, H, d]`, gates `[B, T, H]`): sequences
//! and heads are folded into one batch dimension of the states, so the program is the same
//! size whatever `B` is (a loop over the sequences would grow it with the batch). As in
//! Qwen3.5 (16 key heads, 32 value heads) there may be fewer key heads than value heads: `H`
//! must be a multiple of `Hk`, and value head `j` reads key head `j / (H / Hk)`.
//!
//! ```
//! use stackscan::{DType, Scope, TensorType};
//! use stackscan_models::gdn::{gdn_chunked, gdn_recurrent};
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

use stackscan::{DotDims, Error, Result, Tensor, TensorType};

/// Added to `Σ x²` before the inverse square root of the L2 normalisation.
const L2_EPS: f64 = 1e-6;

/// The sizes shared by both forms, read from validated inputs. `batch` is `None` for the
/// one-sequence layout `[T, H, d]` and `Some(B)` for `[B, T, H, d]`.
#[derive(Clone, Copy, Debug)]
struct Sizes {
    batch: Option<i64>,
    t: i64,
    h: i64,
    dk: i64,
    dv: i64,
}

impl Sizes {
    /// `tail` behind the batch dimension, if the inputs have one.
    fn shape(&self, tail: &[i64]) -> Vec<i64> {
        self.batch.into_iter().chain(tail.iter().copied()).collect()
    }
}

/// Checks the five inputs against `q`'s `[T, H, dk]` or `[B, T, H, dk]` and returns the
/// sizes.
fn check_inputs(
    op: &'static str,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    g: &Tensor,
    beta: &Tensor,
) -> Result<Sizes> {
    let invalid = |message: String| Error::InvalidOp { op, message };
    let (batch, t, h, dk) = match *q.dims() {
        [t, h, dk] => (None, t, h, dk),
        [b, t, h, dk] => (Some(b), t, h, dk),
        _ => {
            return Err(invalid(format!(
                "expected q: [T, H, dk] or [B, T, H, dk], got {}",
                q.ty()
            )));
        }
    };
    let dtype = q.dtype();
    if !dtype.is_float() {
        return Err(Error::UnsupportedDType {
            op,
            expected: "a floating-point",
            actual: q.ty().clone(),
        });
    }
    let mut sizes = Sizes {
        batch,
        t,
        h,
        dk,
        dv: 0,
    };
    sizes.dv = match v.dims().split_last() {
        Some((dv, lead)) if *lead == sizes.shape(&[t, h]) => *dv,
        _ => {
            let want = sizes.shape(&[t, h]);
            return Err(invalid(format!(
                "expected v: {want:?} + [dv], got {}",
                v.ty()
            )));
        }
    };
    let dv = sizes.dv;
    let expected = [
        (k, TensorType::new(dtype, sizes.shape(&[t, h, dk]))),
        (v, TensorType::new(dtype, sizes.shape(&[t, h, dv]))),
        (g, TensorType::new(dtype, sizes.shape(&[t, h]))),
        (beta, TensorType::new(dtype, sizes.shape(&[t, h]))),
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
    Ok(sizes)
}

/// `q` and `k` with their `Hk` key heads (the second-to-last dimension) repeated to the `H`
/// value heads of `v` (each key head serves `H / Hk` consecutive value heads); unchanged
/// when the counts are equal.
fn expand_key_heads(
    op: &'static str,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
) -> Result<(Tensor, Tensor)> {
    let rank = q.rank();
    if rank < 3 || v.rank() != rank || k.dims() != q.dims() {
        // Ranks or shapes are wrong; `check_inputs` names the problem.
        return Ok((q.clone(), k.clone()));
    }
    let (hk, hv) = (q.dims()[rank - 2], v.dims()[rank - 2]);
    if hk == hv {
        return Ok((q.clone(), k.clone()));
    }
    if hk == 0 || hv % hk != 0 {
        return Err(Error::InvalidOp {
            op,
            message: format!("{hv} value heads do not split over {hk} key heads"),
        });
    }
    let lead = &q.dims()[..rank - 1];
    let dk = q.dims()[rank - 1];
    let grouped: Vec<i64> = lead.iter().copied().chain([hv / hk, dk]).collect();
    let expanded: Vec<i64> = lead[..rank - 2].iter().copied().chain([hv, dk]).collect();
    // Every operand axis keeps its place except `dk`, which moves behind the new group axis.
    let keep: Vec<usize> = (0..rank - 1).chain([rank]).collect();
    let expand =
        |x: &Tensor| -> Result<Tensor> { x.broadcast_in_dim(&grouped, &keep)?.reshape(&expanded) };
    Ok((expand(q)?, expand(k)?))
}

/// Checked, key-head-expanded and normalised inputs in the batched layout `[B, T, H, d]`
/// (`[B, T, H]` for the gates), with the sizes of the caller's layout.
struct Prepared {
    sizes: Sizes,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
}

/// Validates the inputs of either form and brings them to the batched layout.
fn prepare(
    op: &'static str,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    g: &Tensor,
    beta: &Tensor,
) -> Result<Prepared> {
    let (q, k) = expand_key_heads(op, q, k, v)?;
    let sizes = check_inputs(op, &q, &k, v, g, beta)?;
    let (q, k) = normalize_qk(&q, &k, sizes.dk)?;
    let Sizes { t, h, dk, dv, .. } = sizes;
    let b = sizes.batch.unwrap_or(1);
    Ok(Prepared {
        sizes,
        q: q.reshape(&[b, t, h, dk])?,
        k: k.reshape(&[b, t, h, dk])?,
        v: v.reshape(&[b, t, h, dv])?,
        g: g.reshape(&[b, t, h])?,
        beta: beta.reshape(&[b, t, h])?,
    })
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

/// `(I + A)⁻¹` for `A` strictly lower triangular in its last two dimensions (`[…, c, c]`, two
/// leading batch dimensions), `eye` the identity of its shape. `N = −A` is nilpotent
/// (`N^c = 0`), so `(I − N)⁻¹ = I + N + … + N^{c−1} = (I + N)(I + N²)(I + N⁴)⋯`, with as
/// many factors as doublings reach `c`: `2·⌈log₂ c⌉ − 2` products of `c × c` matrices, all
/// exact in exact arithmetic (the chunked-vs-recurrent tests hold it to 1e-12 in f64).
fn unit_lower_inverse(a: &Tensor, eye: &Tensor, chunk: usize) -> Result<Tensor> {
    let mut power = a.neg()?;
    let mut inverse = eye.add(&power)?;
    let mut span = 2;
    while span < chunk {
        power = batched_dot(&power, &power, 2, 3, 2)?;
        inverse = inverse.add(&batched_dot(&inverse, &power, 2, 3, 2)?)?;
        span *= 2;
    }
    Ok(inverse)
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
    Ok(recurrence(q, k, v, g, beta, None)?.0)
}

/// [`gdn_recurrent`] of sequences `[B, T, ..]` that continue from `state: [B, H, dv, dk]`
/// (each value head's `S`), returning the outputs and the state after the last position:
/// generation's form, a prompt or a new token at a time. A position whose `β` and `g` are 0
/// leaves the state as it was (padding).
pub fn gdn_recurrent_from(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    g: &Tensor,
    beta: &Tensor,
    state: &Tensor,
) -> Result<(Tensor, Tensor)> {
    recurrence(q, k, v, g, beta, Some(state))
}

fn recurrence(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    g: &Tensor,
    beta: &Tensor,
    from: Option<&Tensor>,
) -> Result<(Tensor, Tensor)> {
    const OP: &str = "gdn_recurrent";
    let p = prepare(OP, q, k, v, g, beta)?;
    let sizes = p.sizes;
    let Sizes { t, dk, dv, .. } = sizes;
    let (b, heads) = (sizes.batch.unwrap_or(1), sizes.h);
    // Sequences and heads are independent: fold both into one batch of `B·H` states, with
    // time leading for the scan. [B, T, H, d] → [T, B·H, d], [B, T, H] → [T, B·H].
    let h = b * heads;
    let time_major = |x: &Tensor, d: i64| x.transpose(&[1, 0, 2, 3])?.reshape(&[t, h, d]);
    let gate_time_major = |x: &Tensor| x.transpose(&[1, 0, 2])?.reshape(&[t, h]);
    let scope = p.q.scope().clone();
    let state = TensorType::new(p.q.dtype(), [h, dv, dk]);
    let s0 = match from {
        None => scope.full(0.0, state.clone())?,
        Some(s) if s.dims() == [b, heads, dv, dk] && sizes.batch.is_some() => {
            s.convert(p.q.dtype())?.reshape(&state.dims)?
        }
        Some(s) => {
            return Err(Error::InvalidOp {
                op: OP,
                message: format!(
                    "a state to continue from must be [{b}, {heads}, {dv}, {dk}] for batched \
                     inputs, got {}",
                    s.ty()
                ),
            });
        }
    };
    let xs = [
        time_major(&p.q, dk)?,
        time_major(&p.k, dk)?,
        time_major(&p.v, dv)?,
        gate_time_major(&p.g)?,
        gate_time_major(&p.beta)?,
    ];
    let label = [(
        stackscan::fsdp::LOOP_LABEL,
        "gdn recurrence, one step per token",
    )];
    let (last, ys) =
        scope.scan_with_attributes(&[s0], &xs, t as usize, false, &label, |_, carry, x| {
            let ([s], [q, k, v, g, beta]) = (carry, x) else {
                return Err(Error::InvalidOp {
                    op: OP,
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
    let o = ys.into_iter().next().ok_or_else(|| Error::InvalidOp {
        op: OP,
        message: "the scan returned no output".into(),
    })?;
    let last = last.into_iter().next().ok_or_else(|| Error::InvalidOp {
        op: OP,
        message: "the scan returned no state".into(),
    })?;
    // [T, B·H, dv] → [B, T, H, dv], then the caller's layout.
    let o = o
        .reshape(&[t, b, heads, dv])?
        .transpose(&[1, 0, 2, 3])?
        .reshape(&sizes.shape(&[t, heads, dv]))?;
    // The training forward reads no final state: nothing more is emitted for it.
    let last = match from {
        Some(_) => last.reshape(&[b, heads, dv, dk])?,
        None => last,
    };
    Ok((o, last))
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
/// `W = (I + A)⁻¹ (β e^γ ⊙ K)` (the WY representation), and `U = Ũ − W S₀ᵀ`. The inverse
/// is formed by doubling (`unit_lower_inverse`): a few batched matrix products, which every
/// backend runs well and XLA compiles in a few kernels, where its triangular solve expands into
/// a row-by-row program of hundreds of instructions (and its gradient into two more), a large
/// share of the tiny Qwen3.5's compiled step. All of it runs batched before the loop; the
/// `scan` over chunks carries only `S` and does
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
    let p = prepare(OP, q, k, v, g, beta)?;
    let sizes = p.sizes;
    let Sizes { t, dk, dv, .. } = sizes;
    let (b, heads) = (sizes.batch.unwrap_or(1), sizes.h);
    let c = chunk as i64;
    if c == 0 || t % c != 0 {
        return Err(Error::InvalidOp {
            op: OP,
            message: format!("chunk {chunk} must be positive and divide the sequence length {t}"),
        });
    }
    let n = t / c;
    let scope = p.q.scope().clone();
    let dtype = p.q.dtype();

    // Sequences and heads are independent: fold both into one batch axis of `B·H`, behind
    // the chunks the scan runs over. [B, T, H, d] → [B, N, C, H, d] → [N, B, H, C, d] →
    // [N, B·H, C, d], and [B, T, H] → [N, B·H, C].
    let h = b * heads;
    let by_chunk = |x: &Tensor, d: i64| -> Result<Tensor> {
        x.reshape(&[b, n, c, heads, d])?
            .transpose(&[1, 0, 3, 2, 4])?
            .reshape(&[n, h, c, d])
    };
    let gate_by_chunk = |x: &Tensor| -> Result<Tensor> {
        x.reshape(&[b, n, c, heads])?
            .transpose(&[1, 0, 3, 2])?
            .reshape(&[n, h, c])
    };
    let (q, k, v) = (
        by_chunk(&p.q, dk)?,
        by_chunk(&p.k, dk)?,
        by_chunk(&p.v, dv)?,
    );
    let (g, beta) = (gate_by_chunk(&p.g)?, gate_by_chunk(&p.beta)?);

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
    let eye = i
        .eq(&j)?
        .select(&scope.full(1.0, TensorType::new(dtype, pairs))?, &zeros)?;
    let solved = batched_dot(&unit_lower_inverse(&a, &eye, chunk)?, &rhs, 2, 3, 2)?;
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
    let label = [(
        stackscan::fsdp::LOOP_LABEL,
        "gdn chunks, one step per chunk",
    )];
    let (_, ys) =
        scope.scan_with_attributes(&[s0], &xs, n as usize, false, &label, |_, carry, x| {
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
    // [N, B·H, C, dv] → [B, N, C, H, dv] → [B, T, H, dv], then the caller's layout.
    o.reshape(&[n, b, heads, c, dv])?
        .transpose(&[1, 0, 3, 2, 4])?
        .reshape(&sizes.shape(&[t, heads, dv]))
}
