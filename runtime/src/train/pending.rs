//! The trainer's pipeline: a batch already on the devices ([`DeviceBatch`]), a step the
//! plugin has queued and nobody has waited for yet ([`PendingStep`]), and what a step measured
//! ([`StepReport`], [`HostTimes`]).
//!
//! JAX and MaxText keep the host off the step's critical path in two ways, and so does this:
//! the next batch is uploaded while the current step runs, and nothing waits for a step's loss
//! or its `applied` flag before the next step is queued; metrics are read when they are
//! printed, a step or two behind. (The CPU plugins queue a read-back behind the steps already
//! launched, so a loop there keeps two steps in flight; the example keeps one.) Adam's step count lives on the devices (see
//! [`with_adam`](stackscan::fsdp::with_adam)), so the next launch never needs the previous
//! flag. A loop that keeps one step in flight:
//!
//! ```no_run
//! # use stackscan_runtime::train::{HostInput, StepReport, Trainer};
//! # fn run(trainer: &mut Trainer, batches: &[Vec<Vec<HostInput>>]) -> stackscan_runtime::Result<Vec<StepReport>> {
//! let mut reports = Vec::new();
//! let mut in_flight = None;
//! for inputs in batches {
//!     // Checks and uploads while the previous step runs on the devices.
//!     let batch = trainer.upload(inputs)?;
//!     let launched = trainer.launch(batch)?;
//!     // The previous step's loss: the devices already have this one to run meanwhile.
//!     if let Some(previous) = in_flight.replace(launched) {
//!         reports.push(trainer.wait(previous)?);
//!     }
//! }
//! if let Some(last) = in_flight {
//!     reports.push(trainer.wait(last)?);
//! }
//! # Ok(reports)
//! # }
//! ```

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use crate::pjrt::{Buffer, Completion};

/// One step's inputs, checked against the model's input specs and copied to the devices
/// ([`Trainer::upload`](super::Trainer::upload)), ready for
/// [`Trainer::launch`](super::Trainer::launch).
#[derive(Debug)]
pub struct DeviceBatch {
    /// Per device, the model's inputs in declaration order.
    pub(super) buffers: Vec<Vec<Buffer>>,
    /// When the upload began: the step's host work starts here.
    pub(super) started: Instant,
    pub(super) upload_seconds: f64,
}

/// A step the plugin has queued ([`Trainer::launch`](super::Trainer::launch)); hand it to
/// [`Trainer::wait`](super::Trainer::wait) for its loss and report. The trainer's state is
/// already the step's result: the next step can be launched before this one is waited for.
///
/// Dropping it unwaited is safe (its completion is awaited) but leaves the step out of the
/// trainer's counts ([`Trainer::steps`](super::Trainer::steps)).
#[derive(Debug)]
#[must_use = "a launched step is counted and checked for non-finite values only when waited for"]
pub struct PendingStep {
    /// The trainer's launch number of this step, from 1.
    pub(super) sequence: u64,
    /// Per device, the step's `loss` and `applied` results and its auxiliary outputs.
    pub(super) flags: Vec<Vec<Buffer>>,
    /// The batch the step reads and the state it replaced, kept until it is done: the
    /// default CPU plugin's buffer destroy waits for every execution still reading the
    /// buffer, so dropping the inputs at launch would block the launch until the step had
    /// run (the donated state's handles are dropped here too, for a plugin that did not take
    /// them over).
    pub(super) kept: Vec<Vec<Buffer>>,
    pub(super) completion: Completion,
    pub(super) started: Instant,
    pub(super) queued: Instant,
    pub(super) upload_seconds: f64,
    pub(super) launch_seconds: f64,
    /// Where the previous launch's step ended, once it has been waited for.
    pub(super) previous_end: Option<Arc<OnceLock<Instant>>>,
    /// Where this step ends, for the next one.
    pub(super) end: Arc<OnceLock<Instant>>,
}

impl PendingStep {
    /// Whether the devices are done with the step, without blocking.
    pub fn is_done(&self) -> bool {
        self.completion.is_done()
    }
}

/// Host work of one step, in seconds, whether or not it overlapped the devices' work.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HostTimes {
    /// Checking the inputs and copying them to the devices.
    pub upload: f64,
    /// Building the argument lists and queueing the program: the plugin's dispatch, marking
    /// the donated state, owning the outputs.
    pub launch: f64,
    /// Reading the loss and the `applied` flag once the devices were done.
    pub read: f64,
}

