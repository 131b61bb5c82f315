//! The choices a plan leaves to the backend that runs it, made for a client's plugin.

use stackscan::plan::PlanOptions;

use crate::pjrt::Client;

/// Whether `client`'s plugin runs collectives synchronously, as copies on the threads that
/// run the compute: XLA's CPU plugins. A gather there overlaps nothing, whenever it is issued.
pub fn synchronous_collectives(client: &Client) -> bool {
    client.platform() == "cpu"
}

/// `options` with what they leave to the backend chosen for `client`'s plugin: where the
/// prefetch gather is issued ([`PrefetchIssue::resolve`](stackscan::plan::PrefetchIssue::resolve)).
/// [`Trainer`](crate::train::Trainer) lowers with these; so should anything that compiles a
/// training program for `client` and means to measure what a trainer runs.
pub fn plan_options(client: &Client, options: PlanOptions) -> PlanOptions {
    plan_options_for(client.platform(), options)
}

/// [`plan_options`] for a plugin whose platform is `platform` (`cpu`, `tpu`, `cuda`), for a
/// program compiled without a client ([`Topology`](crate::Topology)). On `tpu` the
/// scheduling groups are left out
/// ([`PlanOptions::scheduling_groups`](stackscan::plan::PlanOptions::scheduling_groups)):
/// libtpu refuses them, and overlaps each prefetch with its layer without them.
pub fn plan_options_for(platform: &str, options: PlanOptions) -> PlanOptions {
    let issue = options.prefetch_issue.resolve(platform == "cpu");
    let options = options.with_prefetch_issue(issue);
    match platform {
        "tpu" => options.with_scheduling_groups(false),
        _ => options,
    }
}
