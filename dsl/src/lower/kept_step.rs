//! A scan of one trip that asks to be kept ([`KEEP_SINGLE_TRIP`]) and stacks outputs,
//! lowered to a `case` on an index XLA cannot fold: its last branch runs the step, its first
//! (never taken) returns zeros.
//!
//! A loop of one trip would keep the step as a unit too, but its stacked outputs (a peeled
//! FSDP step's next weights and deferred gradient, shaped unlike what it takes) would be loop
//! carries, each with a buffer to start from. libtpu makes each such buffer, whose contents
//! are never read, an allocation that depends on nothing, and schedules all of a pass's at
//! the pass's start (seeding it from the carry, as [`super::lower_scan`] does, does not hold
//! it back there): every peeled step's outputs were live at once, seven layers of weights
//! where the plan holds two. A case's results are allocated where it runs.
//!
//! A case's results are new buffers, so whatever of the carry passes through it would be
//! copied: a carry the step leaves as it is (another kind's gradient stacks) is not passed
//! through, and one it updates in place (a row of a stack written by `dynamic_update_slice`)
//! has that update applied after the case, from the row and its start the case returns, in a
//! loop of one trip of its own ([`write_rows`]).

use std::collections::HashMap;

use crate::builder::{Branch, Scope, Tensor};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ir::{Function, Op, ScanParts, ValueId};
use crate::replay::replay;

use super::{KEEP_SINGLE_TRIP, Lower, Lowering};

/// What becomes of one carried value of the step.
enum Carried {
    /// The step returns it unchanged: it stays outside the case.
    Through,
    /// The step writes rows into it: each `(update, starts)`, in order, applied after the
    /// case.
    Updated(Vec<(ValueId, Vec<ValueId>)>),
    /// Anything else: a result of the case.
    Returned,
}

/// How the step `body` (parameters `[carry…, x…, consts…]`) produces carry `j`, `made_by`
/// giving the node that makes each value ([`makers`]).
fn carried(body: &Function, made_by: &HashMap<ValueId, usize>, j: usize) -> Carried {
    let param = body.params[j];
    let mut at = body.results[j];
    if at == param {
        return Carried::Through;
    }
    let mut writes = Vec::new();
    while let Some(node) = made_by.get(&at).map(|&n| &body.nodes[n]) {
        if node.op != Op::DynamicUpdateSlice {
            break;
        }
        writes.push((node.operands[1], node.operands[2..].to_vec()));
        at = node.operands[0];
        if at == param {
            writes.reverse();
            return Carried::Updated(writes);
        }
    }
    Carried::Returned
}

/// The node of `body` that makes each of its values.
fn makers(body: &Function) -> HashMap<ValueId, usize> {
    body.nodes
        .iter()
        .enumerate()
        .flat_map(|(n, node)| node.results.iter().map(move |&v| (v, n)))
        .collect()
}

