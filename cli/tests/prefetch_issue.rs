//! Where the prefetch gather is issued ([`PrefetchIssue`]) on the CPU plugins, whose
//! collectives overlap nothing: after the layer's compute the next layer's gathered weights
//! are not live beside its activations, so the step needs less temp than issued with the
//! layer's input, and prefetching needs no more than gathering at use. The trainer chooses
//! that point on CPU by itself. The tiny Llama on 4 devices at issue 31's size: 16 layers of
//! 4 × 128 tokens per device (38.1 MiB deferred with the input, 35.4 MiB after compute, 37.8
//! MiB without prefetch).

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan_models::registry::Architecture;
use stackscan_runtime::testing as common;

use stackscan::fsdp::Adam;
use stackscan::plan::{PlanOptions, PrefetchIssue};
use stackscan_models::llama::LlamaConfig;
use stackscan_runtime::train::Trainer;
use stackscan_runtime::{Client, Mesh};

const DEVICES: usize = 4;

/// Compiled temp bytes per device of the trainer of `c` on `client` under `options`.
fn temp(client: &Client, c: &LlamaConfig, options: PlanOptions) -> i64 {
    let mesh = Mesh::new(client, "fsdp", DEVICES).unwrap();
    let m = Architecture::build(c).unwrap().0;
    let t = Trainer::new(client, &mesh, &m, options, Adam::default(), 1).unwrap();
    t.memory_stats().unwrap().temp
}

#[test]
fn issued_after_compute_the_prefetch_costs_less_temp_and_is_chosen_on_cpu() {
    let client = common::cpu_client(DEVICES);
    let c = LlamaConfig {
        layers: 16,
        seq: 128,
        batch_per_device: 4,
        ..LlamaConfig::tiny()
    };
    let deferred = PlanOptions::prefetch_deferred();
    let early = temp(
        &client,
        &c,
        deferred.with_prefetch_issue(PrefetchIssue::WithInput),
    );
    let late = temp(
        &client,
        &c,
        deferred.with_prefetch_issue(PrefetchIssue::AfterCompute),
    );
    assert!(
        late < early,
        "deferred: {late} B of temp issued after compute, {early} B with the input"
    );
    let at_use = temp(&client, &c, PlanOptions::baseline());
    let prefetch = temp(
        &client,
        &c,
        PlanOptions::prefetch().with_prefetch_issue(PrefetchIssue::AfterCompute),
    );
    assert!(
        prefetch <= at_use,
        "prefetch issued after compute: {prefetch} B of temp, gathered at use: {at_use} B"
    );
    // `Auto`, the options' default, is resolved by the trainer: after compute on CPU.
    assert_eq!(deferred.prefetch_issue, PrefetchIssue::Auto);
    assert_eq!(temp(&client, &c, deferred), late, "Auto on the CPU plugin");
}
