//! Grouping steps into loops by carry signature.

use std::fmt;
use std::str::FromStr;

use super::stack::Stack;
use crate::error::{Error, Result};
use crate::precision::Precision;

/// The options of MaxText's FSDP prefetch work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PlanOptions {
    /// All-gather each layer's weights one step ahead, carried in the scan carry.
    pub prefetch_fsdp_weights: bool,
    /// Carry each unreduced weight gradient one step and reduce-scatter it at the start of
    /// the next backward step.
    pub defer_grad_reduce_scatter: bool,
    /// Layers per loop trip: 2 double-buffers the gathered weights (ping-pong), 1 carries one.
    pub unroll: usize,
    /// Tag the emitted program for XLA's latency-hiding scheduler: each step's ops (its
    /// prefetch gather, its layer, the deferred reduce-scatter it issues) share one
    /// `_scheduling_group_id`, and prefetch gathers carry `xla_explicit_fsdp`. The tags change
    /// no result; a plugin that does not know them ignores them.
    pub scheduling_tags: bool,
    /// With [`scheduling_tags`](Self::scheduling_tags): the `_scheduling_group_id` groups
    /// (off leaves `xla_explicit_fsdp` alone). libtpu refuses a group whose dataflow passes
    /// an op it does not schedule by group (any elementwise op of two operands), so a step
    /// is no group it takes; its scheduler overlaps each prefetch with the layer without
    /// them. The runtime's `backend::plan_options` turns them off for the TPU plugin.
    pub scheduling_groups: bool,
    /// The element types the step gathers, computes and reduces in ([`Precision`]); the
    /// weights and optimizer state keep their own.
    pub precision: Precision,
    /// Where a step issues the next layer's prefetch gather ([`PrefetchIssue`]).
    pub prefetch_issue: PrefetchIssue,
}

impl PlanOptions {
    /// No prefetch: gather right before use, reduce-scatter right after.
    pub const fn baseline() -> Self {
        PlanOptions {
            prefetch_fsdp_weights: false,
            defer_grad_reduce_scatter: false,
            unroll: 2,
            scheduling_tags: true,
            scheduling_groups: true,
            precision: Precision::F32,
            prefetch_issue: PrefetchIssue::Auto,
        }
    }

    /// Prefetch, immediate reduce-scatter.
    pub const fn prefetch() -> Self {
        PlanOptions {
            prefetch_fsdp_weights: true,
            defer_grad_reduce_scatter: false,
            unroll: 2,
            scheduling_tags: true,
            scheduling_groups: true,
            precision: Precision::F32,
            prefetch_issue: PrefetchIssue::Auto,
        }
    }

    /// Prefetch and deferred reduce-scatter.
    pub const fn prefetch_deferred() -> Self {
        PlanOptions {
            prefetch_fsdp_weights: true,
            defer_grad_reduce_scatter: true,
            unroll: 2,
            scheduling_tags: true,
            scheduling_groups: true,
            precision: Precision::F32,
            prefetch_issue: PrefetchIssue::Auto,
        }
    }

    /// The same options with another unroll.
    pub const fn with_unroll(self, unroll: usize) -> Self {
        PlanOptions { unroll, ..self }
    }

    /// The same options with the scheduling tags on or off.
    pub const fn with_scheduling_tags(self, scheduling_tags: bool) -> Self {
        PlanOptions {
            scheduling_tags,
            ..self
        }
    }

    /// The same options with the scheduling groups on or off (the explicit-FSDP tag stays
    /// as [`scheduling_tags`](Self::scheduling_tags) says).
    pub const fn with_scheduling_groups(self, scheduling_groups: bool) -> Self {
        PlanOptions {
            scheduling_groups,
            ..self
        }
    }

    /// The same options under another precision policy.
    pub const fn with_precision(self, precision: Precision) -> Self {
        PlanOptions { precision, ..self }
    }

    /// The same options with the prefetch gather issued at another point.
    pub const fn with_prefetch_issue(self, prefetch_issue: PrefetchIssue) -> Self {
        PlanOptions {
            prefetch_issue,
            ..self
        }
    }

    /// Checks the combination; `const` so a macro can turn a violation into a compile error.
    pub const fn validate(&self) -> Result<(), &'static str> {
        if self.unroll != 1 && self.unroll != 2 {
            return Err("`unroll` must be 1 or 2");
        }
        if self.defer_grad_reduce_scatter && !self.prefetch_fsdp_weights {
            return Err("`defer_grad_reduce_scatter` needs `prefetch_fsdp_weights`");
        }
        if !self.precision.is_supported() {
            return Err("the precision's compute and reduce types must be f32 or bf16");
        }
        Ok(())
    }
}

