//! Per-kind layer costs traced from a model's own forward, against hand-derived counts.

use std::rc::Rc;

use super::*;
use crate::dtype::DType;
use crate::fsdp::{InputSpec, LayerFn, LayerKind, ParamSpec, StackModel};
use crate::plan::Stack;
use crate::precision::Precision;
use crate::types::TensorType;

/// `tanh(h·W) ⊙ g` over rows `[2, 8]`: `W: [8, 8]` sharded, `g: [8]` replicated.
fn model(forward: LayerFn) -> StackModel {
    let row = TensorType::new(DType::F32, [2, 8]);
    StackModel {
        stack: Stack::homogeneous("tanh", 3).unwrap(),
        kinds: vec![LayerKind {
            name: "tanh".into(),
            params: vec![
                ParamSpec::sharded("w", &[8, 8], DType::F32, 0),
                ParamSpec::replicated("g", &[8], DType::F32),
            ],
            forward,
        }],
        activation: row.clone(),
        inputs: vec![InputSpec::new("x", row)],
        outer_params: vec![],
        pre: Rc::new(|inputs, _| Ok(inputs[0].clone())),
        post: Rc::new(|h, _, _| h.mean(&[0, 1])),
    }
}

fn tanh_layer() -> LayerFn {
    Rc::new(|h, w| {
        h.matmul(&w[0])?
            .tanh()?
            .mul(&w[1].expand_dims(0)?.broadcast_to(&[2, 8])?)
    })
}

#[test]
fn a_tanh_layer_costs_one_dot_forward_and_three_backward() {
    let c = layer_costs(&model(tanh_layer()), 4, &[], Precision::F32).unwrap();
    assert_eq!(c.len(), 1);
    let c = &c[0];
    assert_eq!(c.kind, "tanh");
    // Forward: h·W is 2·M·K·N = 2·2·8·8.
    assert_eq!(c.forward.matrix_flops.get(DType::F32), 256);
    // Backward: h·W recomputed (tanh's VJP reads it), then dh = dz·Wᵀ and dW = hᵀ·dz.
    assert_eq!(c.backward.matrix_flops.get(DType::F32), 3 * 256);
    assert!(c.backward.vector_flops.total() > c.forward.vector_flops.total());
    // W is 8·8·4 = 256 bytes, g 32: on 4 devices each receives and sends 3/4 of W, and
    // all-reduces g's gradient (2·3/4·32).
    assert_eq!(c.weight_bytes, 288);
    assert_eq!(c.gathered_bytes, 192);
    assert_eq!(c.reduce_scatter_bytes, 192);
    assert_eq!(c.all_reduce_bytes, 48);
    let one = &layer_costs(&model(tanh_layer()), 1, &[], Precision::F32).unwrap()[0];
    assert_eq!((one.gathered_bytes, one.all_reduce_bytes), (0, 0));
}

#[test]
fn a_bf16_layer_is_priced_from_its_own_types() {
    let m = model(tanh_layer());
    let bf16 = &layer_costs(&m, 4, &[], Precision::BF16).unwrap()[0];
    // The product runs in bf16, the weights move in bf16 (half of 288, 192), the gradients
    // are reduced in f32 as before.
    assert_eq!(bf16.forward.matrix_flops.get(DType::BF16), 256);
    assert_eq!(bf16.forward.matrix_flops.get(DType::F32), 0);
    assert_eq!((bf16.weight_bytes, bf16.gathered_bytes), (144, 96));
    assert_eq!(
        (bf16.reduce_scatter_bytes, bf16.all_reduce_bytes),
        (192, 48)
    );
    let both = &layer_costs(&m, 4, &[], Precision::BF16_REDUCE_BF16).unwrap()[0];
    assert_eq!((both.reduce_scatter_bytes, both.all_reduce_bytes), (96, 24));
}

#[test]
fn only_active_experts_count_for_flops() {
    let s = crate::builder::Scope::new("experts");
    let x = s.param(TensorType::new(DType::F32, [4, 3, 5]));
    let w = s.param(TensorType::new(DType::F32, [4, 5, 7]));
    let y = x.matmul(&w).unwrap();
    let f = s.finish(&[y]).unwrap();
    let moe = |experts| Accounting {
        experts: Some(ActiveExperts { experts, active: 1 }),
        ..Accounting::default()
    };
    // 2·4·3·5·7 = 840 over all four experts; one of four is active.
    assert_eq!(of_with(&f, &moe(4)).unwrap().matrix_flops.total(), 210);
    // No batch dimension of 8 experts: not an expert product.
    assert_eq!(of_with(&f, &moe(8)).unwrap().matrix_flops.total(), 840);
    assert_eq!(of(&f).unwrap().matrix_flops.total(), 840);
}

