//! Lowering `scan` to `stablehlo.while` (a counter, per-step dynamic slices of the scanned
//! inputs, and per-step dynamic updates of the stacked outputs) or, for a single trip asked
//! to be kept, to `stablehlo.case`; and `softmax` to its composite: ops that exist for what
//! autodiff makes of them, not for the emitter.
//!
//! A graph pass like autodiff, run by [`Program::emit`](crate::Program::emit) before writing:
//! it replays the function through the builder ([`replay`]), so the lowered loops are checked
//! like any other nodes and the emitter only ever sees `while` and `case`.

use crate::builder::{Scope, Tensor};
use crate::dtype::DType;
use crate::error::Result;
use crate::ir::{Function, Op, ScanParts};
use crate::replay::{NodeAt, Replay, replay};
use crate::types::TensorType;

mod kept_step;

use kept_step::lower_kept_single_trip;

/// The frontend attribute that asks XLA to keep a loop of one trip (it inlines one
/// otherwise). On a scan of one trip with stacked outputs it makes the lowering write a
/// `case` instead ([`lower_kept_single_trip`]); one whose outputs are all carried stays a
/// loop.
pub(crate) const KEEP_SINGLE_TRIP: (&str, &str) =
    ("skip-simplify-while-loops_trip-count-one", "true");

/// `f` with every `scan` (at any depth) replaced by an equivalent `while`, and every
/// `softmax` by its composite.
pub(crate) fn lower_scans(f: &Function) -> Result<Function> {
    lower(f, Lower::ScansAndSoftmax)
}

/// `f` with every `softmax` (at any depth) replaced by its composite, scans kept: what the
/// cost model walks, so that it counts the passes XLA will run.
pub(crate) fn expand_softmax(f: &Function) -> Result<Function> {
    lower(f, Lower::Softmax)
}

/// What a lowering replaces.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lower {
    /// Scans by loops and softmaxes by their composite: what the emitter needs.
    ScansAndSoftmax,
    /// Softmaxes only.
    Softmax,
}

impl Lower {
    fn replaces(self, op: &Op) -> bool {
        match op {
            Op::Softmax { .. } => true,
            Op::Scan { .. } => self == Lower::ScansAndSoftmax,
            _ => false,
        }
    }

    /// Whether `f` has a node this lowering replaces, at any depth.
    fn needed_in(self, f: &Function) -> bool {
        f.nodes
            .iter()
            .any(|n| self.replaces(&n.op) || n.op.regions().into_iter().any(|r| self.needed_in(r)))
    }
}

/// `f` replayed with what `what` replaces lowered, loop bodies in turn; `f` itself where
/// nothing is.
fn lower(f: &Function, what: Lower) -> Result<Function> {
    if !what.needed_in(f) {
        return Ok(f.clone());
    }
    let s = Scope::new(&f.name);
    let args: Vec<Tensor> = f
        .params
        .iter()
        .map(|&p| s.param(f.values[p].clone()))
        .collect();
    let out = replay(&s, f, &args, &mut Lowering(what))?.results(f);
    s.finish(&out)
}

/// The replay pass of [`lower`].
struct Lowering(Lower);

impl Replay for Lowering {
    fn node(&mut self, at: &NodeAt<'_>) -> Result<Vec<Tensor>> {
        let (s, node, operands) = (at.scope, at.node(), at.operands);
        let what = self.0;
        if what == Lower::ScansAndSoftmax
            && let Some(scan) = ScanParts::of(&node.op)
        {
            let body = lower(scan.body, what)?;
            let kept = scan
                .frontend_attributes
                .iter()
                .any(|(k, v)| (k.as_str(), v.as_str()) == KEEP_SINGLE_TRIP);
            let stacks = body.results.len() > scan.num_carry;
            if scan.length == 1 && kept && stacks {
                return lower_kept_single_trip(s, &scan, &body, operands);
            }
            return lower_scan(s, &scan, &body, operands);
        }
        if let Op::Softmax { axis } = node.op {
            return at.with_attributes(|| Ok(vec![softmax_composite(operands[0], axis)?]));
        }
        if !node.op.regions().into_iter().any(|r| what.needed_in(r)) {
            return at.copy();
        }
        let mut op = node.op.clone();
        match &mut op {
            Op::While { cond, body, .. } => {
                **cond = lower(cond, what)?;
                **body = lower(body, what)?;
            }
            Op::Case { branches, .. } => {
                for b in branches.iter_mut() {
                    *b = lower(b, what)?;
                }
            }
            Op::Scan { body, .. } => **body = lower(body, what)?,
            _ => return at.copy(),
        }
        s.apply_here(op, operands, None)
    }
}

