//! Context parallelism: the Llama-style stack on `fsdp × context` meshes (2 × 2 and 2 × 4:
//! each sequence split over the `context` devices, weights co-sharded over all devices), and
//! the DeepSeek-V3-style stack on 2 × 2 and on `fsdp × expert × context` 2 × 2 × 2 (MLA's
//! compressed keys and values exchanged; expert and context parallelism co-sharded: expert
//! banks gathered over `fsdp` alone, experts and token exchanges over `expert × context`), equal the unsharded single-device reference: loss and every
//! gradient, f32, at the derived tolerance, with prefetch off, on and on + deferred, unroll 1
//! and 2.
//!
//! The reference runs the plain model on whole sequences. The context-parallel model has the
//! same weights; device `(f, c)` holds rows `f` of the batch and positions `c·S/cp ..` of each,
//! rotates them from that start, and gathers every piece's keys and values over `context`. A
//! RoPE position not offset, a causal mask that lets a piece see a later piece, a gradient of
//! the gathered keys not summed back over `context`, or a loss averaged over the wrong tokens
//! changes the loss or a gradient far beyond the tolerance.
//!
//! The Llama's blockwise attention (`attention_block`: the online softmax over key blocks that
//! context parallelism uses, asked for without it too) is checked the same way against the
//! full score matrix: a block's mask not offset by its first key, a running maximum or
//! denominator not rescaled, or a block left out moves the loss far beyond the tolerance.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan_models::registry::Architecture;
use stackscan_runtime::testing as common;

use common::fsdp::{Fixture, check_on_mesh, fixture};
use common::graph::{Arg, Data};
use stackscan::nn::context::CONTEXT_AXIS;
use stackscan::plan::PlanOptions;
use stackscan::{DType, Mesh, TensorType, layer_stack};
use stackscan_models::deepseek3::{self, DeepSeek3Config, Dense, MoeLayer};
use stackscan_models::llama::{LlamaConfig, synthetic_batch};

/// The target's directory for tests, where
/// [`cached_cpu_client`](stackscan_runtime::testing::cached_cpu_client) keeps its cache.
const TARGET_TMP: &str = env!("CARGO_TARGET_TMPDIR");

/// One dense layer, then MoE layers (the config's depth: 3, two MoE layers).
#[layer_stack(prefix = [Dense], block = [MoeLayer], layers = cfg.layers)]
#[derive(Debug)]
struct CpDeepSeek3;

const SEQ: i64 = 8;

fn config(batch_per_device: i64) -> LlamaConfig {
    LlamaConfig::small(batch_per_device)
}

/// The declared Llama at `c`, as the run-time model.
fn model(c: &LlamaConfig) -> stackscan::fsdp::StackModel {
    Architecture::build(c).unwrap().0
}

/// The global batch `[rows, SEQ]` laid out so that the test harness's split (device `d` takes
/// the `d`-th contiguous chunk) gives device `d = g·cp + c` (`context` is the mesh's minor-most
/// axis) rows `g·rows/groups ..` and positions `c·SEQ/cp ..` of each.
fn by_device(values: &[i32], rows: usize, groups: usize, cp: usize) -> Vec<i32> {
    let (per_rows, per_seq) = (rows / groups, SEQ as usize / cp);
    let mut out = Vec::with_capacity(values.len());
    for f in 0..groups {
        for c in 0..cp {
            for r in f * per_rows..(f + 1) * per_rows {
                let row = &values[r * SEQ as usize..(r + 1) * SEQ as usize];
                out.extend_from_slice(&row[c * per_seq..(c + 1) * per_seq]);
            }
        }
    }
    out
}

/// The reference's fixture with its inputs laid out for `groups × cp` devices ([`by_device`]):
/// the same weights, loss and gradients to compare with.
fn split_fixture(
    reference: Fixture,
    tokens: &[i32],
    labels: &[i32],
    groups: usize,
    cp: usize,
) -> Fixture {
    let rows = tokens.len() / SEQ as usize;
    Fixture {
        inputs: vec![
            tokens_arg(by_device(tokens, rows, groups, cp), rows),
            tokens_arg(by_device(labels, rows, groups, cp), rows),
        ],
        ..reference
    }
}

