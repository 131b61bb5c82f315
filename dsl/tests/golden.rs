//! Golden files: a few programs built in Rust, emitted, and compared byte for byte with the
//! checked-in `tests/golden/<name>.mlir`.
//!
//! A change to the emitter shows up as a diff of these files in review. To accept one, rerun
//! with `STACKSCAN_BLESS=1`, which rewrites the files instead of comparing, and read the diff.
//! `runtime/tests/golden_compile.rs` compiles every file here on the CPU plugin.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use std::path::PathBuf;

use stackscan::{
    Axis, DType, DotDims, Function, Program, Result, Scope, Sharding, TensorType, nn, vjp,
};

fn golden_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(format!("{name}.mlir"))
}

fn blessing() -> bool {
    std::env::var_os("STACKSCAN_BLESS").is_some_and(|v| v == "1")
}

/// The first line where `expected` and `actual` differ: its 1-based number and both lines
/// (`None` for a line past the end of that text).
fn first_difference<'a>(
    expected: &'a str,
    actual: &'a str,
) -> Option<(usize, Option<&'a str>, Option<&'a str>)> {
    let (mut e, mut a) = (expected.split('\n'), actual.split('\n'));
    for n in 1.. {
        match (e.next(), a.next()) {
            (None, None) => return None,
            (x, y) if x != y => return Some((n, x, y)),
            _ => {}
        }
    }
    None
}

/// Emits the program twice (the text must not change between runs), then compares it with
/// the golden file, or writes the file when blessing.
fn check(name: &str, emit: fn() -> Result<String>) {
    let text = emit().unwrap();
    assert_eq!(
        text,
        emit().unwrap(),
        "{name}: emission is not deterministic"
    );
    let path = golden_path(name);
    if blessing() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &text).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{name}: cannot read {}: {e}; run with STACKSCAN_BLESS=1 to create it",
            path.display()
        )
    });
    if let Some((line, want, got)) = first_difference(&expected, &text) {
        let show = |l: Option<&str>| l.map_or("<end of file>".to_owned(), |l| format!("`{l}`"));
        panic!(
            "{name}: emitted text differs from {} at line {line}\n  golden:  {}\n  emitted: {}\n\
             rerun with STACKSCAN_BLESS=1 to accept the new text, then review the diff",
            path.display(),
            show(want),
            show(got)
        );
    }
}

fn f32s(dims: &[i64]) -> TensorType {
    TensorType::new(DType::F32, dims)
}

/// `y = silu(x · W1 + b1) · W2` for a batch of 4 rows, 8 → 16 → 4 features.
fn mlp() -> Result<Function> {
    let s = Scope::new("mlp");
    let x = s.param(f32s(&[4, 8]));
    let w1 = s.param(f32s(&[8, 16]));
    let b1 = s.param(f32s(&[16]));
    let w2 = s.param(f32s(&[16, 4]));
    let h = x.matmul(&w1)?.add(&b1.broadcast_to(&[4, 16])?)?;
    let y = nn::silu(&h)?.matmul(&w2)?;
    s.finish(&[y])
}

/// `v · M`: a vector's only dimension contracted with a matrix's first.
fn vector_times_matrix() -> DotDims {
    DotDims {
        lhs_contract: vec![0],
        rhs_contract: vec![0],
        ..DotDims::default()
    }
}

/// An RNN over 3 steps: `h ← tanh(h · W + x_t)`, returning the last state and every state.
/// `W` is captured by the body, so it becomes a constant input of the scan.
fn rnn_scan() -> Result<Function> {
    let s = Scope::new("rnn");
    let h0 = s.param(f32s(&[4]));
    let xs = s.param(f32s(&[3, 4]));
    let w = s.param(f32s(&[4, 4]));
    let (carry, ys) = s.scan(&[h0], &[xs], 3, false, |_, c, x| {
        let hw = c[0].dot_general(&w, vector_times_matrix())?;
        let h = hw.add(&x[0])?.tanh()?;
        Ok((vec![h.clone()], vec![h]))
    })?;
    s.finish(&[carry[0].clone(), ys[0].clone()])
}

/// One step kept as a unit (a scan of one trip that asks XLA to keep it) that stacks an
/// output of another shape than its carries: written as a `case` on an index XLA cannot fold,
/// whose last branch runs the step. Of its carries, `t` passes through (it stays outside the
/// case) and `stack` has one row written (after the case, from the row and the start the
/// case returns).
fn kept_step() -> Result<Function> {
    let s = Scope::new("kept_step");
    let h0 = s.param(f32s(&[4]));
    let t = s.param(f32s(&[4]));
    let stack = s.param(f32s(&[3, 4]));
    let w = s.param(f32s(&[4, 2]));
    let attributes = [
        ("skip-simplify-while-loops_trip-count-one", "true"),
        ("stackscan_loop", "a kept step"),
    ];
    let (carry, ys) =
        s.scan_with_attributes(&[h0, t, stack], &[], 1, false, &attributes, |bs, c, _| {
            let h = c[0].tanh()?;
            let row = bs.scalar(1.0, DType::I32)?;
            let zero = bs.scalar(0.0, DType::I32)?;
            let stack = c[2].dynamic_update_slice(&h.expand_dims(0)?, &[&row, &zero])?;
            let y = h.dot_general(&w, vector_times_matrix())?;
            Ok((vec![h, c[1].clone(), stack], vec![y]))
        })?;
    let mut out = carry;
    out.extend(ys);
    s.finish(&out)
}

fn fsdp_axis() -> Axis {
    Axis {
        name: "fsdp".to_owned(),
        size: 4,
    }
}

/// One FSDP-style exchange on 4 devices: each holds 2 rows of an 8×8 weight, gathers the
/// whole weight, uses it, and reduce-scatters the result by columns.
fn collectives() -> Result<Program> {
    let axis = fsdp_axis();
    let s = Scope::new("fsdp_exchange");
    let shard = s.param(f32s(&[2, 8]));
    let full = shard.all_gather(0, &axis)?;
    let used = full.mul(&full)?;
    let out = used.reduce_scatter(1, &axis)?;
    Program::on_mesh(
        s.finish(&[out])?,
        axis,
        vec![Sharding::Dim(0)],
        vec![Sharding::Dim(1)],
    )
}

#[test]
fn mlp_forward() {
    check("mlp", || Program::new(mlp()?).emit());
}

#[test]
fn mlp_backward() {
    check("mlp_vjp", || Program::new(vjp(&mlp()?)?).emit());
}

#[test]
fn scan_forward() {
    check("rnn_scan", || Program::new(rnn_scan()?).emit());
}

#[test]
fn kept_single_step() {
    check("kept_step", || Program::new(kept_step()?).emit());
}

#[test]
fn scan_backward() {
    check("rnn_scan_vjp", || Program::new(vjp(&rnn_scan()?)?).emit());
}

#[test]
fn collectives_on_a_mesh() {
    check("fsdp_collectives", || collectives()?.emit());
}

#[test]
fn first_difference_names_the_line_and_both_texts() {
    assert_eq!(first_difference("a\nb\n", "a\nb\n"), None);
    assert_eq!(
        first_difference("a\nb\nc\n", "a\nx\nc\n"),
        Some((2, Some("b"), Some("x")))
    );
    assert_eq!(
        first_difference("a\n", "a\nb\n"),
        Some((2, Some(""), Some("b")))
    );
    assert_eq!(first_difference("a\nb", "a"), Some((2, Some("b"), None)));
}
