//! The state a pass threads through its loops, and how it travels as a loop carry.
//!
//! A loop carry is a flat list of tensors of one fixed shape, so each state knows how to
//! flatten itself and split the list again. Part of a state has a shape that depends on the
//! kind of the layer a step runs (the gathered weights, the pending deferred gradient); a
//! peeled step, whose neighbours run another kind, passes that part around its loop's carry
//! instead of through it.

use crate::builder::Tensor;

/// A loop carry that travels as a flat list of tensors.
pub(super) trait Carry: Sized {
    /// What [`Carry::unflatten`] and [`Carry::join`] need to split the list again.
    type Layout: Clone;
    fn layout(&self) -> Self::Layout;
    fn flatten(&self) -> Vec<Tensor>;
    fn unflatten(v: &[Tensor], layout: &Self::Layout) -> Self;
    /// The state as `(carried, around)`: what a single-trip loop carries, and what passes
    /// around it (captured in, scanned out) — see [`Around`].
    fn split(self, part: Around) -> (Vec<Tensor>, Vec<Tensor>);
    /// The inverse of [`Carry::split`].
    fn join(carried: &[Tensor], around: &[Tensor], part: Around, layout: &Self::Layout) -> Self;
}

/// What of a state a single-trip loop passes around its carry: captured as the loop's input,
/// returned as its scanned output.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Around {
    /// Everything whose shape follows the kind run or prefetched (the gathered weights and
    /// the pending gradient): a peeled step, whose neighbours run other kinds, so what it
    /// takes and passes on has shapes unlike what it computes with. Only the fixed part is
    /// carried; the step ties the pending gradient to the carried fence before scattering it,
    /// so that scatter is still built in the loop body ([`super::pass`]).
    ByKind,
    /// The gathered weights alone: a ping-pong group's odd first step. Carried, the weights it
    /// takes would share a buffer with those it gathers for the next step while it still reads
    /// them, and XLA copied both sets into and out of the loop every step. The pending gradient
    /// has the group's shape and stays in the carry: passed around, its reduce-scatter, which
    /// reads nothing of the loop's, would be built outside the loop.
    Weights,
}

/// The forward state: the activation, the gathered weights of the layer about to run, the
/// stacks of saved layer inputs per kind ([`super::rows`]), and the auxiliary outputs summed
/// so far (one `f32[]` per name, none for a model that records none).
pub(super) struct FwdState {
    pub(super) h: Tensor,
    pub(super) w: Vec<Tensor>,
    pub(super) saved: Vec<Vec<Tensor>>,
    pub(super) aux: Vec<Tensor>,
}

/// Lengths of a flattened [`FwdState`]: gathered weights, saved-input stacks per kind.
#[derive(Clone)]
pub(super) struct FwdLayout {
    w: usize,
    saved: Vec<usize>,
}

impl Carry for FwdState {
    type Layout = FwdLayout;

    fn layout(&self) -> FwdLayout {
        FwdLayout {
            w: self.w.len(),
            saved: self.saved.iter().map(Vec::len).collect(),
        }
    }

    fn flatten(&self) -> Vec<Tensor> {
        let mut v = vec![self.h.clone()];
        v.extend(self.w.iter().cloned());
        v.extend(self.saved.iter().flatten().cloned());
        v.extend(self.aux.iter().cloned());
        v
    }

    fn unflatten(v: &[Tensor], l: &FwdLayout) -> Self {
        let saved_end = 1 + l.w + l.saved.iter().sum::<usize>();
        FwdState {
            h: v[0].clone(),
            w: v[1..1 + l.w].to_vec(),
            saved: regroup(&v[1 + l.w..saved_end], &l.saved),
            aux: v[saved_end..].to_vec(),
        }
    }

    /// Only the weights follow the kind forward, so both parts pass the same values around.
    fn split(self, _: Around) -> (Vec<Tensor>, Vec<Tensor>) {
        let mut fixed = vec![self.h];
        fixed.extend(self.saved.into_iter().flatten());
        fixed.extend(self.aux);
        (fixed, self.w)
    }

    fn join(fixed: &[Tensor], w: &[Tensor], _: Around, l: &FwdLayout) -> Self {
        let saved_end = 1 + l.saved.iter().sum::<usize>();
        FwdState {
            h: fixed[0].clone(),
            w: w.to_vec(),
            saved: regroup(&fixed[1..saved_end], &l.saved),
            aux: fixed[saved_end..].to_vec(),
        }
    }
}

/// The backward state: activation cotangent, gathered weights of the layer about to run,
/// the pending deferred gradient, the stacked gradient slabs per kind, and the fence the
/// next recompute waits for: the last reduce-scatter, and a deferring step's input cotangent
/// (an `i32[]` zero computed from them, see
/// [`Lowering::after`](super::lowering::Lowering::after)).
pub(super) struct BwdState {
    pub(super) dh: Tensor,
    pub(super) fence: Tensor,
    pub(super) w: Vec<Tensor>,
    pub(super) pending: Vec<Tensor>,
    pub(super) grads: Vec<Vec<Tensor>>,
}

/// Lengths of a flattened [`BwdState`].
#[derive(Clone)]
pub(super) struct BwdLayout {
    w: usize,
    pending: usize,
    grads: Vec<usize>,
}

impl Carry for BwdState {
    type Layout = BwdLayout;

    fn layout(&self) -> BwdLayout {
        BwdLayout {
            w: self.w.len(),
            pending: self.pending.len(),
            grads: self.grads.iter().map(Vec::len).collect(),
        }
    }

    fn flatten(&self) -> Vec<Tensor> {
        let mut v = vec![self.dh.clone(), self.fence.clone()];
        v.extend(self.w.iter().cloned());
        v.extend(self.pending.iter().cloned());
        v.extend(self.grads.iter().flatten().cloned());
        v
    }

    fn unflatten(v: &[Tensor], l: &BwdLayout) -> Self {
        let w = v[2..2 + l.w].to_vec();
        let pending = v[2 + l.w..2 + l.w + l.pending].to_vec();
        BwdState {
            dh: v[0].clone(),
            fence: v[1].clone(),
            w,
            pending,
            grads: regroup(&v[2 + l.w + l.pending..], &l.grads),
        }
    }

    fn split(self, part: Around) -> (Vec<Tensor>, Vec<Tensor>) {
        let mut carried = vec![self.dh, self.fence];
        let mut around = self.w;
        match part {
            Around::ByKind => around.extend(self.pending),
            Around::Weights => carried.extend(self.pending),
        }
        carried.extend(self.grads.into_iter().flatten());
        (carried, around)
    }

    fn join(carried: &[Tensor], around: &[Tensor], part: Around, l: &BwdLayout) -> Self {
        let (pending, grads) = match part {
            Around::ByKind => (around[l.w..].to_vec(), &carried[2..]),
            Around::Weights => (
                carried[2..2 + l.pending].to_vec(),
                &carried[2 + l.pending..],
            ),
        };
        BwdState {
            dh: carried[0].clone(),
            fence: carried[1].clone(),
            w: around[..l.w].to_vec(),
            pending,
            grads: regroup(grads, &l.grads),
        }
    }
}

/// Splits `flat` into consecutive lists of the given lengths.
fn regroup(flat: &[Tensor], sizes: &[usize]) -> Vec<Vec<Tensor>> {
    let mut at = 0;
    sizes
        .iter()
        .map(|&n| {
            let g = flat[at..at + n].to_vec();
            at += n;
            g
        })
        .collect()
}
