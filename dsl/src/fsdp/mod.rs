//! FSDP training steps: a stack model lowered through a [`Plan`](crate::plan::Plan) into one
//! program on a mesh, with weight prefetch and deferred gradient reduce-scatter; and the
//! unsharded single-device reference it must agree with.

mod model;
mod optimizer;
mod reference;
mod step;

pub use model::{Init, InputSpec, LayerFn, LayerKind, ParamSpec, PostFn, PreFn, StackModel};
pub use optimizer::{Adam, with_adam};
pub use reference::reference_step;
pub use step::{GradientReduction, TrainStep, train_step, train_step_with};
