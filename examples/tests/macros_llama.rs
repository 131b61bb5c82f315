//! The Llama-style model declared with the macros is the hand-built one: same stack, same
//! parameters (names, shapes, sharding, initialisers), same plan, and identical StableHLO for
//! the reference and for the FSDP step under every option set on 4 devices. (The hand-built
//! model's numerics are checked against the reference in `llama_fsdp.rs`; identical programs
//! carry that over.)

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan::fsdp::{StackModel, reference_step, train_step};
use stackscan::plan::{Plan, PlanOptions};
use stackscan::{Axis, LayerStack, Program};
use stackscan_examples::llama::{self, LlamaConfig};
use stackscan_examples::llama_macro::{self, Llama3_8b, TinyLlama};

#[test]
fn macro_llama_declares_the_hand_built_model() {
    for c in [LlamaConfig::tiny(), LlamaConfig::llama3_8b()] {
        let hand = llama::model(&c).unwrap();
        let generated = if c.layers == 4 {
            llama_macro::model::<TinyLlama>(&c)
        } else {
            llama_macro::model::<Llama3_8b>(&c)
        }
        .unwrap();
        assert_eq!(generated.stack, hand.stack);
        assert_eq!(generated.kinds.len(), 1);
        assert_eq!(generated.kinds[0].name, hand.kinds[0].name);
        assert_eq!(generated.kinds[0].params, hand.kinds[0].params);
        assert_eq!(generated.outer_params, hand.outer_params);
        assert_eq!(generated.activation, hand.activation);
    }
    let stack = llama::model(&LlamaConfig::llama3_8b()).unwrap().stack;
    let plan = Plan::new(&stack, PlanOptions::prefetch_deferred()).unwrap();
    assert_eq!(
        Llama3_8b::plan_notation().unwrap(),
        (
            plan.forward.notation(&stack),
            plan.backward.notation(&stack)
        )
    );
}

#[test]
fn macro_llama_lowers_to_the_hand_built_program() {
    let c = LlamaConfig {
        seq: 8,
        ..LlamaConfig::tiny()
    };
    let hand = llama::model(&c).unwrap();
    let generated = llama_macro::model::<TinyLlama>(&c).unwrap();
    let reference = |m: &StackModel| Program::new(reference_step(m, 1).unwrap()).emit().unwrap();
    assert_eq!(reference(&generated), reference(&hand));
    let axis = Axis {
        name: "fsdp".into(),
        size: 4,
    };
    for o in [
        PlanOptions::baseline(),
        PlanOptions::prefetch(),
        TinyLlama::OPTIONS,
        TinyLlama::OPTIONS.with_unroll(1),
    ] {
        let emit = |m: &StackModel| train_step(m, o, &axis).unwrap().program.emit().unwrap();
        assert_eq!(emit(&generated), emit(&hand), "{o:?}");
    }
}
