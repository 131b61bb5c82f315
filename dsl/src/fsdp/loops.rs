//! The loops a pass becomes: the plan's segments walked in order, each group a loop of its
//! steps, each block loop a counted loop whose trip shifts the layers of its groups.
//!
//! Forward and backward share these combinators: a pass supplies only its state (a
//! [`Carry`]) and how one step at a symbolic position transforms it.

use crate::builder::{Scope, Tensor};
use crate::dtype::DType;
use crate::error::Result;
use crate::lower::KEEP_SINGLE_TRIP;
use crate::plan::{Group, LoopForm, Segment};

use super::state::{Around, Carry};

/// The frontend attribute that names what a loop of a pass runs (`forward attn, layers 1–6,
/// ping-pong`). XLA keeps frontend attributes through its passes, so a report on the optimized
/// program (`stackscan compile-report`) can say which loop is which.
pub const LOOP_LABEL: &str = "stackscan_loop";

/// The attributes of a loop of `trips` trips labelled `label`: the label, and for one trip
/// the mark that keeps its loop (and so the same structure at every depth).
fn attributes(trips: usize, label: &str) -> Vec<(&str, &str)> {
    let mut out = vec![(LOOP_LABEL, label)];
    if trips == 1 {
        // Keeps the step a unit, not folded into its surroundings. The lowering writes a
        // kept single trip that stacks outputs (a peeled step's) as a `case`
        // (`lower::lower_kept_single_trip`); one that carries all it returns stays a loop.
        out.push(KEEP_SINGLE_TRIP);
    }
    out
}

/// What follows a ping-pong group's label on the loop of its odd first step.
pub const ODD_FIRST_STEP: &str = ", odd first step";

/// What a group's loop runs, for its [`LOOP_LABEL`]: `pass` (`forward`, `backward`), the
/// kind's name, its layers and its loop form. A report on the compiled program finds a
/// group's loop by it (`stackscan timeline --compiled`); a ping-pong group's odd first step
/// is this label followed by [`ODD_FIRST_STEP`].
pub fn group_label(pass: &str, g: &Group, kind: &str) -> String {
    let layers = match (g.layers.first(), g.layers.last()) {
        (Some(a), Some(b)) if a != b => format!("layers {a}–{b}"),
        (Some(a), _) => format!("layer {a}"),
        _ => "no layers".to_owned(),
    };
    let form = match g.form {
        LoopForm::Simple { .. } => "simple",
        LoopForm::PingPong { .. } => "ping-pong",
        LoopForm::Peeled => "peeled",
    };
    format!("{pass} {kind}, {layers}, {form}")
}

/// The trip counter of the enclosing block loop, if any, and the layer offset per trip.
#[derive(Clone)]
pub(super) struct Trip {
    pub(super) t: Tensor,
    pub(super) stride: isize,
}

/// One step of a pass: `(group, enclosing block trip, position in the group, ends, state) →
/// state`; `ends`: the step is the last of its loop body (not the first of a ping-pong trip),
/// so what it leaves for later crosses a loop boundary.
pub(super) type StepFn<'a, C> = dyn Fn(&Group, Option<&Trip>, &Tensor, bool, C) -> Result<C> + 'a;

/// Runs a pass's segments in order: each group as its loop of `step`s, each block loop as a
/// counted loop whose trip shifts the groups' layers. `pass` (`forward`, `backward`) and
/// `kind` (a step's kind name by index) label the loops ([`LOOP_LABEL`]).
pub(super) fn run_pass<C: Carry>(
    s: &Scope,
    pass: &str,
    kind: &dyn Fn(usize) -> String,
    segments: &[Segment],
    state: C,
    step: &StepFn<'_, C>,
) -> Result<C> {
    let label = |g: &Group| group_label(pass, g, &kind(g.signature.run));
    let mut st = state;
    for seg in segments {
        st = match seg {
            Segment::Group(g) => run_group(s, g.form, &label(g), st, &|q, ends, st| {
                step(g, None, q, ends, st)
            })?,
            Segment::Blocks {
                trips,
                stride,
                groups,
            } => {
                let blocks = format!("{pass} blocks, {trips} trips");
                counted_loop(s, *trips, &blocks, st, |t, mut st| {
                    let trip = Trip {
                        t: t.clone(),
                        stride: *stride,
                    };
                    for g in groups {
                        st = run_group(t.scope(), g.form, &label(g), st, &|q, ends, st| {
                            step(g, Some(&trip), q, ends, st)
                        })?;
                    }
                    Ok(st)
                })?
            }
        };
    }
    Ok(st)
}

