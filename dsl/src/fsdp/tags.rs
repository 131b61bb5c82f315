//! Scheduling tags for XLA's latency-hiding scheduler, as frontend attributes on the ops of
//! the lowered step.
//!
//! Each step of a pass becomes one scheduling group (`_scheduling_group_id`): the gather it
//! issues for the next layer, the layer it runs (forward) or recomputes and differentiates
//! (backward), the deferred reduce-scatter of the gradient it was handed, and its own
//! reduce-scatter. XLA requires a group to be contiguous in the dataflow graph ("annotation
//! groups with gaps" otherwise): a step's ops only read the step's inputs and each other, so
//! every path between two of them stays inside the step. The gathers a step issues ahead of
//! use also carry `xla_explicit_fsdp`, the tag TPU's FSDP scheduler moves onto a dedicated
//! SparseCore. Issued with its step's input (`PrefetchIssue::WithInput`, what the TPU plugin
//! gets), no tagged gather reads another's result in the same loop body: each prefetch is
//! tied to its step's input, never to the weights gathered before it. Issued after compute
//! (the CPU plugins), a gather waits for its step's layer, which ran on the weights the step
//! before gathered; those plugins do not read the tag.
//!
//! libtpu holds a group to a stricter rule than contiguity: it untags the ops it does not
//! schedule by group and carries a group's tag across an untagged op only where that op has
//! one operand, so a step (residual adds, norm products) is never a group it accepts ("annotation
//! groups with gaps"). [`PlanOptions::scheduling_groups`](crate::plan::PlanOptions::scheduling_groups)
//! leaves the groups out and keeps `xla_explicit_fsdp`; the runtime does so for the TPU plugin.
//!
//! [`PlanOptions::scheduling_tags`](crate::plan::PlanOptions::scheduling_tags) turns both off.

use crate::builder::Scope;
use crate::error::Result;

use super::lowering::Lowering;

/// XLA's scheduling-group attribute: ops with one id are scheduled as one unit.
pub const SCHEDULING_GROUP: &str = "_scheduling_group_id";

/// The tag of gathers issued ahead of use for FSDP, and its value as MaxText writes it.
pub const EXPLICIT_FSDP: (&str, &str) = ("xla_explicit_fsdp", "yes");

impl Lowering<'_> {
    /// Builds one step's ops in `s` as one scheduling group with a fresh id.
    pub(super) fn scheduling_group<T>(
        &self,
        s: &Scope,
        build: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        if !(self.plan.options.scheduling_tags && self.plan.options.scheduling_groups) {
            return build();
        }
        let id = self.next_group.get();
        self.next_group.set(id + 1);
        s.with_frontend_attributes(&[(SCHEDULING_GROUP, &id.to_string())], build)
    }

    /// Builds the collective of a gather issued ahead of use, tagged [`EXPLICIT_FSDP`].
    pub(super) fn explicit_fsdp<T>(
        &self,
        s: &Scope,
        build: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        if !self.plan.options.scheduling_tags {
            return build();
        }
        s.with_frontend_attributes(&[EXPLICIT_FSDP], build)
    }
}
