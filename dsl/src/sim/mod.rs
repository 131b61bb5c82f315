//! A schedule simulator: replays a [`Pass`] of a [`Plan`](crate::plan::Plan) step by step on
//! three lanes (compute, the FSDP collective lane, a second collective lane) so that what the
//! schedule buys on a pod can be predicted from the same plan the lowering compiles. On a CPU
//! the collectives are copies run by the computing threads, so measurement cannot show it.
//!
//! The replay honours the plan's dependencies:
//! - **Lanes are serial**: each lane runs its ops one at a time in issue order. Within a step
//!   the order is the lowering's: the carried-in gradient's reduce-scatter, the gathers, the
//!   layer, then its own (immediate or epilogue) reduce-scatter.
//! - **Buffers**: a step's gathers are issued when the step starts, which is once the previous
//!   layer's compute has released its gathered weights (at most two gathered buffers: the
//!   running layer's and the prefetched one). A deferred gradient's reduce-scatter must end
//!   before the next step starts, since that step's own gradient takes its place (at most three
//!   buffers backward: two gathered, one gradient).
//! - **Barriers**: a loop trip (one step of a peeled or simple loop, two of a ping-pong loop)
//!   ends only when everything it issued has ended, so the next trip starts after all of it. An
//!   immediate reduce-scatter at the end of a trip is therefore exposed; deferring it moves it
//!   to the start of the next step, where it overlaps that step's compute.
//! - **Prefetch off**: each gather is issued at its own step, so it is exposed before its layer.
//! - **Carry copies**: where a profile says the compiler copies loop carries
//!   ([`KindTimes::carry_copy`] nonzero), a step copies, after its compute, every buffer it
//!   hands to the next step: the weights it prefetched and, deferring, its unreduced
//!   gradient. (XLA's CPU compiler copies them in most loops, whether peeled or not; for the
//!   tiny Llama this rule comes close to the bytes its optimized HLO copies at 4 and 16
//!   layers.)
//!
//! Times are in seconds, from per-kind [`KindTimes`] a cost model and a hardware profile
//! provide; the simulator itself is pure and knows nothing of either.

pub mod draw;
mod replay;

pub use replay::simulate;

#[cfg(test)]
mod svg_tests;
#[cfg(test)]
mod tests;

/// How long one layer of a kind takes on each lane, in seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct KindTimes {
    /// The forward pass of one layer.
    pub forward: f64,
    /// The backward step of one layer: recompute plus VJP.
    pub backward: f64,
    /// All-gathering one layer's weights.
    pub gather: f64,
    /// Reduce-scattering one layer's weight gradient.
    pub reduce_scatter: f64,
    /// The token all_to_alls inside one layer's forward (an expert-parallel MoE's dispatch
    /// and combine), on the second collective lane. The layer cannot go on without its
    /// tokens, so the compute lane waits: the forward is drawn as two halves with the
    /// exchange between them, one bar for all of the layer's exchanges.
    pub exchange_forward: f64,
    /// The same for one layer's backward step (the recompute's exchanges and the VJP's).
    pub exchange_backward: f64,
    /// Copying one of the layer's carried buffers (its gathered weights, or its pending
    /// gradient, of the same size) into the next step's loop trip, on the compute lane. Zero
    /// where the compiler hands a loop's carry on in place; XLA's CPU compiler instead copies
    /// the buffers a loop carries, so there prefetch and deferral cost one such copy per
    /// buffer handed on.
    pub carry_copy: f64,
}

/// Where an op runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Lane {
    /// The compute core (TensorCore).
    Compute,
    /// The collective lane dedicated to FSDP weight gathers (SparseCore 0).
    Fsdp,
    /// The second collective lane: token exchanges and reduce-scatters not on the FSDP lane
    /// (SparseCore 1).
    Second,
}

impl Lane {
    /// Every lane, top to bottom as a timeline draws them.
    pub const ALL: [Lane; 3] = [Lane::Compute, Lane::Fsdp, Lane::Second];
}

