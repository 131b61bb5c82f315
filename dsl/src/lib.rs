//! stackscan: declare a transformer's layer stack and build its FSDP training step as StableHLO.
//!
//! This crate is the pure-Rust half of stackscan (no FFI): a tensor graph builder with shape
//! and element-type checks ([`Scope`], [`Tensor`]), reverse-mode autodiff ([`vjp`]), a `scan`
//! primitive, collectives on a named mesh axis, and a StableHLO text emitter ([`Program`]).
//! The runtime crate, `stackscan-runtime`, compiles and runs what this crate emits through PJRT.
//!
//! ```
//! use stackscan::{DType, Program, Scope, TensorType, vjp};
//!
//! // y = softmax(x · W), summed against a fixed weighting so the output is a scalar loss.
//! let f = Scope::new("main");
//! let x = f.param(TensorType::new(DType::F32, [2, 3]));
//! let w = f.param(TensorType::new(DType::F32, [3, 4]));
//! let y = stackscan::nn::softmax(&x.matmul(&w)?, 1)?;
//! let forward = f.finish(&[y])?;
//!
//! // The vjp takes (x, W, dy) and returns (dx, dW).
//! let backward = vjp(&forward)?;
//! assert_eq!(backward.result_types().len(), 2);
//! let mlir = Program::new(backward).emit()?;
//! assert!(mlir.contains("stablehlo.dot_general"));
//! println!("{mlir}");
//! # Ok::<(), stackscan::Error>(())
//! ```

pub(crate) mod autodiff;
pub mod auxiliary;
mod builder;
pub mod cost;
pub mod decode;
mod dtype;
mod emit;
mod error;
mod family;
pub mod fsdp;
pub mod hf_map;
mod infer;
pub mod ir;
pub mod layer;
pub mod layout;
mod lower;
mod mesh;
pub mod model;
pub mod module;
pub mod nn;
mod ops;
pub mod plan;
mod precision;
mod replay;
pub mod rng;
pub mod sim;
mod types;

pub use autodiff::{value_and_vjp, vjp, vjp_wrt};
pub use builder::{Branch, Scope, Tensor};
pub use dtype::{DType, UnknownDType};
pub use emit::{Alias, Program, Sharding};
pub use error::{Error, Result};
pub use ir::{Axis, DotDims, Function, LhsCotangent, TriangularSolve};
#[doc(hidden)]
pub use layer::private as __private;
pub use layer::{Forward, LayerStack, SubLayer};
pub use mesh::Mesh;
pub use model::{Inputs, Model};
pub use module::Module;
pub use ops::{concatenate, optimization_barrier};
pub use precision::Precision;
pub use stackscan_macros::{Inputs, Model, Module, SubLayer, layer_stack};
pub use types::TensorType;