/// `exp(x − m) / Σ exp(x − m)` along `axis`, `m` the maximum along it (for range only).
fn softmax_composite(x: &Tensor, axis: usize) -> Result<Tensor> {
    let kept: Vec<usize> = (0..x.rank()).filter(|&d| d != axis).collect();
    let m = x
        .max_over(&[axis])?
        .stop_gradient()?
        .broadcast_in_dim(x.dims(), &kept)?;
    let e = x.sub(&m)?.exp()?;
    let z = e.sum(&[axis])?.broadcast_in_dim(x.dims(), &kept)?;
    e.div(&z)
}

/// The loop equivalent to `scan` on `operands`, with `body` (the scan's body, already
/// lowered) as its step.
fn lower_scan(
    s: &Scope,
    scan: &ScanParts<'_>,
    body: &Function,
    operands: &[&Tensor],
) -> Result<Vec<Tensor>> {
    let ScanParts {
        length,
        num_carry,
        reverse,
        frontend_attributes,
        ..
    } = *scan;
    let (carry, xs, consts) = scan.split_operands(operands);
    let ys_types: Vec<_> = body.result_types()[num_carry..].to_vec();
    if length == 0 {
        // No step runs: the carry passes through and every stacked output is empty.
        let mut out: Vec<Tensor> = carry.iter().map(|&t| t.clone()).collect();
        for y in &ys_types {
            let mut dims = vec![0];
            dims.extend(&y.dims);
            out.push(s.full(0.0, y.with_dims(dims))?);
        }
        return Ok(out);
    }
    let mut init = vec![s.scalar(0.0, DType::I32)?];
    init.extend(carry.iter().map(|&t| t.clone()));
    let seed = carry
        .iter()
        .copied()
        .find(|t| t.dims().iter().all(|&d| d > 0));
    for (j, y) in ys_types.iter().enumerate() {
        let mut dims = vec![length as i64];
        dims.extend(&y.dims);
        init.push(stacked_outputs(s, seed, j, &y.with_dims(dims))?);
    }
    let attrs: Vec<(&str, &str)> = frontend_attributes
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let out = s.while_loop(
        &init,
        |cs, c| c[0].lt(&cs.scalar(length as f64, DType::I32)?),
        |bs, c| {
            let i = &c[0];
            let idx = if reverse {
                bs.scalar((length - 1) as f64, DType::I32)?.sub(i)?
            } else {
                i.clone()
            };
            let zero = bs.scalar(0.0, DType::I32)?;
            let mut args: Vec<Tensor> = c[1..=num_carry].to_vec();
            for x in xs {
                let mut starts = vec![&idx];
                starts.extend(std::iter::repeat_n(&zero, x.rank() - 1));
                let mut sizes = x.dims().to_vec();
                sizes[0] = 1;
                let slice = x.dynamic_slice(&starts, &sizes)?;
                args.push(slice.reshape(&x.dims()[1..])?);
            }
            args.extend(consts.iter().map(|&t| t.clone()));
            let results =
                replay(bs, body, &args, &mut Lowering(Lower::ScansAndSoftmax))?.results(body);
            let mut next = vec![i.add(&bs.scalar(1.0, DType::I32)?)?];
            next.extend(results[..num_carry].iter().cloned());
            for (acc, y) in c[1 + num_carry..].iter().zip(&results[num_carry..]) {
                let mut starts = vec![&idx];
                starts.extend(std::iter::repeat_n(&zero, y.rank()));
                next.push(acc.dynamic_update_slice(&y.expand_dims(0)?, &starts)?);
            }
            Ok(next)
        },
        &attrs,
    )?;
    Ok(out[1..].to_vec())
}

/// The buffer a loop's stacked outputs are written into, of type `ty`. Every row is
/// overwritten before the loop ends, so its initial contents are never read; what matters is
/// where it is allocated. A zero constant would be: XLA shares one broadcast among the loops
/// of a shape, copies it once per loop, and schedules those copies at the start of the program,
/// so every stacked output (the weights and deferred gradient a peeled FSDP step passes on)
/// stays live through everything before its loop. A broadcast of an element of the loop's own
/// carry (`seed`) cannot start before the loop's inputs exist, needs no copy, and is the
/// loop's buffer from there on. Output `j` takes element `j` (wrapping): outputs of one shape
/// broadcasting the same element would be one value after XLA's common-subexpression pass,
/// copied into each output's buffer. Without a non-empty carry, zeros.
fn stacked_outputs(s: &Scope, seed: Option<&Tensor>, j: usize, ty: &TensorType) -> Result<Tensor> {
    let Some(seed) = seed else {
        return s.full(0.0, ty.clone());
    };
    let n: i64 = seed.dims().iter().product();
    let at = j as i64 % n;
    let element = seed
        .reshape(&[n])?
        .slice(&[at], &[at + 1], &[1])?
        .reshape(&[])?;
    element.convert(ty.dtype)?.broadcast_to(&ty.dims)
}
