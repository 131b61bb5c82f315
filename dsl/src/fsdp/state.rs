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
    /// The state as `(fixed, by_kind)`: the values whose shapes are the same at every step,
    /// and those whose shapes follow the kind run or prefetched.
    fn split(self) -> (Vec<Tensor>, Vec<Tensor>);
    /// The inverse of [`Carry::split`].
    fn join(fixed: &[Tensor], by_kind: &[Tensor], layout: &Self::Layout) -> Self;
    /// The state as `(rest, weights)`: the gathered weights apart, everything else (the
    /// pending gradient included) with the values of fixed shape.
    fn split_weights(self) -> (Vec<Tensor>, Vec<Tensor>);
    /// The inverse of [`Carry::split_weights`].
    fn join_weights(rest: &[Tensor], weights: &[Tensor], layout: &Self::Layout) -> Self;
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

    fn split(self) -> (Vec<Tensor>, Vec<Tensor>) {
        let mut fixed = vec![self.h];
        fixed.extend(self.saved.into_iter().flatten());
        fixed.extend(self.aux);
        (fixed, self.w)
    }

    fn join(fixed: &[Tensor], by_kind: &[Tensor], l: &FwdLayout) -> Self {
        let saved_end = 1 + l.saved.iter().sum::<usize>();
        FwdState {
            h: fixed[0].clone(),
            w: by_kind.to_vec(),
            saved: regroup(&fixed[1..saved_end], &l.saved),
            aux: fixed[saved_end..].to_vec(),
        }
    }

    /// The weights are all that follows the kind forward.
    fn split_weights(self) -> (Vec<Tensor>, Vec<Tensor>) {
        self.split()
    }

    fn join_weights(rest: &[Tensor], weights: &[Tensor], l: &FwdLayout) -> Self {
        Self::join(rest, weights, l)
    }
}

/// The backward state: activation cotangent, gathered weights of the layer about to run,
/// the pending deferred gradient, the stacked gradient slabs per kind, and the fence of the
/// last reduce-scatter (an `i32[]` zero computed from its results, see
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

    fn split(self) -> (Vec<Tensor>, Vec<Tensor>) {
        let mut fixed = vec![self.dh, self.fence];
        fixed.extend(self.grads.into_iter().flatten());
        let mut by_kind = self.w;
        by_kind.extend(self.pending);
        (fixed, by_kind)
    }

    fn join(fixed: &[Tensor], by_kind: &[Tensor], l: &BwdLayout) -> Self {
        BwdState {
            dh: fixed[0].clone(),
            fence: fixed[1].clone(),
            w: by_kind[..l.w].to_vec(),
            pending: by_kind[l.w..].to_vec(),
            grads: regroup(&fixed[2..], &l.grads),
        }
    }

    fn split_weights(self) -> (Vec<Tensor>, Vec<Tensor>) {
        let mut rest = vec![self.dh, self.fence];
        rest.extend(self.pending);
        rest.extend(self.grads.into_iter().flatten());
        (rest, self.w)
    }

    fn join_weights(rest: &[Tensor], weights: &[Tensor], l: &BwdLayout) -> Self {
        BwdState {
            dh: rest[0].clone(),
            fence: rest[1].clone(),
            w: weights.to_vec(),
            pending: rest[2..2 + l.pending].to_vec(),
            grads: regroup(&rest[2 + l.pending..], &l.grads),
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
