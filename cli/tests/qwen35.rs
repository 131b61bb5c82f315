//! The Qwen3.5-style hybrid, `[GDN, GDN, GDN, attention]` and `[attention, GDN, GDN, GDN]`
//! over two blocks: the whole model with the recurrent delta rule against the chunked one
//! (loss and every gradient), and the printed plans.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan_runtime::testing as common;

use common::fsdp::{assert_close, fixture};
use common::graph::{Arg, Data};
use stackscan::{DType, LayerStack, TensorType};
use stackscan_models::gdn_layer::GdnForm;
use stackscan_models::qwen35::{
    Qwen35AttentionFirst, Qwen35Config, Qwen35Stack, model, synthetic_batch,
};

const SEQ: i64 = 8;

/// The tiny config's structure at sizes that compile quickly.
fn config(batch_per_device: i64, form: GdnForm) -> Qwen35Config {
    Qwen35Config::small(batch_per_device, form)
}

/// Tokens and labels for `rows` sequences.
fn inputs(rows: usize) -> Vec<Arg> {
    let (tokens, labels) = synthetic_batch(&config(1, GdnForm::Recurrent), rows as i64, 3);
    let ty = TensorType::new(DType::I32, [rows as i64, SEQ]);
    vec![
        Arg {
            ty: ty.clone(),
            data: Data::I(tokens),
        },
        Arg {
            ty,
            data: Data::I(labels),
        },
    ]
}

/// The whole model's reference loss and gradients with the chunked delta rule equal those
/// with the recurrent one (f32; the two forms round differently, hence 1e-4).
fn recurrent_matches_chunked<S: LayerStack<Config = Qwen35Config>>() {
    let client = common::cpu_client(1);
    let recurrent = model::<S>(&config(2, GdnForm::Recurrent)).unwrap();
    let chunked = model::<S>(&config(2, GdnForm::Chunked(4))).unwrap();
    let a = fixture(&client, &recurrent, inputs(2), 1, 7);
    let b = fixture(&client, &chunked, inputs(2), 1, 7);
    assert!(a.loss.is_finite() && a.loss > 0.0, "loss {}", a.loss);
    assert_close("loss", &[b.loss], &[a.loss], 1e-5);
    assert_eq!(a.grads.len(), b.grads.len());
    for (j, (g, r)) in b.grads.iter().zip(&a.grads).enumerate() {
        assert!(r.iter().any(|&x| x != 0.0), "gradient {j} is zero");
        assert_close(&format!("gradient {j}"), g, r, 1e-4);
    }
}

#[test]
fn recurrent_and_chunked_gdn_give_the_same_model() {
    recurrent_matches_chunked::<Qwen35Stack>();
    recurrent_matches_chunked::<Qwen35AttentionFirst>();
}

/// The seed's plan: `[GDN 0, GDN 1] → [GDN 2] → [attention]` forward and its mirror
/// backward, per block, for the tiny (2 blocks) and the full (10 blocks) config, and for the
/// attention-first variant. Forward, a block loop (of one trip for 2 blocks, of 9 for 10) and
/// the peeled last block; backward, the first step alone (it takes no deferred gradient, unlike
/// every later attention step), a loop over the seed's backward block rotated by one layer,
/// and the last block's remaining three steps.
#[test]
fn plans_print_the_seed_notation() {
    let fwd = "[GDN 0, GDN 1] → [GDN 2] → [attention]";
    let bwd = "[attention] → [GDN 2] → [GDN 1] → [GDN 0]";
    let rotated = "[GDN 2] → [GDN 1] → [GDN 0] → [attention]";
    let rest = "[GDN 2] → [GDN 1] → [GDN 0]";
    for (notation, trips) in [
        (
            Qwen35Stack::plan_notation(&Qwen35Config::tiny()).unwrap(),
            1,
        ),
        (
            Qwen35Stack::plan_notation(&Qwen35Config::qwen35_35b_a3b()).unwrap(),
            9,
        ),
    ] {
        assert_eq!(
            notation,
            (
                format!("{{{fwd}}} × {trips} → {fwd}"),
                format!("[attention] → {{{rotated}}} × {trips} → {rest}")
            )
        );
    }
    // With its one-trip loop written out, the tiny backward is the seed's block twice.
    assert_eq!(
        format!("[attention] → {rotated} → {rest}"),
        format!("{bwd} → {bwd}")
    );
    let fwd = "[attention] → [GDN 1, GDN 2] → [GDN 3]";
    let bwd = "[GDN 3] → [GDN 2] → [GDN 1] → [attention]";
    let rotated = "[GDN 2] → [GDN 1] → [attention] → [GDN 3]";
    let rest = "[GDN 2] → [GDN 1] → [attention]";
    assert_eq!(
        Qwen35AttentionFirst::plan_notation(&Qwen35Config::tiny()).unwrap(),
        (
            format!("{{{fwd}}} × 1 → {fwd}"),
            format!("[GDN 3] → {{{rotated}}} × 1 → {rest}")
        )
    );
    assert_eq!(
        format!("[GDN 3] → {rotated} → {rest}"),
        format!("{bwd} → {bwd}")
    );
}

/// Every RMSNorm of the model, the final one too, normalises with the model's epsilon, 1e-6
/// (`rms_norm_eps`); the final norm once used the Llama helper's 1e-5.
#[test]
fn every_norm_uses_the_models_epsilon() {
    use stackscan::ir::{Literal, Op};
    let m = model::<Qwen35Stack>(&config(1, GdnForm::Chunked(4))).unwrap();
    let f = stackscan::fsdp::reference_step(&m, 1).unwrap();
    let floats: Vec<f64> = f
        .nodes
        .iter()
        .filter_map(|n| match &n.op {
            Op::Constant(Literal::Float(v)) => Some(v.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    let near = |x: f64, eps: f64| (x - eps).abs() < eps * 1e-3;
    assert!(
        floats
            .iter()
            .any(|&x| near(x, stackscan_models::qwen35::NORM_EPS)),
        "the final norm's epsilon is not in the step"
    );
    assert!(
        !floats.iter().any(|&x| near(x, 1e-5)),
        "a norm outside the layers uses 1e-5"
    );
}
