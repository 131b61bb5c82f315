//! Compiled temp memory of the Qwen3.5-style hybrid (2 vs 8 blocks) and of the tiny
//! DeepSeek-V3 (8 vs 32 layers) grows with depth only by the layer inputs the forward pass
//! saves for the backward pass: every loop body is compiled once whatever the depth, and a
//! GDN layer's chunk states are recomputed inside its VJP, not saved.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan_runtime::testing as common;

use stackscan::fsdp::{StackModel, train_step};
use stackscan::plan::PlanOptions;
use stackscan::{Axis, layer_stack};
use stackscan_models::deepseek3::{self, DeepSeek3Config, Dense, MoeLayer};
use stackscan_models::gdn_layer::GdnForm;
use stackscan_models::qwen35::{self, Attention, Gdn, Qwen35Config};
use stackscan_runtime::Mesh;

const DEVICES: usize = 4;

/// The hybrid block at the config's depth: 2 and 8 blocks here.
#[layer_stack(block = [Gdn, Gdn, Gdn, Attention], layers = cfg.layers)]
#[derive(Debug)]
struct Hybrid;

/// The tiny DeepSeek-V3's pattern at the config's depth: 8 and 32 layers (3 dense, then MoE).
#[layer_stack(prefix = [Dense, Dense, Dense], block = [MoeLayer], layers = cfg.layers)]
#[derive(Debug)]
struct DenseThenMoe;

/// Compiled temp bytes per device of `m`'s step under the default options, lowered without a
/// backend to resolve them: the prefetch issued with each step's input, the order GPU and TPU
/// plugins get (the CPU trainer's, after compute, needs less).
fn temp(m: &StackModel) -> i64 {
    let client = common::cpu_client(DEVICES);
    let mesh = Mesh::new(&client, "fsdp", DEVICES).unwrap();
    let axis = Axis {
        name: "fsdp".into(),
        size: DEVICES,
    };
    let step = train_step(m, PlanOptions::prefetch_deferred(), &axis).unwrap();
    let exe = client.compile_program(&step.program, &mesh).unwrap();
    exe.memory_stats().unwrap().temp
}

/// Asserts the growth from `shallow` to `deep` is at most the saved inputs of the extra
/// layers (+10 %).
fn check(what: &str, shallow: &StackModel, deep: &StackModel, extra_layers: usize) {
    let saved = (extra_layers * shallow.activation.size_in_bytes()) as i64;
    let (a, b) = (temp(shallow), temp(deep));
    eprintln!(
        "{what}: temp {a} B → {b} B (+{} B); {extra_layers} more saved inputs = {saved} B",
        b - a
    );
    assert!(
        b - a <= saved + saved / 10,
        "{what}: temp grew by {} B, the saved inputs are {saved} B",
        b - a
    );
}

#[test]
fn hybrid_temp_grows_only_by_the_saved_layer_inputs() {
    // Eight sequences per device make a layer input (8 × 8 × 32 f32 = 8 KiB) stand out.
    let c = |layers| Qwen35Config {
        layers,
        ..Qwen35Config::small(8, GdnForm::Chunked(4))
    };
    let two = qwen35::model::<Hybrid>(&c(8)).unwrap();
    let eight = qwen35::model::<Hybrid>(&c(32)).unwrap();
    check("Qwen3.5 hybrid, 2 → 8 blocks", &two, &eight, 24);
}

#[test]
fn deepseek3_temp_grows_only_by_the_saved_layer_inputs() {
    let c = |layers| DeepSeek3Config {
        layers,
        ..DeepSeek3Config::tiny()
    };
    let shallow = deepseek3::model::<DenseThenMoe>(&c(8)).unwrap();
    let deep = deepseek3::model::<DenseThenMoe>(&c(32)).unwrap();
    check("DeepSeek-V3 tiny, 8 → 32 layers", &shallow, &deep, 24);
}
