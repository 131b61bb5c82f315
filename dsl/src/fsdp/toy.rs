//! The smallest stack model the crate's own tests train: three residual `tanh` layers of
//! width 8 on rows of 2, its loss the squared error to a target input.

use std::rc::Rc;

use crate::builder::Tensor;
use crate::dtype::DType;
use crate::error::Result;
use crate::plan::Stack;
use crate::types::TensorType;

use super::model::{InputSpec, LayerKind, ParamSpec, StackModel};

/// The toy model; `widen` maps the activation before the loss compares it with the f32
/// target (identity, or [`crate::nn::at_least_f32`] for a model that runs under bf16).
pub(crate) fn residual_tanh(widen: fn(&Tensor) -> Result<Tensor>) -> StackModel {
    let row = TensorType::new(DType::F32, [2, 8]);
    StackModel {
        stack: Stack::homogeneous("mlp", 3).expect("three layers of one kind"),
        kinds: vec![LayerKind {
            name: "mlp".into(),
            params: vec![ParamSpec::sharded("w", &[8, 8], DType::F32, 0)],
            forward: Rc::new(|h, w| h.add(&h.matmul(&w[0])?.tanh()?)),
        }],
        activation: row.clone(),
        inputs: vec![InputSpec::new("x", row.clone()), InputSpec::new("y", row)],
        outer_params: vec![],
        pre: Rc::new(|inputs, _| Ok(inputs[0].clone())),
        post: Rc::new(move |h, inputs, _| widen(h)?.sub(&inputs[1])?.square()?.mean(&[0, 1])),
    }
}
