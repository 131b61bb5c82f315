//! Test support shared by the integration tests of this crate and of `stackscan-cli`: a
//! client of the CPU plugin, DSL functions compiled and run in f64, VJPs checked against
//! finite differences, FSDP steps checked against the unsharded reference, trainer runs of
//! several steps checked against a multi-step reference, and the trainer tests' optimizer and
//! batches.
//!
//! Behind the `testing` feature, which only the two crates' `[dev-dependencies]` enable: these
//! helpers panic on any failure, which a test wants and a library user does not.
//!
//! ```no_run
//! use stackscan::TensorType;
//! use stackscan_runtime::testing::{self, graph};
//!
//! // d/dx Σ tanh(x)·w at random points, against central differences.
//! let client = testing::cpu_client(1);
//! let mut rng = stackscan::rng::Rng::new(1);
//! let x = [graph::float_arg(&mut rng, &[2, 3], -1.0, 1.0)];
//! graph::check_vjp(&client, "tanh", &x, graph::TOL, |p| p[0].tanh());
//! ```

mod cpu;
pub mod fsdp;
pub mod graph;
pub mod host;
pub mod multi_step;
pub mod train;

pub use cpu::{
    TEST_XLA_OPTIONS_ENV, binary_xla_flags, cached_cpu_client, cpu_client, cpu_plugin,
    newer_cpu_plugin, step_bound_cpu_client,
};