/// The kept single trip of `scan` (whose `body` is already lowered) on `operands`.
pub(super) fn lower_kept_single_trip(
    s: &Scope,
    scan: &ScanParts<'_>,
    body: &Function,
    operands: &[&Tensor],
) -> Result<Vec<Tensor>> {
    let (carry, xs, consts) = scan.split_operands(operands);
    let mut args: Vec<Tensor> = carry.iter().map(|&t| t.clone()).collect();
    for x in xs {
        args.push(x.reshape(&x.dims()[1..])?);
    }
    args.extend(consts.iter().map(|&t| t.clone()));
    let made_by = makers(body);
    let plan: Vec<Carried> = (0..scan.num_carry)
        .map(|j| carried(body, &made_by, j))
        .collect();
    // The step's values the case returns: the carries it makes anew, the rows and starts it
    // writes into the others, then its stacked outputs.
    let mut returned: Vec<ValueId> = Vec::new();
    for (j, c) in plan.iter().enumerate() {
        match c {
            Carried::Through => {}
            Carried::Updated(writes) => {
                for (update, starts) in writes {
                    returned.push(*update);
                    returned.extend(starts);
                }
            }
            Carried::Returned => returned.push(body.results[j]),
        }
    }
    returned.extend(&body.results[scan.num_carry..]);
    // The step as the case runs it: what it returns, without the row writes made after it
    // (they would make the whole stacks operands of the case).
    let step_body = body.returning(&returned);
    let never: Branch<'_> = Box::new(|bs: &Scope| {
        returned
            .iter()
            .map(|&v| bs.full(0.0, body.values[v].clone()))
            .collect()
    });
    let step: Branch<'_> = Box::new(|bs: &Scope| {
        let values = replay(bs, &step_body, &args, &mut Lowering(Lower::ScansAndSoftmax))?;
        Ok(returned.iter().map(|&v| values[v].clone()).collect())
    });
    let attrs: Vec<(&str, &str)> = scan
        .frontend_attributes
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .filter(|&kv| kv != KEEP_SINGLE_TRIP)
        .collect();
    let index = opaque_one(s, &args)?;
    let mut next = s
        .case_with_attributes(&index, vec![never, step], &attrs)?
        .into_iter();
    let mut results = Vec::with_capacity(scan.num_carry + returned.len());
    // Each written stack's rows and starts, in the case's order, written after it.
    let mut written: Vec<Written> = Vec::new();
    for (j, c) in plan.iter().enumerate() {
        results.push(match c {
            Carried::Through => carry[j].clone(),
            Carried::Updated(writes) => {
                let mut rows = Vec::with_capacity(writes.len());
                for (_, starts) in writes {
                    let update = take(&mut next)?;
                    let starts = (0..starts.len())
                        .map(|_| take(&mut next))
                        .collect::<Result<_>>()?;
                    rows.push((update, starts));
                }
                written.push((j, rows));
                carry[j].clone()
            }
            Carried::Returned => take(&mut next)?,
        });
    }
    write_rows(s, &mut results, &written)?;
    for y in next {
        results.push(y.expand_dims(0)?);
    }
    Ok(results)
}

/// A stack the step writes rows into: its index among the carries, and each row with its
/// starts, in the order written.
type Written = (usize, Vec<(Tensor, Vec<Tensor>)>);

/// Writes each stack's rows (`written`: its index in `stacks` and its `(row, starts)`s) in a
/// loop of one trip kept by XLA, as the step's own loop did: in place, and a unit XLA fuses
/// nothing across. Written in the enclosing computation instead, the last writes of a pass
/// feed the optimizer's reads of the gradient stacks directly, and XLA CPU fused one write
/// into each of two readers, copying the stack (all its layers) for the other.
fn write_rows(s: &Scope, stacks: &mut [Tensor], written: &[Written]) -> Result<()> {
    if written.is_empty() {
        return Ok(());
    }
    let mut init = vec![s.scalar(0.0, DType::I32)?];
    init.extend(written.iter().map(|(j, _)| stacks[*j].clone()));
    let out = s.while_loop(
        &init,
        |cs, c| c[0].lt(&cs.scalar(1.0, DType::I32)?),
        |bs, c| {
            let mut next = vec![c[0].add(&bs.scalar(1.0, DType::I32)?)?];
            for ((_, rows), stack) in written.iter().zip(&c[1..]) {
                let mut v = stack.clone();
                for (row, starts) in rows {
                    v = v.dynamic_update_slice(row, &starts.iter().collect::<Vec<_>>())?;
                }
                next.push(v);
            }
            Ok(next)
        },
        &[KEEP_SINGLE_TRIP],
    )?;
    for ((j, _), v) in written.iter().zip(&out[1..]) {
        stacks[*j] = v.clone();
    }
    Ok(())
}

/// The next of the case's results.
fn take(results: &mut impl Iterator<Item = Tensor>) -> Result<Tensor> {
    results
        .next()
        .ok_or_else(|| Error::invalid("case", "internal: fewer results than planned"))
}

/// `1 + i32(a · 0)` for the first element `a` of the first non-empty floating tensor of
/// `args` ([`Tensor::depending_on`]): one on every finite input, and not a constant XLA can
/// fold the case on; any value but `0` runs the step. `1` where there is no such tensor.
fn opaque_one(s: &Scope, args: &[Tensor]) -> Result<Tensor> {
    let one = s.scalar(1.0, DType::I32)?;
    match args
        .iter()
        .find(|t| t.dtype().is_float() && t.dims().iter().all(|&d| d > 0))
    {
        Some(a) => one.depending_on(a),
        None => Ok(one),
    }
}