/// `trips` trips of `body(trip counter, state)` in one loop, the counter carried first. A
/// loop of one trip is marked so XLA keeps it, and so the same structure at every depth.
fn counted_loop<C: Carry>(
    s: &Scope,
    trips: usize,
    label: &str,
    state: C,
    body: impl FnOnce(&Tensor, C) -> Result<C>,
) -> Result<C> {
    let layout = state.layout();
    let mut carry = vec![s.scalar(0.0, DType::I32)?];
    carry.extend(state.flatten());
    let (out, _) = s.scan_with_attributes(
        &carry,
        &[],
        trips,
        false,
        &attributes(trips, label),
        |bs, c, _| {
            let st = body(&c[0], C::unflatten(&c[1..], &layout))?;
            let mut next = vec![c[0].add(&bs.scalar(1.0, DType::I32)?)?];
            next.extend(st.flatten());
            Ok((next, vec![]))
        },
    )?;
    Ok(C::unflatten(&out[1..], &layout))
}

/// The loop of one group: `step(position in the group, state)` run `per trip` times per
/// trip, after one peeled step (in a loop of its own) for an odd ping-pong group; a peeled
/// group is a single-step loop ([`single_step`]).
fn run_group<C: Carry>(
    s: &Scope,
    form: LoopForm,
    label: &str,
    state: C,
    step: &dyn Fn(&Tensor, bool, C) -> Result<C>,
) -> Result<C> {
    let (trips, per_trip, peel) = match form {
        LoopForm::Simple { trips } => (trips, 1, false),
        LoopForm::PingPong { trips, peel_first } => (trips, 2, peel_first),
        LoopForm::Peeled => return single_step(s, label, state, step, Around::ByKind),
    };
    let mut state = state;
    if peel {
        let first = format!("{label}{ODD_FIRST_STEP}");
        state = single_step(s, &first, state, step, Around::Weights)?;
    }
    let first = i64::from(peel);
    counted_loop(s, trips, label, state, |i, mut st| {
        let bs = i.scope();
        for j in 0..per_trip {
            let q = i
                .mul(&bs.scalar(per_trip as f64, DType::I32)?)?
                .add(&bs.scalar((first + j) as f64, DType::I32)?)?;
            st = step(&q, j + 1 == per_trip, st)?;
        }
        Ok(st)
    })
}

/// One step in a single-trip loop (a peeled step, or a ping-pong group's odd first step),
/// `part` of its state passed around the loop's carry ([`Around`]).
fn single_step<C: Carry>(
    s: &Scope,
    label: &str,
    state: C,
    step: &dyn Fn(&Tensor, bool, C) -> Result<C>,
    part: Around,
) -> Result<C> {
    let layout_in = state.layout();
    let mut layout_out = layout_in.clone();
    let (carried, around) = state.split(part);
    let (out, ys) = single_trip(s, label, &carried, |q, c| {
        let st = step(q, true, C::join(c, &around, part, &layout_in))?;
        layout_out = st.layout();
        Ok(st.split(part))
    })?;
    Ok(C::join(&out, &ys, part, &layout_out))
}

/// A single-trip loop (marked so XLA keeps it) over `carry`, whose body also returns values
/// of another shape than the carry; those leave as the loop's scanned outputs.
fn single_trip(
    s: &Scope,
    label: &str,
    carry: &[Tensor],
    body: impl FnOnce(&Tensor, &[Tensor]) -> Result<(Vec<Tensor>, Vec<Tensor>)>,
) -> Result<(Vec<Tensor>, Vec<Tensor>)> {
    let (out, ys) =
        s.scan_with_attributes(carry, &[], 1, false, &attributes(1, label), |bs, c, _| {
            body(&bs.scalar(0.0, DType::I32)?, c)
        })?;
    let ys = ys
        .iter()
        .map(|y| y.reshape(&y.dims()[1..]))
        .collect::<Result<_>>()?;
    Ok((out, ys))
}