/// Where a step issues the gather of the next layer's weights, relative to its own layer.
///
/// Issued with the step's input, the gather can run beside the layer: that is the point of
/// prefetching where collectives are asynchronous (GPU and TPU plugins). XLA's CPU plugins
/// run a collective as copies on the same threads as the compute, so there it overlaps
/// nothing, and issued early the next layer's gathered weights are only live longer: through
/// the whole layer, beside its activations. Issued after the layer, they are not: on both
/// CPU plugins the tiny Llama's deferred step compiles to less temp issued after, at the same
/// step time (`stackscan compile-report` and `bench` measure both).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PrefetchIssue {
    /// Chosen for the backend that compiles the program: the runtime resolves it
    /// ([`PrefetchIssue::resolve`]); lowered unresolved, it is [`PrefetchIssue::WithInput`].
    Auto,
    /// With the step's input (forward: the activation it reads; backward: the cotangent), so
    /// the gather may run beside the layer.
    WithInput,
    /// After the layer's compute: every result of it (forward: its output; backward: the
    /// VJP's input cotangent and weight gradients).
    AfterCompute,
}

impl PrefetchIssue {
    /// `Auto` made concrete for a backend whose collectives run synchronously on the
    /// compute threads (`synchronous_collectives`, XLA's CPU plugins) or not; an explicit
    /// choice stays.
    pub const fn resolve(self, synchronous_collectives: bool) -> PrefetchIssue {
        match self {
            PrefetchIssue::Auto if synchronous_collectives => PrefetchIssue::AfterCompute,
            PrefetchIssue::Auto => PrefetchIssue::WithInput,
            chosen => chosen,
        }
    }

    /// Every issue point, each parsed from its [`name`](Self::name).
    pub const ALL: [PrefetchIssue; 3] = [
        PrefetchIssue::Auto,
        PrefetchIssue::WithInput,
        PrefetchIssue::AfterCompute,
    ];

    /// The issue point's name (`--prefetch-issue`'s values).
    pub fn name(self) -> &'static str {
        match self {
            PrefetchIssue::Auto => "auto",
            PrefetchIssue::WithInput => "with-input",
            PrefetchIssue::AfterCompute => "after-compute",
        }
    }
}

impl fmt::Display for PrefetchIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PrefetchIssue {
    type Err = Error;

    fn from_str(s: &str) -> Result<PrefetchIssue> {
        PrefetchIssue::ALL
            .into_iter()
            .find(|issue| issue.name() == s)
            .ok_or_else(|| {
                let names = PrefetchIssue::ALL.map(PrefetchIssue::name);
                Error::invalid(
                    "prefetch_issue",
                    format!(
                        "unknown issue point `{s}`; expected one of {}",
                        names.join(", ")
                    ),
                )
            })
    }
}

/// Forward (ascending layers) or backward (descending).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Direction {
    /// Layers 0, 1, …
    Forward,
    /// Layers L−1, L−2, …
    Backward,
}

/// How a group's steps become a loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LoopForm {
    /// One step in a single-trip loop (its carry differs from its neighbours').
    Peeled,
    /// Two steps per trip on alternating buffers; an odd first step runs before the loop.
    PingPong {
        /// Trips of two steps.
        trips: usize,
        /// Whether one step runs before the loop (odd length).
        peel_first: bool,
    },
    /// One step per trip.
    Simple {
        /// Trips.
        trips: usize,
    },
}

/// Where the weights a step runs on come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WeightSource {
    /// In the carry: the previous step gathered them (or, for a pass's first step, the
    /// prologue before the pass's first loop).
    Carried,
    /// Gathered by the step itself, right before use (no prefetch).
    GatheredAtUse,
}

/// What a step does with the unreduced weight gradient it computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OwnGradient {
    /// None is computed (forward).
    Absent,
    /// Reduce-scattered at the end of the step.
    Scattered,
    /// Carried out unreduced and reduce-scattered at the start of the next step, or after the
    /// pass by the last step (`defer_grad_reduce_scatter`).
    Deferred,
}

/// A step's carry signature: what it runs and what its carry holds besides the activation.
/// Steps share a loop only if their signatures are equal, since a loop carry has one shape.
/// The lowering builds every step from its group's signature alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Signature {
    /// The kind run.
    pub run: usize,
    /// Where the weights of `run` come from.
    pub weights: WeightSource,
    /// The kind whose weights the step gathers for the next step and carries out; `None`
    /// without prefetch and at the pass's last step.
    pub prefetch: Option<usize>,
    /// The kind of the deferred gradient carried in from the previous step, reduce-scattered
    /// first; `None` forward, without deferral and at the backward pass's first step.
    pub pending_grad: Option<usize>,
    /// What happens to the step's own weight gradient.
    pub own_grad: OwnGradient,
}

/// Consecutive steps that share a carry signature, and so one loop.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Group {
    /// Layers in execution order.
    pub layers: Vec<usize>,
    /// The loop shape.
    pub form: LoopForm,
    /// The signature every step of the group has.
    pub signature: Signature,
}

