//! FSDP training steps: a stack model lowered through a [`Plan`](crate::plan::Plan) into one
//! program on a mesh, with weight prefetch and deferred gradient reduce-scatter; and the
//! unsharded single-device reference it must agree with.
//!
//! ```
//! use std::rc::Rc;
//! use stackscan::fsdp::{InputSpec, LayerKind, ParamSpec, StackModel, train_step};
//! use stackscan::plan::{PlanOptions, Stack};
//! use stackscan::{Axis, DType, TensorType};
//!
//! // Six residual tanh layers of width 8 on rows of 2, squared loss against a target.
//! let row = TensorType::new(DType::F32, [2, 8]);
//! let model = StackModel {
//!     stack: Stack::homogeneous("mlp", 6)?,
//!     kinds: vec![LayerKind {
//!         name: "mlp".into(),
//!         params: vec![ParamSpec::sharded("w", &[8, 8], DType::F32, 0)],
//!         forward: Rc::new(|h, w| h.add(&h.matmul(&w[0])?.tanh()?)),
//!     }],
//!     activation: row.clone(),
//!     inputs: vec![
//!         InputSpec::new("x", row.clone()),
//!         InputSpec::new("y", row),
//!     ],
//!     outer_params: vec![],
//!     pre: Rc::new(|inputs, _| Ok(inputs[0].clone())),
//!     post: Rc::new(|h, inputs, _| h.sub(&inputs[1])?.square()?.mean(&[0, 1])),
//! };
//! let axis = Axis { name: "fsdp".into(), size: 4 };
//! let step = train_step(&model, PlanOptions::prefetch_deferred(), &axis)?;
//! assert_eq!(step.plan.forward.notation(&model.stack), "[mlp 0 … mlp 4] → [mlp 5]");
//! let text = step.program.emit()?;
//! assert!(text.contains("\"stablehlo.all_gather\"") && text.contains("\"stablehlo.reduce_scatter\""));
//! # Ok::<(), stackscan::Error>(())
//! ```

mod accumulate;
mod forward;
mod listing;
mod loops;
mod lowering;
mod model;
mod optimizer;
mod pass;
mod reference;
mod rows;
mod schedule;
mod state;
mod step;
mod tags;
#[cfg(test)]
pub(crate) mod toy;
mod training;

pub use accumulate::accumulate;
pub use forward::{forward_loss_on, forward_step_on};
pub use listing::NamedParam;
pub use loops::{LOOP_LABEL, ODD_FIRST_STEP, group_label};
pub use model::{
    Init, InputSpec, LayerFn, LayerKind, ParamSpec, PostFn, PreFn, StackModel, Update,
};
pub use optimizer::{Adam, OPTIMIZER_OUTPUTS, adam_outputs, with_adam};
pub use reference::reference_step;
pub use schedule::{Schedule, decays};
pub use step::{
    GradientReduction, TrainStep, train_step, train_step_on, train_step_on_with, train_step_with,
};
pub use tags::{EXPLICIT_FSDP, SCHEDULING_GROUP};
pub use training::{TrainingProgram, training_program};
