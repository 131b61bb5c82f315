//! Deferring a layer's gradient reduce-scatter to the next backward step may cost about one
//! layer's full-size (unreduced) gradient of temp memory over prefetch alone, and no more,
//! at any depth: the compiled temp of the tiny Llama on 4 devices, at 4 and 32 layers, and
//! on the newer CPU plugin, whose scheduler reorders more freely, at 16 layers of issue 31's
//! size.

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
use stackscan_runtime::{Client, ClientOptions, Mesh};

const DEVICES: usize = 4;

/// Bytes of one decoder layer's gradient before it is reduced: every parameter at full size.
fn layer_gradient_bytes(c: &LlamaConfig) -> i64 {
    Architecture::build(c).unwrap().0.kinds[0]
        .params
        .iter()
        .map(|p| p.full_type().dims.iter().product::<i64>() * 4)
        .sum()
}

/// Compiled temp bytes per device of the Llama `c` on `client` under `options`.
fn temp(client: &Client, c: &LlamaConfig, options: PlanOptions) -> i64 {
    let mesh = Mesh::new(client, "fsdp", DEVICES).unwrap();
    let m = Architecture::build(c).unwrap().0;
    let t = Trainer::new(client, &mesh, &m, options, Adam::default(), 1).unwrap();
    t.memory_stats().unwrap().temp
}

/// Deferral costs `c` on `client` at most one layer's unreduced gradient over prefetch
/// alone (+5 % for XLA's packing), with the prefetch issued at `issue` (`Auto`: where the
/// trainer issues it on `client`).
fn check_on(client: &Client, c: &LlamaConfig, issue: PrefetchIssue) {
    let grad = layer_gradient_bytes(c);
    let prefetch = temp(
        client,
        c,
        PlanOptions::prefetch().with_prefetch_issue(issue),
    );
    let deferred = temp(
        client,
        c,
        PlanOptions::prefetch_deferred().with_prefetch_issue(issue),
    );
    let bound = ((prefetch + grad) as f64 * 1.05) as i64;
    assert!(
        deferred <= bound,
        "{} layers, prefetch issued {issue:?}: temp with deferral {deferred} B exceeds \
         prefetch {prefetch} B + one layer's gradient {grad} B (+5 %) = {bound} B",
        c.layers
    );
}

fn check(layers: usize) {
    let c = LlamaConfig {
        layers,
        ..LlamaConfig::tiny()
    };
    check_on(&common::cpu_client(DEVICES), &c, PrefetchIssue::Auto);
}

/// At 4 layers the deferred step once compiled to 19.7 MB of temp against 11.2 MB with
/// prefetch alone: the zero buffers that the peeled first backward step's outputs (the next
/// layer's weights and its own deferred gradient) are written into were shared broadcasts
/// that XLA copied per loop at the start of the program, so they stayed live through the
/// forward pass. The scan lowering now seeds them from the loop's own carry (11.5 MB).
#[test]
fn deferral_costs_at_most_one_layer_gradient_at_4_layers() {
    check(4);
}

#[test]
fn deferral_costs_at_most_one_layer_gradient_at_32_layers() {
    check(32);
}

/// On the newer plugin the deferred step at 16 layers of 4 × 128 tokens per device compiled
/// to 51.9 MiB of temp against 39.2 MiB with prefetch alone: the next step's recompute only
/// waited for the last reduce-scatter, and that scheduler ran it beside the current layer's
/// backward, two layers of MLP activations at once. It now waits for the layer's input
/// cotangent (39.6 MiB). Checked at both issue points: with the input, the order of that
/// regression and what GPU and TPU plugins get; and where the trainer issues it on CPU, after
/// compute (35.9 MiB, `prefetch_issue.rs`).
#[test]
fn deferral_costs_at_most_one_layer_gradient_on_the_newer_plugin() {
    let plugin = match common::newer_cpu_plugin() {
        Ok(plugin) => plugin,
        Err(skip) => {
            eprintln!("skipped: {skip}");
            return;
        }
    };
    let client = Client::new(&plugin, &ClientOptions::cpu(DEVICES)).unwrap();
    let c = LlamaConfig {
        layers: 16,
        seq: 128,
        batch_per_device: 4,
        ..LlamaConfig::tiny()
    };
    for issue in [PrefetchIssue::WithInput, PrefetchIssue::Auto] {
        check_on(&client, &c, issue);
    }
}
