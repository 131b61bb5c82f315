//! The fused update's program: its results, donation, auxiliary outputs and cost.
use std::rc::Rc;

use super::*;
use crate::Axis;
use crate::fsdp::{InputSpec, LayerKind, ParamSpec, StackModel, train_step};
use crate::plan::{PlanOptions, Stack};

#[test]
fn the_default_is_valid_and_each_bad_field_is_named() {
    assert_eq!(Adam::default().validate(), Ok(()));
    let lr = Adam {
        lr: f64::NAN,
        ..Adam::default()
    };
    assert_eq!(
        lr.validate().map_err(|e| e.to_string()),
        Err("`adam`: `lr` is NaN; expected a finite number > 0".to_owned())
    );
    let beta2 = Adam {
        beta2: 1.0,
        ..Adam::default()
    };
    assert!(matches!(
        beta2.validate(),
        Err(Error::InvalidHyperParameter { field: "beta2", .. })
    ));
    // A zero `beta1` (no momentum) is valid Adam; a zero `eps` is not (0/0 where every
    // gradient so far was 0).
    let edge = Adam {
        beta1: 0.0,
        ..Adam::default()
    };
    assert_eq!(edge.validate(), Ok(()));
    let eps = Adam {
        eps: 0.0,
        ..Adam::default()
    };
    assert!(matches!(
        eps.validate(),
        Err(Error::InvalidHyperParameter { field: "eps", .. })
    ));
}

/// `[loss, applied, weights…, first moments…, second moments…]`, the flag agreed over the
/// mesh by the `psum` that also gives the global gradient norm.
#[test]
fn the_update_returns_the_applied_flag_after_the_loss() -> Result<()> {
    let row = TensorType::new(DType::F32, [2, 8]);
    let model = StackModel {
        stack: Stack::homogeneous("mlp", 2)?,
        kinds: vec![LayerKind {
            name: "mlp".into(),
            params: vec![ParamSpec::sharded("w", &[8, 8], DType::F32, 0)],
            forward: Rc::new(|h, w| h.matmul(&w[0])),
        }],
        activation: row.clone(),
        inputs: vec![InputSpec::new("x", row.clone()), InputSpec::new("y", row)],
        outer_params: vec![ParamSpec::replicated("g", &[8], DType::F32)],
        pre: Rc::new(|inputs, _| Ok(inputs[0].clone())),
        post: Rc::new(|h, inputs, _| h.sub(&inputs[1])?.square()?.mean(&[0, 1])),
    };
    let axis = Axis {
        name: "fsdp".into(),
        size: 2,
    };
    let step = train_step(&model, PlanOptions::prefetch(), &axis)?;
    let program = with_adam(&step, Adam::default())?;
    let results = program.main().result_types();
    let weights = model.weights().len();
    let state = 3 * weights + 1;
    assert_eq!(results.len(), 2 + state + OPTIMIZER_OUTPUTS.len());
    assert_eq!(results[0], TensorType::scalar(DType::F32));
    assert_eq!(results[1], TensorType::scalar(DType::I32));
    let params = program.main().param_types();
    // The state (weights, moments, then the step count) comes back in parameter order,
    // then the learning rate and the gradient norm.
    assert_eq!(&results[2..2 + state], &params[2..]);
    assert_eq!(results[1 + state], TensorType::scalar(DType::F32));
    assert_eq!(
        &results[2 + state..],
        &[
            TensorType::scalar(DType::F32),
            TensorType::scalar(DType::F32)
        ]
    );
    // Every weight, moment and the step count are donated to their results; the inputs
    // are not.
    let donated: Vec<(usize, usize)> = program
        .aliases()
        .iter()
        .map(|a| (a.param, a.result))
        .collect();
    let expected: Vec<(usize, usize)> = (0..3 * weights + 1).map(|k| (2 + k, 2 + k)).collect();
    assert_eq!(donated, expected);
    let text = program.emit()?;
    assert_eq!(text.matches("tf.aliasing_output").count(), 3 * weights + 1);
    let adam = Adam {
        lr: 0.0,
        ..Adam::default()
    };
    assert!(with_adam(&step, adam).is_err());
    Ok(())
}

