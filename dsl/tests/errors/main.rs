//! Every kind of `stackscan::Error`, from a mistake a user can make, with the op it names.
//!
//! Each test checks the variant, its fields where they say something, and that the message
//! names the op in backticks. `no_panics` feeds many more malformed inputs through the front
//! end, differentiation and emission and requires an `Err` (never a panic) from each.
//!
//! The cases are grouped by where the mistake is made: one op's operands (`ops`), loops,
//! collectives, scopes and differentiation (`graphs`), whole programs and constants
//! (`programs`), and the sweep for panics (`no_panics`).

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use std::fmt::Debug;
use std::panic::{AssertUnwindSafe, catch_unwind};

mod graphs;
mod no_panics;
mod ops;
mod programs;

use stackscan::{
    Axis, DType, DotDims, Error, Program, Result, Scope, Sharding, Tensor, TensorType,
    TriangularSolve, concatenate, optimization_barrier, vjp, vjp_wrt,
};

fn t(dtype: DType, dims: &[i64]) -> TensorType {
    TensorType::new(dtype, dims)
}

fn f32s(dims: &[i64]) -> TensorType {
    t(DType::F32, dims)
}

fn axis(size: usize) -> Axis {
    Axis {
        name: "x".to_owned(),
        size,
    }
}

/// The error of `r`, after checking that its message names `op` in backticks.
fn err_naming<T: Debug>(r: Result<T>, op: &str) -> Error {
    let e = r.expect_err("expected an error");
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("`{op}`")),
        "message does not name `{op}`: {msg}"
    );
    e
}