fn tokens_arg(values: Vec<i32>, rows: usize) -> Arg {
    Arg {
        ty: TensorType::new(DType::I32, [rows as i64, SEQ]),
        data: Data::I(values),
    }
}

#[test]
fn llama_on_fsdp_by_context_meshes_equals_the_unsharded_reference() {
    let client = common::cached_cpu_client(8, TARGET_TMP);
    for (fsdp, cp) in [(2, 2), (2, 4)] {
        let rows = 2 * fsdp;
        let plain = config((rows / fsdp) as i64);
        let (tokens, labels) = synthetic_batch(&plain, rows as i64, 5);
        let inputs = vec![
            tokens_arg(tokens.clone(), rows),
            tokens_arg(labels.clone(), rows),
        ];
        let reference = fixture(&client, &model(&plain), inputs, fsdp, 17);
        let split = split_fixture(reference, &tokens, &labels, fsdp, cp);
        let c = plain.with_context_parallel(fsdp * cp, cp).unwrap();
        assert_eq!(c.seq_per_device(), SEQ / cp as i64);
        let mesh = Mesh::new(&[("fsdp", fsdp), (CONTEXT_AXIS, cp)]).unwrap();
        let d = check_on_mesh(&client, &model(&c), &split, &mesh, &every_option_set());
        eprintln!(
            "{fsdp} × {cp}: worst norm-wise deviation {:.2e}, worst element {:.2e}",
            d.normwise, d.elementwise
        );
    }
}

/// {prefetch off, on, on + deferred} × {unroll 1, 2}.
fn every_option_set() -> Vec<PlanOptions> {
    [
        PlanOptions::baseline(),
        PlanOptions::prefetch(),
        PlanOptions::prefetch_deferred(),
    ]
    .into_iter()
    .flat_map(|o| [o.with_unroll(1), o.with_unroll(2)])
    .collect()
}

#[test]
fn deepseek3_on_context_and_expert_meshes_equals_the_unsharded_reference() {
    let client = common::cached_cpu_client(8, TARGET_TMP);
    // (fsdp, ep, cp): the data-parallel groups are fsdp × ep, each sequence over cp.
    for (fsdp, ep, cp) in [(2, 1, 2), (2, 2, 2)] {
        let (groups, devices) = (fsdp * ep, fsdp * ep * cp);
        let rows = 2 * groups;
        let plain = DeepSeek3Config::small(3, 1, (rows / groups) as i64);
        assert_eq!(plain.seq, SEQ);
        let (tokens, labels) = deepseek3::synthetic_batch(&plain, rows as i64, 5);
        let inputs = vec![
            tokens_arg(tokens.clone(), rows),
            tokens_arg(labels.clone(), rows),
        ];
        let reference_model = deepseek3::model::<CpDeepSeek3>(&plain).unwrap();
        let reference = fixture(&client, &reference_model, inputs, groups, 19);
        let split = split_fixture(reference, &tokens, &labels, groups, cp);
        let c = plain.with_context_parallel(devices, cp, ep).unwrap();
        let mesh = c.context_mesh(devices).unwrap();
        assert_eq!(mesh.size(), devices);
        let m = deepseek3::model::<CpDeepSeek3>(&c).unwrap();
        if ep > 1 {
            // Co-sharded: the banks are gathered over `fsdp` alone, so the experts split over
            // the `expert × context` ranks.
            let banks: Vec<_> = m
                .kinds
                .iter()
                .flat_map(|k| &k.params)
                .filter_map(|p| p.gathered_over.as_ref())
                .collect();
            assert!(!banks.is_empty());
            assert!(banks.iter().all(|a| a.name == "fsdp" && a.size == fsdp));
        }
        let d = check_on_mesh(&client, &m, &split, &mesh, &every_option_set());
        eprintln!(
            "DeepSeek-V3 {}: worst norm-wise deviation {:.2e}, worst element {:.2e}",
            mesh.describe(),
            d.normwise,
            d.elementwise
        );
    }
}

