//! Printing plans: `[GDN 0, GDN 1] → [GDN 2] → [attention]`.

use std::fmt::Write as _;

use super::schedule::{Group, LoopForm, Pass, Plan, Segment};
use super::stack::Stack;

/// `D0` for one-letter kind names, `GDN 0` otherwise, `attention` when the index is implied.
fn label(stack: &Stack, kind: usize, index: Option<usize>) -> String {
    let name = stack.kind_name(kind);
    match index {
        None => name.to_owned(),
        // `D0` reads as layer 0 of `D`, unless a kind's own name ends in a digit (a kind `D0`
        // or `1`): then every index is set apart by a space.
        Some(i) if name.chars().count() == 1 && !digit_names(stack) => format!("{name}{i}"),
        Some(i) => format!("{name} {i}"),
    }
}

/// Whether some kind's name ends in a digit.
fn digit_names(stack: &Stack) -> bool {
    (0..stack.num_kinds()).any(|k| stack.kind_name(k).ends_with(|c: char| c.is_ascii_digit()))
}

/// A layer outside a block loop: its global index, omitted when its kind has one layer.
fn global_label(stack: &Stack, layer: usize) -> String {
    let k = stack.kind_of(layer);
    let index = (stack.layers_of_kind(k) > 1).then_some(layer);
    label(stack, k, index)
}

/// A layer inside a block loop: its position in the block, omitted when its kind occurs once
/// in the block.
fn block_label(stack: &Stack, layer: usize) -> String {
    let k = stack.kind_of(layer);
    let p = stack.prefix_len();
    let b = stack.block_len();
    let pos = (layer - p) % b;
    let in_block = (0..b).filter(|&i| stack.kind_of(p + i) == k).count();
    label(stack, k, (in_block > 1).then_some(pos))
}

fn group_text(stack: &Stack, g: &Group, in_block: bool) -> String {
    let l = |layer: usize| {
        if in_block {
            block_label(stack, layer)
        } else {
            global_label(stack, layer)
        }
    };
    match g.layers.as_slice() {
        [] => "[]".to_owned(),
        [a] => format!("[{}]", l(*a)),
        [a, b] => format!("[{}, {}]", l(*a), l(*b)),
        [a, b, c] => format!("[{}, {}, {}]", l(*a), l(*b), l(*c)),
        [a, .., z] => format!("[{} … {}]", l(*a), l(*z)),
    }
}

fn form_text(form: LoopForm) -> String {
    match form {
        LoopForm::Peeled => "peeled".to_owned(),
        LoopForm::PingPong {
            trips,
            peel_first: false,
        } => format!("{trips}×2"),
        LoopForm::PingPong {
            trips,
            peel_first: true,
        } => format!("1 + {trips}×2"),
        LoopForm::Simple { trips } => format!("{trips}×1"),
    }
}

impl Pass {
    /// The pass in the notation of the design: groups in brackets joined by arrows, block
    /// loops in braces with their trip count.
    pub fn notation(&self, stack: &Stack) -> String {
        self.render(stack, false)
    }

    /// [`notation`](Self::notation) with each group's loop shape (`peeled`, `1 + 28×2`).
    pub fn detailed(&self, stack: &Stack) -> String {
        self.render(stack, true)
    }

    fn render(&self, stack: &Stack, detailed: bool) -> String {
        let group = |g: &Group, in_block: bool| {
            let mut s = group_text(stack, g, in_block);
            if detailed {
                let _ = write!(s, " ({})", form_text(g.form));
            }
            s
        };
        self.segments
            .iter()
            .map(|s| match s {
                // Layers of a repeated block are named by their place in the block, also in a
                // block peeled out of the block loop.
                Segment::Group(g) => {
                    let blocky = stack.repeat() > 1
                        && !stack.block_is_uniform()
                        && g.layers.iter().all(|&l| l >= stack.prefix_len());
                    group(g, blocky)
                }
                Segment::Blocks { trips, groups, .. } => {
                    let inner: Vec<String> = groups.iter().map(|g| group(g, true)).collect();
                    format!("{{{}}} × {trips}", inner.join(" → "))
                }
            })
            .collect::<Vec<_>>()
            .join(" → ")
    }
}

impl Plan {
    /// Both passes with loop shapes, one per line.
    pub fn describe(&self, stack: &Stack) -> String {
        format!(
            "forward:  {}\nbackward: {}",
            self.forward.detailed(stack),
            self.backward.detailed(stack)
        )
    }
}
