//! stackscan: declare a transformer's layer stack and build its FSDP training step as StableHLO.
//!
//! This crate is the pure-Rust half of stackscan (no FFI): element types now; the tensor graph
//! builder, autodiff, the schedule planner and the StableHLO emitter grow here. The runtime
//! crate, `stackscan-runtime`, compiles and runs what this crate emits through PJRT.
//!
//! ```
//! use stackscan::DType;
//!
//! assert_eq!(DType::BF16.size_in_bytes(), 2);
//! assert_eq!(DType::F32.mlir_name(), "f32");
//! assert_eq!("i64".parse::<DType>(), Ok(DType::I64));
//! ```

mod dtype;

pub use dtype::{DType, UnknownDType};
