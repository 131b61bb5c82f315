//! Where `train`'s batches come from (synthetic, held-out synthetic, a token file) and how a
//! step's per-device inputs are cut from them.

use stackscan_runtime::tokens::TokenBatches;
use stackscan_runtime::train::HostInput;

/// Steps between evaluations of `--eval-data` when `--eval-every` is not given.
pub(super) const DEFAULT_EVAL_EVERY: u64 = 10;

/// Where the batches come from.
pub(super) enum Batches<'a> {
    /// The model's synthetic batches, a function of the batch index.
    Synthetic(&'a stackscan_models::jobs::Batches),
    /// The model's synthetic batches of indices training never reaches (held out).
    HeldOut(&'a stackscan_models::jobs::Batches),
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

/// How a step's device batches (whole sequences) reach the devices: device `d` is
/// `(g, c) = (d / context, d % context)` on the `fsdp × context` mesh, reads its group `g`'s
/// batches and keeps positions `c·seq/context ..` of each sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Devices of the mesh.
    pub devices: u64,
    /// Devices each sequence is split over (1: none).
    pub context: u64,
    /// Tokens of a whole sequence.
    pub seq: usize,
}

impl Layout {
    /// Groups of devices that share sequences: device batches a micro-step reads.
    pub fn groups(&self) -> u64 {
        self.devices / self.context.max(1)
    }
}

/// Every device's inputs of the step whose device batches start at `position`: device `d`
/// of group `g` runs its `k` micro-batches (device batches `position + i·groups + g`,
/// i < k) one after another, as an accumulating trainer takes them, each cut to the device's
/// piece of every sequence ([`Layout`]).
pub(crate) fn step_inputs(
    batch: impl Fn(u64) -> (Vec<i32>, Vec<i32>),
    position: u64,
    layout: Layout,
    k: u64,
) -> Vec<Vec<HostInput>> {
    let groups = layout.groups();
    let context = layout.context.max(1) as usize;
    let piece = layout.seq / context;
    (0..layout.devices)
        .map(|d| {
            let (g, c) = (d / context as u64, d as usize % context);
            let cut = |ids: Vec<i32>| -> Vec<i32> {
                if context == 1 {
                    return ids;
                }
                ids.chunks(layout.seq)
                    .flat_map(|row| row[c * piece..(c + 1) * piece].iter().copied())
                    .collect()
            };
            let (mut tokens, mut labels) = (Vec::new(), Vec::new());
            for i in 0..k {
                let (t, l) = batch(position + i * groups + g);
                tokens.extend(cut(t));
                labels.extend(cut(l));
            }
            vec![HostInput::I32(tokens), HostInput::I32(labels)]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Batch `i` holds two sequences of 4 whose ids say where they come from: `100·i + 10·row
    /// + position`.
    fn batch(i: u64) -> (Vec<i32>, Vec<i32>) {
        let ids: Vec<i32> = (0..2)
            .flat_map(|row| (0..4).map(move |p| 100 * i as i32 + 10 * row + p))
            .collect();
        let labels = ids.iter().map(|t| t + 1).collect();
        (ids, labels)
    }

    fn ids(inputs: &[HostInput]) -> &[i32] {
        match &inputs[0] {
            HostInput::I32(t) => t,
            other => panic!("tokens are i32, got {other:?}"),
        }
    }

    #[test]
    fn without_context_each_device_reads_its_own_batches() {
        let layout = Layout {
            devices: 2,
            context: 1,
            seq: 4,
        };
        let inputs = step_inputs(batch, 6, layout, 2);
        // Device 1: batches 6 + 0·2 + 1 = 7 and 6 + 1·2 + 1 = 9, whole.
        assert_eq!(&ids(&inputs[1])[..8], &batch(7).0[..]);
        assert_eq!(&ids(&inputs[1])[8..], &batch(9).0[..]);
    }

    #[test]
    fn a_context_split_gives_each_device_its_piece_of_its_groups_sequences() {
        let layout = Layout {
            devices: 4,
            context: 2,
            seq: 4,
        };
        assert_eq!(layout.groups(), 2);
        let inputs = step_inputs(batch, 0, layout, 1);
        // Device 3 = group 1, piece 1: positions 2..4 of both rows of batch 1.
        assert_eq!(ids(&inputs[3]), &[102, 103, 112, 113]);
        // Device 0 = group 0, piece 0; its labels are cut the same way.
        assert_eq!(ids(&inputs[0]), &[0, 1, 10, 11]);
        assert!(matches!(&inputs[0][1], HostInput::I32(l) if l == &[1, 2, 11, 12]));
    }
}