/// A layer's auxiliary outputs come back after everything else, once per name whatever
/// the depth, in the order first recorded; a sign-descent weight is checked like Adam's
/// hyper-parameters.
#[test]
fn auxiliary_outputs_follow_the_state() -> Result<()> {
    use crate::auxiliary::AuxRole;
    let row = TensorType::new(DType::F32, [2, 8]);
    let model = StackModel {
        stack: Stack::homogeneous("mlp", 3)?,
        kinds: vec![LayerKind {
            name: "mlp".into(),
            params: vec![
                ParamSpec::sharded("w", &[8, 8], DType::F32, 0),
                ParamSpec::replicated("b", &[8], DType::F32)
                    .with_update(Update::SignDescent { rate: 0.1 }),
            ],
            forward: Rc::new(|h, w| {
                let y = h.matmul(&w[0])?;
                y.square()?
                    .mean(&[0, 1])?
                    .record_aux("penalty", AuxRole::Loss)?;
                h.sum_all()?.record_aux("total", AuxRole::Metric)?;
                y.add(&w[1].broadcast_to(y.dims())?)
            }),
        }],
        activation: row.clone(),
        inputs: vec![InputSpec::new("x", row.clone()), InputSpec::new("y", row)],
        outer_params: vec![],
        pre: Rc::new(|inputs, _| Ok(inputs[0].clone())),
        post: Rc::new(|h, inputs, _| h.sub(&inputs[1])?.square()?.mean(&[0, 1])),
    };
    let axis = Axis {
        name: "fsdp".into(),
        size: 2,
    };
    let step = train_step(&model, PlanOptions::prefetch_deferred(), &axis)?;
    let names: Vec<(&str, AuxRole)> = step.aux.iter().map(|a| (a.name.as_str(), a.role)).collect();
    assert_eq!(
        names,
        [("penalty", AuxRole::Loss), ("total", AuxRole::Metric)]
    );
    assert_eq!(
        step.updates,
        [Update::Adam, Update::SignDescent { rate: 0.1 }]
    );
    let scalar = TensorType::scalar(DType::F32);
    let results = step.program.main().result_types();
    assert_eq!(results.len(), 1 + 2 + 2);
    assert_eq!(&results[3..], &[scalar.clone(), scalar.clone()]);
    let program = with_adam(&step, Adam::default())?;
    let results = program.main().result_types();
    assert_eq!(results.len(), 2 + 3 * 2 + 1 + 2 + OPTIMIZER_OUTPUTS.len());
    // The layers' outputs, then the optimizer's (learning rate, gradient norm).
    assert_eq!(
        &results[9..],
        &[scalar.clone(), scalar.clone(), scalar.clone(), scalar]
    );
    // The state's aliases are where they were without auxiliary outputs.
    assert!(
        program
            .aliases()
            .iter()
            .all(|a| a.param == a.result && a.result < 9)
    );
    let mut bad = step.clone();
    bad.updates[1] = Update::SignDescent { rate: f64::NAN };
    assert!(matches!(
        with_adam(&bad, Adam::default()),
        Err(Error::InvalidHyperParameter { field: "rate", .. })
    ));
    Ok(())
}

/// The standalone update is what a cost model prices: for one f32 weight of 1024 elements on 4
/// devices it reads the weight, gradient and both moments and writes the three new state
/// tensors (after fusion the moments, the step and the selects are one pass): 7 × 4096 bytes,
/// plus a few scalars (loss, step, the schedule's and the norm's); the global norm, a dot of
/// the gradient with itself, reads the gradient once more among the matrix products' bytes. The
/// norm is the verdict too, so one all-reduce of an `f32[]` agrees both. An earlier version
/// counted the update's new values for finiteness as well, which read all three again (and, in
/// XLA, kept them beside the old state until the count was done).
#[test]
fn the_standalone_update_reads_the_state_once_and_writes_it_once() -> Result<()> {
    let axis = Axis {
        name: "fsdp".into(),
        size: 4,
    };
    let w = TensorType::new(DType::F32, [1024]);
    let f = Adam::default().update_function(std::slice::from_ref(&w), &axis)?;
    assert_eq!(f.params.len(), 1 + 4 + 1);
    let results: Vec<TensorType> = f.result_types();
    assert_eq!(results[0], TensorType::scalar(DType::I32));
    // The three new state tensors, the next step count, the learning rate and the
    // gradient norm.
    let scalar = TensorType::scalar(DType::F32);
    assert_eq!(
        &results[1..],
        &[
            w.clone(),
            w.clone(),
            w,
            scalar.clone(),
            scalar.clone(),
            scalar
        ]
    );
    let c = crate::cost::of(&f)?;
    let state = 7 * 4096;
    let total = c.hbm_bytes.total();
    assert!(
        (state..=state + 96).contains(&total),
        "{total} bytes against the state's {state}"
    );
    // The norm's dot reads the gradient once more, priced with the matrix products.
    let dot = c.dot_bytes.total();
    assert!((4096..=4096 + 16).contains(&dot), "{dot} bytes of dots");
    // 2·(n−1)/n of 4 bytes, rounded down: 6, once.
    assert_eq!(c.collective(crate::cost::Collective::AllReduce).total(), 6);
    assert!(
        Adam {
            lr: -1.0,
            ..Adam::default()
        }
        .update_function(&[], &axis)
        .is_err()
    );
    Ok(())
}