impl HostTimes {
    /// All of it.
    pub fn total(&self) -> f64 {
        self.upload + self.launch + self.read
    }
}

/// What one step measured.
///
/// A step's span runs from its *start*, the later of the moment its upload began and the
/// moment the previous step ended, to its *end*: its devices' completion if another step was
/// already queued when it was waited for (the read-back then hides behind that step), else the
/// moment the read-back finished. The devices count as busy with the step from the later of
/// its start and the moment its launch was queued, until they signalled completion (timed by
/// the plugin, see [`Completion`]). The rest of the span is the host's overhead per step: time
/// in which the devices had nothing to run because the host was not done.
#[derive(Clone, Debug, PartialEq)]
pub struct StepReport {
    /// The global mean loss (NaN or infinite when the step was skipped).
    pub loss: f32,
    /// Wall time of the step's span (see the type's documentation).
    pub seconds: f64,
    /// Of `seconds`, the time the devices had the step: from the later of the span's start
    /// and the launch being queued, until the devices were done. `seconds - device_seconds` is
    /// the host's overhead on the step's critical path.
    pub device_seconds: f64,
    /// The host's work for the step, overlapped with the devices or not.
    pub host: HostTimes,
    /// Whether the update was dropped because the loss, a gradient or the update was not
    /// finite (only under [`NonFinitePolicy::Skip`](super::NonFinitePolicy::Skip); the other
    /// policy returns an error).
    pub skipped: bool,
    /// The step's auxiliary outputs by name ([`TrainStep::aux`](stackscan::fsdp::TrainStep)):
    /// an MoE model's dropped fraction and load imbalance, its balancing loss; empty for a
    /// model whose layers record none.
    pub aux: Vec<(String, f32)>,
}

impl StepReport {
    /// The auxiliary output `name`, if the step has one.
    pub fn aux(&self, name: &str) -> Option<f32> {
        self.aux.iter().find(|(n, _)| n == name).map(|&(_, v)| v)
    }
}

impl StepReport {
    /// The host's overhead on the critical path, in seconds: `seconds - device_seconds`.
    pub fn host_overhead(&self) -> f64 {
        (self.seconds - self.device_seconds).max(0.0)
    }
}

/// The span of a step and the devices' share of it (see [`StepReport`]), in seconds.
pub(super) fn span(
    started: Instant,
    previous_end: Option<Instant>,
    queued: Instant,
    completed: Instant,
    end: Instant,
) -> (f64, f64) {
    let start = previous_end.map_or(started, |p| p.max(started));
    let busy_from = queued.max(start);
    let seconds = end.saturating_duration_since(start).as_secs_f64();
    let device = completed.saturating_duration_since(busy_from).as_secs_f64();
    (seconds, device.min(seconds))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    #[test]
    fn a_step_waited_for_alone_pays_upload_dispatch_and_read_back() {
        let t0 = Instant::now();
        // Upload 0..2, queued at 5, devices done at 105, read back by 107.
        let (seconds, device) = span(at(t0, 0), None, at(t0, 5), at(t0, 105), at(t0, 107));
        assert!((seconds - 0.107).abs() < 1e-9 && (device - 0.100).abs() < 1e-9);
    }

    #[test]
    fn a_step_queued_before_the_previous_ended_has_no_overhead() {
        let t0 = Instant::now();
        // Uploaded from 40 while the previous step ran until 100; queued at 50; done at 200.
        let (seconds, device) = span(
            at(t0, 40),
            Some(at(t0, 100)),
            at(t0, 50),
            at(t0, 200),
            at(t0, 200),
        );
        assert!((seconds - 0.100).abs() < 1e-9 && (seconds - device).abs() < 1e-9);
    }

    #[test]
    fn a_late_launch_is_counted_from_the_previous_end() {
        let t0 = Instant::now();
        // The previous step ended at 100, this one was queued only at 103.
        let (seconds, device) = span(
            at(t0, 90),
            Some(at(t0, 100)),
            at(t0, 103),
            at(t0, 203),
            at(t0, 203),
        );
        assert!((seconds - 0.103).abs() < 1e-9 && (seconds - device - 0.003).abs() < 1e-9);
    }
}
