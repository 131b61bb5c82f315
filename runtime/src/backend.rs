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
    let issue = options
        .prefetch_issue
        .resolve(synchronous_collectives(client));
    options.with_prefetch_issue(issue)
}