#[test]
fn a_failing_kind_is_named() {
    let bad: LayerFn = Rc::new(|h, w| h.matmul(&w[1]));
    let e = layer_costs(&model(bad), 4, &[], Precision::F32).unwrap_err();
    assert!(e.to_string().contains("layer kind `tanh`"), "{e}");
    let e = layer_costs(&model(tanh_layer()), 0, &[], Precision::F32).unwrap_err();
    assert!(e.to_string().contains("at least one device"), "{e}");
}

/// Four experts of `[8, 6]` over rows `[2, 8]`: the rows dispatched to every expert as a
/// `[4, 2, 8]` buffer (capacity 2), one batched product, summed back.
fn expert_model() -> StackModel {
    let mut m = model(Rc::new(|h, w| {
        let slots = h.expand_dims(0)?.broadcast_to(&[4, 2, 8])?;
        let y = slots.matmul(&w[0])?.sum(&[0])?;
        h.add(&y.matmul(&w[1])?)
    }));
    m.kinds[0].params = vec![
        ParamSpec::sharded("experts", &[4, 8, 6], DType::F32, 0),
        ParamSpec::sharded("out", &[6, 8], DType::F32, 0),
    ];
    m
}

#[test]
fn expert_parallelism_splits_expert_weights_and_prices_the_token_exchange() {
    let ep = |degree| Accounting {
        expert_parallel: Some(ExpertParallel { experts: 4, degree }),
        ..Accounting::default()
    };
    let c = &layer_costs(&expert_model(), 8, &[ep(4)], Precision::F32).unwrap()[0];
    // Experts: 4·8·6·4 = 768 B, a quarter per expert shard, gathered over 8/4 = 2 devices:
    // 768/4/2·1 = 96. `out`: 6·8·4 = 192 B over all 8: 192/8·7 = 168.
    assert_eq!(c.gathered_bytes, 96 + 168);
    assert_eq!(c.reduce_scatter_bytes, 96 + 168);
    // The dispatch buffer [4, 2, 8] f32 is 256 B; each device sends 3/4 of it per exchange:
    // 192, twice forward, four times backward.
    assert_eq!(
        c.exchange,
        Exchange {
            forward_bytes: 384,
            forward_count: 2,
            backward_bytes: 768,
            backward_count: 4,
        }
    );
    // Without expert parallelism nothing is exchanged and experts gather over all 8.
    let plain = &layer_costs(&expert_model(), 8, &[], Precision::F32).unwrap()[0];
    assert_eq!(plain.exchange, Exchange::default());
    assert_eq!(plain.gathered_bytes, 768 / 8 * 7 + 168);
    let e = layer_costs(&expert_model(), 6, &[ep(4)], Precision::F32).unwrap_err();
    assert!(
        e.to_string().contains("must divide both the 6 devices"),
        "{e}"
    );
}

/// A model built for the expert-parallel mesh marks its expert bank `gathered_over` the
/// `fsdp` sub-axis: the layer is traced on the bank as gathered (this rank's experts), not at
/// full size, and the gather is priced over that sub-axis only.
#[test]
fn a_bank_gathered_over_a_sub_axis_is_traced_and_priced_as_gathered() {
    let mut m = expert_model();
    // The forward reads the expert count off the bank it is given.
    m.kinds[0].forward = Rc::new(|h, w| {
        let e = w[0].dims()[0];
        let slots = h.expand_dims(0)?.broadcast_to(&[e, 2, 8])?;
        let y = slots.matmul(&w[0])?.sum(&[0])?;
        h.add(&y.matmul(&w[1])?)
    });
    let fsdp = crate::ir::Axis::new("fsdp", 2);
    m.kinds[0].params[0] = m.kinds[0].params[0].clone().gathered_over(fsdp);
    let c = &layer_costs(&m, 8, &[], Precision::F32).unwrap()[0];
    // 8 devices, gathered over 2: each holds 4·2/8 = 1 expert. Forward: [1, 2, 8]·[1, 8, 6]
    // is 2·1·2·8·6 = 192, then [2, 6]·[6, 8] another 192 (at full size the first would be
    // 768).
    assert_eq!(c.forward.matrix_flops.get(DType::F32), 384);
    // The bank (768 B, 96 B a shard) arrives from the one other device of its `fsdp` group:
    // 96; `out` over all 8: 168. The same as the accounting's expert parallelism prices it.
    assert_eq!(c.gathered_bytes, 96 + 168);
    assert_eq!(c.reduce_scatter_bytes, 96 + 168);
    assert_eq!(c.weight_bytes, 768 + 192);
}