/// A part of a pass: one group, or an outer loop over repeated blocks.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Segment {
    /// A group of steps.
    Group(Group),
    /// A loop over `trips` windows of one block's length (at least one: a single trip is
    /// still a loop, so two blocks lower like twenty) whose steps have identical groups.
    /// `groups` are those of the first window; trip `t` runs them shifted by `t · stride`
    /// layers. A window starts at a block's first layer unless the pass's first step differs
    /// from its place in a loop, then one layer later (rotated).
    Blocks {
        /// Blocks the loop covers.
        trips: usize,
        /// Layer offset between trips: `+block_len` forward, `−block_len` backward.
        stride: isize,
        /// Groups of the first block.
        groups: Vec<Group>,
    },
}

/// One pass: its segments in execution order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Pass {
    /// Which pass.
    pub direction: Direction,
    /// Segments in execution order.
    pub segments: Vec<Segment>,
}

impl Pass {
    /// The first step: its layer and signature.
    fn first_step(&self) -> Option<(usize, Signature)> {
        let g = match self.segments.first()? {
            Segment::Group(g) => g,
            Segment::Blocks { groups, .. } => groups.first()?,
        };
        Some((*g.layers.first()?, g.signature))
    }

    /// The last step: its layer and signature.
    fn last_step(&self) -> Option<(usize, Signature)> {
        let (g, shift) = match self.segments.last()? {
            Segment::Group(g) => (g, 0),
            Segment::Blocks {
                trips,
                stride,
                groups,
            } => (groups.last()?, (*trips as isize - 1) * stride),
        };
        Some(((*g.layers.last()? as isize + shift) as usize, g.signature))
    }

    /// The layer whose weights are gathered before the pass's first loop, since its step
    /// runs on carried weights that no earlier step gathered.
    pub fn prologue_gather(&self) -> Option<usize> {
        self.first_step()
            .filter(|(_, sig)| sig.weights == WeightSource::Carried)
            .map(|(layer, _)| layer)
    }

    /// The layer whose deferred gradient is reduce-scattered after the pass's last loop,
    /// since no later step takes it.
    pub fn epilogue_scatter(&self) -> Option<usize> {
        self.last_step()
            .filter(|(_, sig)| sig.own_grad == OwnGradient::Deferred)
            .map(|(layer, _)| layer)
    }
}

/// The forward and backward schedules of a stack.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Plan {
    /// The options planned for.
    pub options: PlanOptions,
    /// Number of layers.
    pub layers: usize,
    /// Forward pass.
    pub forward: Pass,
    /// Backward pass.
    pub backward: Pass,
}

impl Plan {
    /// Plans `stack` under `options`.
    pub fn new(stack: &Stack, options: PlanOptions) -> Result<Plan> {
        options.validate().map_err(|m| Error::invalid("plan", m))?;
        Ok(Plan {
            options,
            layers: stack.len(),
            forward: plan_pass(stack, options, Direction::Forward),
            backward: plan_pass(stack, options, Direction::Backward),
        })
    }
}

/// The carry signature of the step running `layer` in the pass `dir` under `o`: the one place
/// the options become per-step facts.
pub fn signature(stack: &Stack, o: PlanOptions, dir: Direction, layer: usize) -> Signature {
    let kind = |l: Option<usize>| l.filter(|&l| l < stack.len()).map(|l| stack.kind_of(l));
    let neighbours = Neighbours {
        up: kind(Some(layer + 1)),
        down: kind(layer.checked_sub(1)),
    };
    signature_between(o, dir, stack.kind_of(layer), neighbours)
}

/// The kinds of the layers above and below a step's layer (`None` past the stack's ends).
#[derive(Clone, Copy)]
struct Neighbours {
    up: Option<usize>,
    down: Option<usize>,
}

/// The signature of a step running `run` between `neighbours`.
fn signature_between(o: PlanOptions, dir: Direction, run: usize, around: Neighbours) -> Signature {
    // The next step runs the layer above going forward and the one below going backward; a
    // deferred gradient arrives from the previous step, the layer above.
    let (next, previous) = match dir {
        Direction::Forward => (around.up, None),
        Direction::Backward => (around.down, around.up),
    };
    let prefetch = o.prefetch_fsdp_weights;
    let defer = o.defer_grad_reduce_scatter;
    Signature {
        run,
        weights: if prefetch {
            WeightSource::Carried
        } else {
            WeightSource::GatheredAtUse
        },
        prefetch: if prefetch { next } else { None },
        pending_grad: if defer { previous } else { None },
        own_grad: match (dir, defer) {
            (Direction::Forward, _) => OwnGradient::Absent,
            (Direction::Backward, false) => OwnGradient::Scattered,
            (Direction::Backward, true) => OwnGradient::Deferred,
        },
    }
}