/// What an op does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// All-gather of a layer's weights (`AG W3`).
    Gather,
    /// A layer's forward (`fwd L3`).
    Forward,
    /// A layer's recompute and VJP (`vjp L3`).
    Vjp,
    /// Reduce-scatter of a layer's weight gradient (`RS dW3`).
    ReduceScatter,
    /// The token all_to_alls of a layer (`A2A L3`).
    AllToAll,
    /// A copy of a buffer a loop carries for a layer into the next trip (`copy L3`).
    CarryCopy,
}

/// One op on the timeline.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bar {
    /// The lane it runs on.
    pub lane: Lane,
    /// What it does.
    pub op: OpKind,
    /// The layer it belongs to.
    pub layer: usize,
    /// The step (position in the pass) that issued it.
    pub step: usize,
    /// Start time, seconds from the start of the pass.
    pub start: f64,
    /// End time.
    pub end: f64,
}

impl Bar {
    /// The label a timeline prints on it, in the reference's notation.
    pub fn label(&self) -> String {
        match self.op {
            OpKind::Gather => format!("AG W{}", self.layer),
            OpKind::Forward => format!("fwd L{}", self.layer),
            OpKind::Vjp => format!("vjp L{}", self.layer),
            OpKind::ReduceScatter => format!("RS dW{}", self.layer),
            OpKind::AllToAll => format!("A2A L{}", self.layer),
            OpKind::CarryCopy => format!("copy L{}", self.layer),
        }
    }
}

/// A step's span: from when it starts to when the last op it issued ends.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepSpan {
    /// The layer it runs.
    pub layer: usize,
    /// Start time.
    pub start: f64,
    /// End time.
    pub end: f64,
}

/// Which lanes carry the collectives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimOptions {
    /// [`Lane::Fsdp`] when reduce-scatters share the dedicated FSDP core with the gathers,
    /// [`Lane::Second`] when they have their own, [`Lane::Compute`] when the computing
    /// threads run them (a CPU).
    pub reduce_scatter_lane: Lane,
    /// [`Lane::Fsdp`] on a chip with a core for collectives; [`Lane::Compute`] on a CPU,
    /// where a gather is a copy the computing threads make, so nothing overlaps it.
    pub gather_lane: Lane,
}

impl SimOptions {
    /// Every collective on the compute lane: a CPU, where collectives are copies made by the
    /// threads that compute.
    pub const fn serial() -> Self {
        SimOptions {
            reduce_scatter_lane: Lane::Compute,
            gather_lane: Lane::Compute,
        }
    }
}

impl Default for SimOptions {
    /// Gathers on the FSDP lane, reduce-scatters on the second collective lane, as in the
    /// reference's timelines.
    fn default() -> Self {
        SimOptions {
            reduce_scatter_lane: Lane::Second,
            gather_lane: Lane::Fsdp,
        }
    }
}

/// A replayed pass.
#[derive(Clone, Debug, PartialEq)]
pub struct Timeline {
    /// Every op, in issue order.
    pub bars: Vec<Bar>,
    /// Every step, in execution order.
    pub steps: Vec<StepSpan>,
    /// When the last op ends.
    pub total: f64,
    /// Time spent computing (forward, VJP and carry-copy bars; collectives placed on the
    /// compute lane are communication).
    pub compute: f64,
    /// Time not spent computing: `total − compute`.
    pub exposed_communication: f64,
}

impl Timeline {
    /// The bars on `lane`, in issue order.
    pub fn lane(&self, lane: Lane) -> impl Iterator<Item = &Bar> + '_ {
        self.bars.iter().filter(move |b| b.lane == lane)
    }

    /// Busy time of `lane`.
    pub fn busy(&self, lane: Lane) -> f64 {
        self.lane(lane).map(|b| b.end - b.start).sum()
    }
}
