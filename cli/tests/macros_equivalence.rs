//! The toy `[A, A, A, B]` declared with `#[derive(SubLayer)]` / `#[layer_stack]` is the same
//! model as the one built by hand with the run-time API (`toy::hand_built`): the same stack, parameters and plan, the same lowered programs (the
//! emitted StableHLO text is identical for every option set), and the same loss and gradients
//! when run on 2 and 4 CPU devices, both equal to the unsharded reference.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan_runtime::testing as common;

use common::fsdp::{assert_close, fixture, run_step};
use common::graph::Arg;
use stackscan::fsdp::{StackModel, reference_step, train_step};
use stackscan::plan::{Plan, PlanOptions, Stack};
use stackscan::{Axis, LayerStack, Program, layer_stack};
use stackscan_models::toy::{self, GatedMlp, SineResidual, Toy, ToyConfig, ToyRepeated};

const D: i64 = 8;
const B: i64 = 2;

/// Three blocks, no prefetch, one layer per loop trip.
#[layer_stack(block = [GatedMlp, GatedMlp, GatedMlp, SineResidual], repeat = 3, unroll = 1)]
struct ToyBaselineUnroll1;

/// One block, prefetch without deferred reduce-scatter.
#[layer_stack(block = [GatedMlp, GatedMlp, GatedMlp, SineResidual], repeat = 1, prefetch_fsdp_weights)]
struct ToyPrefetch;

/// The hand-built toy with `batch` rows per device.
fn hand_toy(repeat: usize, batch: i64) -> StackModel {
    toy::hand_built(
        &ToyConfig {
            batch,
            ..ToyConfig::small()
        },
        repeat,
    )
    .unwrap()
}

fn macro_toy<S: LayerStack<Config = ToyConfig>>(batch: i64) -> StackModel {
    toy::model::<S>(&ToyConfig {
        batch,
        ..ToyConfig::small()
    })
    .unwrap()
}

fn notation(stack: &Stack, options: PlanOptions) -> (String, String) {
    let plan = Plan::new(stack, options).unwrap();
    (plan.forward.notation(stack), plan.backward.notation(stack))
}

/// The stack, the kinds' parameters and the printed plan of `S` equal the hand-built model's.
fn assert_same_declaration<S: LayerStack<Config = ToyConfig>>(repeat: usize) {
    let hand = hand_toy(repeat, B);
    let generated = macro_toy::<S>(B);
    assert_eq!(generated.stack, hand.stack);
    let cfg = ToyConfig::small();
    assert_eq!(S::layers(&cfg).unwrap(), hand.stack.len());
    assert_eq!(generated.kinds.len(), hand.kinds.len());
    for (g, h) in generated.kinds.iter().zip(&hand.kinds) {
        assert_eq!(g.name, h.name);
        assert_eq!(g.params, h.params);
    }
    assert_eq!(
        S::plan_notation(&cfg).unwrap(),
        notation(&hand.stack, S::OPTIONS)
    );
    assert_eq!(
        S::describe(&cfg).unwrap(),
        Plan::new(&hand.stack, S::OPTIONS)
            .unwrap()
            .describe(&hand.stack)
    );
}

#[test]
fn macro_stacks_declare_the_hand_built_stack_and_plan() {
    assert_same_declaration::<Toy>(1);
    assert_same_declaration::<ToyRepeated>(3);
    assert_same_declaration::<ToyBaselineUnroll1>(3);
    assert_same_declaration::<ToyPrefetch>(1);
    assert_eq!(Toy::OPTIONS, PlanOptions::prefetch_deferred());
    assert_eq!(ToyPrefetch::OPTIONS, PlanOptions::prefetch());
    assert_eq!(
        ToyBaselineUnroll1::OPTIONS,
        PlanOptions::baseline().with_unroll(1)
    );
    assert_eq!(
        Toy::plan_notation(&ToyConfig::small()).unwrap(),
        (
            "[A0, A1] → [A2] → [B]".to_owned(),
            "[B] → [A2] → [A1] → [A0]".to_owned()
        )
    );
}

/// Identical StableHLO text: the macros build the very same program as the run-time API.
#[test]
fn macro_and_hand_built_models_lower_to_identical_programs() {
    for (repeat, generated) in [(1, macro_toy::<Toy>(B)), (3, macro_toy::<ToyRepeated>(B))] {
        let hand = hand_toy(repeat, B);
        let text = |m: &StackModel| Program::new(reference_step(m, 1).unwrap()).emit().unwrap();
        assert_eq!(text(&generated), text(&hand), "reference, {repeat} blocks");
        for devices in [1, 2, 4] {
            let axis = Axis {
                name: "fsdp".into(),
                size: devices,
            };
            for base in [
                PlanOptions::baseline(),
                PlanOptions::prefetch(),
                PlanOptions::prefetch_deferred(),
            ] {
                for unroll in [1, 2] {
                    let o = base.with_unroll(unroll);
                    let emit = |m: &StackModel| train_step(m, o, &axis).unwrap().program.emit();
                    assert_eq!(
                        emit(&generated).unwrap(),
                        emit(&hand).unwrap(),
                        "{repeat} blocks, {devices} devices, {o:?}"
                    );
                }
            }
        }
    }
}

fn global_inputs(max_devices: usize) -> Vec<Arg> {
    common::graph::uniform_rows(99, B * max_devices as i64, D)
}

/// Runs both models' steps under `S`'s options on 2 and 4 devices against the reference.
fn assert_same_numerics<S: LayerStack<Config = ToyConfig>>(repeat: usize) {
    let max = 4;
    let client = common::cpu_client(max);
    for n in [2, 4] {
        let per = B * (max / n) as i64;
        let hand = hand_toy(repeat, per);
        let generated = macro_toy::<S>(per);
        let fx = fixture(&client, &hand, global_inputs(max), n, 5);
        let (hand_losses, hand_grads) = run_step(&client, &hand, &fx, S::OPTIONS, n);
        let (losses, grads) = run_step(&client, &generated, &fx, S::OPTIONS, n);
        let what = format!("{n} devices, {:?}", S::OPTIONS);
        assert_eq!(losses, hand_losses, "{what}: loss");
        assert_eq!(grads, hand_grads, "{what}: gradients");
        for l in &losses {
            assert_close(&format!("{what}: loss"), &[*l], &[fx.loss], 1e-5);
        }
        for (j, (g, r)) in grads.iter().zip(&fx.grads).enumerate() {
            assert_close(&format!("{what}: gradient {j}"), g, r, 1e-5);
        }
    }
}

#[test]
fn macro_toy_has_the_loss_and_gradients_of_the_hand_built_toy() {
    assert_same_numerics::<Toy>(1);
    assert_same_numerics::<ToyRepeated>(3);
    assert_same_numerics::<ToyBaselineUnroll1>(3);
}