/// The signature `layer` (of the repeated block) would have in a block with blocks on both
/// sides: what every step of a block loop has at its place in the block.
fn steady_signature(stack: &Stack, o: PlanOptions, dir: Direction, layer: usize) -> Signature {
    let (p, b) = (stack.prefix_len(), stack.block_len());
    let at = |offset: usize| stack.kind_of(p + offset % b);
    let offset = (layer - p) % b;
    let neighbours = Neighbours {
        up: Some(at(offset + 1)),
        down: Some(at(offset + b - 1)),
    };
    signature_between(o, dir, stack.kind_of(layer), neighbours)
}

/// Maximal runs of equal signature within `layers` (in execution order).
fn groups(stack: &Stack, o: PlanOptions, dir: Direction, layers: &[usize]) -> Vec<Group> {
    let mut out: Vec<Group> = Vec::new();
    let mut current: Option<(Signature, Vec<usize>)> = None;
    for &l in layers {
        let sig = signature(stack, o, dir, l);
        match &mut current {
            Some((s, ls)) if *s == sig => ls.push(l),
            _ => {
                if let Some((s, ls)) = current.take() {
                    out.push(make_group(s, ls, o));
                }
                current = Some((sig, vec![l]));
            }
        }
    }
    if let Some((s, ls)) = current {
        out.push(make_group(s, ls, o));
    }
    out
}

fn make_group(signature: Signature, layers: Vec<usize>, o: PlanOptions) -> Group {
    let n = layers.len();
    let form = match (n, o.unroll) {
        (1, _) => LoopForm::Peeled,
        (_, 2) => LoopForm::PingPong {
            trips: n / 2,
            peel_first: n % 2 == 1,
        },
        _ => LoopForm::Simple { trips: n },
    };
    Group {
        layers,
        form,
        signature,
    }
}

fn plan_pass(stack: &Stack, o: PlanOptions, dir: Direction) -> Pass {
    let n = stack.len();
    let ordered = |range: std::ops::Range<usize>| -> Vec<usize> {
        match dir {
            Direction::Forward => range.collect(),
            Direction::Backward => range.rev().collect(),
        }
    };
    let mut segments: Vec<Segment> = Vec::new();
    if stack.block_is_uniform() || stack.repeat() == 1 {
        segments.extend(
            groups(stack, o, dir, &ordered(0..n))
                .into_iter()
                .map(Segment::Group),
        );
        return Pass {
            direction: dir,
            segments,
        };
    }
    let p = stack.prefix_len();
    let prefix = groups(stack, o, dir, &ordered(0..p));
    if dir == Direction::Forward {
        segments.extend(prefix.iter().cloned().map(Segment::Group));
    }
    segments.extend(block_loop(stack, o, dir, &ordered(p..n)));
    if dir == Direction::Backward {
        segments.extend(prefix.into_iter().map(Segment::Group));
    }
    Pass {
        direction: dir,
        segments,
    }
}

/// The repeated blocks' layers (`region`, in execution order, at least two blocks) as the
/// steps before the block loop, the loop, and the steps after it.
///
/// Only a pass's first and last step can differ from the steady signature of their place in
/// the block (the first backward step has no deferred gradient to take, the last step has no
/// next layer to prefetch, or one of the prefix); every step between has block layers on both
/// sides. So the loop starts after a differing first step and its trips are windows of one
/// block's length from there, one block's worth of layers rotated when it starts late; what
/// does not fill a trip, the differing last step included, runs after the loop. Both the steps
/// around the loop and the loop's body are then the same at every depth from two blocks
/// (where the loop has one trip, kept by the single-trip mark), and so is the program.
fn block_loop(stack: &Stack, o: PlanOptions, dir: Direction, region: &[usize]) -> Vec<Segment> {
    let b = stack.block_len();
    let differs =
        |layer: usize| signature(stack, o, dir, layer) != steady_signature(stack, o, dir, layer);
    let (first, last) = (region[0], region[region.len() - 1]);
    let before = usize::from(differs(first));
    let after = usize::from(differs(last));
    // At least one trip: a mixed block has two or more layers and at most two steps differ.
    let trips = (region.len() - before - after) / b;
    let end = before + trips * b;
    let stride = match dir {
        Direction::Forward => b as isize,
        Direction::Backward => -(b as isize),
    };
    let mut segments: Vec<Segment> = groups(stack, o, dir, &region[..before])
        .into_iter()
        .map(Segment::Group)
        .collect();
    segments.push(Segment::Blocks {
        trips,
        stride,
        groups: groups(stack, o, dir, &region[before..before + b]),
    });
    segments.extend(
        groups(stack, o, dir, &region[end..])
            .into_iter()
            .map(Segment::Group),
    );
    segments
}
