//! Where `train`'s batches come from (synthetic, held-out synthetic, a token file) and how a
//! step's per-device inputs are cut from them.

use stackscan_runtime::tokens::TokenBatches;
use stackscan_runtime::train::HostInput;

/// Steps between evaluations of `--eval-data` when `--eval-every` is not given.
pub(super) const DEFAULT_EVAL_EVERY: u64 = 10;

/// Where the batches come from.
pub(super) enum Batches<'a> {
    /// The model's synthetic batches, a function of the batch index.
    Synthetic(&'a crate::jobs::Batches),
    /// The model's synthetic batches of indices training never reaches (held out).
    HeldOut(&'a crate::jobs::Batches),
    /// A token file.
    File(TokenBatches),
}

/// Where held-out synthetic batches start: beyond any index a run trains on (at most
/// [`MAX_STEPS`](super::MAX_STEPS) steps of at most 4096 micro-batches on at most 4096 devices: under 2⁵⁴).
const HELD_OUT: u64 = 1 << 62;

impl Batches<'_> {
    /// Device batch `index`: `(tokens, labels)`.
    pub(super) fn get(&self, index: u64) -> (Vec<i32>, Vec<i32>) {
        match self {
            Batches::Synthetic(b) => b(index),
            Batches::HeldOut(b) => b(HELD_OUT | index),
            Batches::File(f) => f.batch(index),
        }
    }
}

/// Every device's inputs of the step whose device batches start at `position`: device `d`
/// runs its `k` micro-batches (device batches `position + i·devices + d`, i < k) one after
/// another, as an accumulating trainer takes them.
pub(super) fn step_inputs(
    batch: impl Fn(u64) -> (Vec<i32>, Vec<i32>),
    position: u64,
    devices: u64,
    k: u64,
) -> Vec<Vec<HostInput>> {
    (0..devices)
        .map(|d| {
            let (mut tokens, mut labels) = (Vec::new(), Vec::new());
            for i in 0..k {
                let (t, l) = batch(position + i * devices + d);
                tokens.extend(t);
                labels.extend(l);
            }
            vec![HostInput::I32(tokens), HostInput::I32(labels)]
        })
        .collect()
}