#[test]
fn llama_with_blockwise_attention_equals_the_full_scores() {
    let client = common::cached_cpu_client(8, TARGET_TMP);
    let (fsdp, rows) = (2, 4);
    let plain = config((rows / fsdp) as i64);
    let (tokens, labels) = synthetic_batch(&plain, rows as i64, 7);
    let inputs = vec![
        tokens_arg(tokens.clone(), rows),
        tokens_arg(labels.clone(), rows),
    ];
    let reference = fixture(&client, &model(&plain), inputs, fsdp, 23);
    let options = [
        PlanOptions::baseline().with_unroll(1),
        PlanOptions::prefetch_deferred().with_unroll(2),
    ];
    // Blocks of 2 and 4 of the 8 keys, on an FSDP mesh.
    for block in [2, 4] {
        let c = LlamaConfig {
            attention_block: Some(block),
            ..plain
        };
        let blocked = model(&c);
        assert_ne!(
            step_text(&blocked),
            step_text(&model(&plain)),
            "blocks of {block} keys"
        );
        let mesh = Mesh::new(&[("fsdp", fsdp)]).unwrap();
        let d = check_on_mesh(&client, &blocked, &reference, &mesh, &options);
        eprintln!(
            "blocks of {block}: worst norm-wise deviation {:.2e}",
            d.normwise
        );
    }
    // Under context parallelism, blocks of 2 keys where a piece holds 4 positions.
    let cp = 2;
    let split = split_fixture(reference, &tokens, &labels, fsdp, cp);
    let c = LlamaConfig {
        attention_block: Some(2),
        ..plain.with_context_parallel(fsdp * cp, cp).unwrap()
    };
    let mesh = Mesh::new(&[("fsdp", fsdp), (CONTEXT_AXIS, cp)]).unwrap();
    let d = check_on_mesh(&client, &model(&c), &split, &mesh, &options);
    eprintln!(
        "2 × 2, blocks of 2: worst norm-wise deviation {:.2e}",
        d.normwise
    );
}

/// The emitted f32 step of `m` on one device.
fn step_text(m: &stackscan::fsdp::StackModel) -> String {
    let options = PlanOptions::prefetch_deferred();
    stackscan::fsdp::train_step(m, options, &stackscan::Axis::new("fsdp", 1))
        .unwrap()
        .program
        .emit()
        .unwrap()
}

/// A block must divide the sequence, and blockwise attention has no sliding-window form: each
/// refused when the model is built, naming the field.
#[test]
fn an_attention_block_that_does_not_split_the_sequence_is_refused() {
    let build = |c: LlamaConfig| Architecture::build(&c).unwrap_err().to_string();
    let e = build(LlamaConfig {
        attention_block: Some(3),
        ..config(1)
    });
    assert!(
        e.contains("`attention_block` 3") && e.contains("`seq` 8"),
        "{e}"
    );
    let e = build(LlamaConfig {
        attention_block: Some(0),
        ..config(1)
    });
    assert!(e.contains("`attention_block` 0"), "{e}");
    let e = build(LlamaConfig {
        attention_block: Some(4),
        window: Some(4),
        ..config(1)
    });
    assert!(
        e.contains("`attention_block`") && e.contains("`window`"),
        "{e}"
    );
}

/// The split is checked where it is made: the context degree must divide the devices and the
/// sequence.
#[test]
fn a_context_split_that_does_not_divide_is_refused() {
    let e = config(1).with_context_parallel(8, 3).unwrap_err();
    assert!(e.to_string().contains("--cp 3"), "{e}");
    let e = config(1).with_context_parallel(16, 16).unwrap_err();
    assert!(e.to_string().contains("sequence length 8"), "{e}");
}
