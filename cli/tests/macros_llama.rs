//! The Llama-style model declared with the macros — the whole-model struct `llama::Llama`
//! over the nested `Decoder` (`attn: Attention`, `mlp: SwiGlu`) — is the hand-built one: same stack, same
//! parameters (names, shapes, sharding, initialisers), same plan, and identical StableHLO for
//! the reference and for the FSDP step under every option set on 4 devices; and with the
//! options of its attribute it trains identically on 1, 2 and 4 devices (bit-equal losses and
//! gradients, both matching the unsharded reference).

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan::fsdp::{StackModel, reference_step, train_step};
use stackscan::plan::{Plan, PlanOptions};
use stackscan::{Axis, LayerStack, Program};
use stackscan_models::registry::Architecture;
mod hand_llama;

use stackscan_models::llama::LlamaStack;
use stackscan_models::llama::{self, LlamaConfig};

/// The target's directory for tests, where
/// [`cached_cpu_client`](stackscan_runtime::testing::cached_cpu_client) keeps its cache.
const TARGET_TMP: &str = env!("CARGO_TARGET_TMPDIR");

#[test]
fn macro_llama_declares_the_hand_built_model() {
    for c in [LlamaConfig::tiny(), LlamaConfig::llama3_8b()] {
        let hand = hand_llama::model(&c).unwrap();
        // One stack type at both depths: the depth is the config's.
        let generated = llama::model::<LlamaStack>(&c).unwrap();
        assert_eq!(generated.stack, hand.stack);
        assert_eq!(generated.kinds.len(), 1);
        assert_eq!(generated.kinds[0].name, hand.kinds[0].name);
        assert_eq!(generated.kinds[0].params, hand.kinds[0].params);
        assert_eq!(generated.outer_params, hand.outer_params);
        assert_eq!(generated.inputs, hand.inputs, "declared once by `Tokens`");
        assert_eq!(generated.activation, hand.activation);
        let names = generated.weight_names();
        assert_eq!(
            names[..4],
            ["embed", "final_norm", "lm_head", "layers.attn_norm"]
        );
        assert!(names.contains(&"layers.mlp.w_down".to_owned()), "{names:?}");
    }
    let stack = hand_llama::model(&LlamaConfig::llama3_8b()).unwrap().stack;
    let plan = Plan::new(&stack, PlanOptions::prefetch_deferred()).unwrap();
    assert_eq!(
        LlamaStack::plan_notation(&LlamaConfig::llama3_8b()).unwrap(),
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
    let hand = hand_llama::model(&c).unwrap();
    let generated = llama::model::<LlamaStack>(&c).unwrap();
    let reference = |m: &StackModel| Program::new(reference_step(m, 1).unwrap()).emit().unwrap();
    assert_eq!(reference(&generated), reference(&hand));
    let axis = Axis {
        name: "fsdp".into(),
        size: 4,
    };
    for o in [
        PlanOptions::baseline(),
        PlanOptions::prefetch(),
        LlamaStack::OPTIONS,
        LlamaStack::OPTIONS.with_unroll(1),
    ] {
        let emit = |m: &StackModel| train_step(m, o, &axis).unwrap().program.emit().unwrap();
        assert_eq!(emit(&generated), emit(&hand), "{o:?}");
    }
}

/// The tiny config's depth (4 layers) at widths small enough to run
/// three device counts quickly.
fn small(batch_per_device: i64) -> LlamaConfig {
    LlamaConfig {
        layers: 4,
        batch_per_device,
        ..LlamaConfig::small(0)
    }
}

/// With the options `LlamaStack`'s attribute declares (the ones `--bin train` uses), the
/// macro-declared model and the run-time API model have the same plan and program text, and
/// running both on 1, 2 and 4 devices gives bit-identical losses and gradients, which also
/// match the unsharded single-device reference.
#[test]
fn macro_llama_trains_like_the_hand_built_model_on_1_2_4_devices() {
    use common::fsdp::{assert_close, fixture, run_step};
    use common::graph::{Arg, Data};
    use stackscan::{DType, TensorType};
    use stackscan_runtime::testing as common;

    // The options the declared model hands the trainer: its stack attribute's.
    let options = Architecture::build(&LlamaConfig::tiny()).unwrap().1;
    assert_eq!(options, LlamaStack::OPTIONS);
    assert_eq!(
        options,
        PlanOptions::prefetch_deferred(),
        "the attribute's options"
    );
    let max = 4;
    let client = common::cached_cpu_client(max, TARGET_TMP);
    let (tokens, labels) = llama::synthetic_batch(&small(1), max as i64, 5);
    let ty = TensorType::new(DType::I32, [max as i64, 8]);
    let inputs = vec![
        Arg {
            ty: ty.clone(),
            data: Data::I(tokens),
        },
        Arg {
            ty,
            data: Data::I(labels),
        },
    ];
    for n in [1, 2, 4] {
        let c = small((max / n) as i64);
        let hand = hand_llama::model(&c).unwrap();
        let generated = llama::model::<LlamaStack>(&c).unwrap();
        assert_eq!(
            LlamaStack::plan(&c).unwrap(),
            Plan::new(&hand.stack, options).unwrap(),
            "plan on {n} devices"
        );
        let axis = Axis {
            name: "fsdp".into(),
            size: n,
        };
        let emit = |m: &StackModel| {
            train_step(m, options, &axis)
                .unwrap()
                .program
                .emit()
                .unwrap()
        };
        assert_eq!(emit(&generated), emit(&hand), "program text on {n} devices");
        let fx = fixture(&client, &hand, inputs.clone(), n, 23);
        let (hand_loss, hand_grads) = run_step(&client, &hand, &fx, options, n);
        let (gen_loss, gen_grads) = run_step(&client, &generated, &fx, options, n);
        assert_eq!(gen_loss, hand_loss, "losses on {n} devices");
        assert_eq!(gen_grads.len(), hand_grads.len());
        for (j, (g, h)) in gen_grads.iter().zip(&hand_grads).enumerate() {
            assert_eq!(g, h, "gradient {j} on {n} devices");
        }
        // Both are right, not merely equal: the mean of the per-device losses and the
        // gradients agree with the unsharded reference.
        let mean = hand_loss.iter().sum::<f64>() / n as f64;
        assert_close(&format!("loss on {n} devices"), &[mean], &[fx.loss], 1e-5);
        for (j, (h, r)) in hand_grads.iter().zip(&fx.grads).enumerate() {
            assert_close(&format!("gradient {j} on {n} devices"), h, r, 1e-5);
        }
    }
}
