//! The op front end: methods on [`Tensor`](crate::Tensor), one file per family.
//!
//! Every method checks shapes and element types (through `infer`) and returns a typed error
//! naming the op; none panics.

mod collective;
mod elementwise;
mod index;
mod linalg;
mod reduce;
mod shape;

pub use elementwise::optimization_barrier;
pub use shape::concatenate;
