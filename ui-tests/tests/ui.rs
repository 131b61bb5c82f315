//! Compile-fail and compile-pass cases of `#[derive(SubLayer)]` and `#[layer_stack]`.
//!
//! The expected `.stderr` files depend on the compiler's wording, so the cases run only on the
//! toolchain they were generated with (`rustc 1.95.x`) and the test says loudly when it skips.
//! Regenerate them with `TRYBUILD=overwrite cargo test -p stackscan-ui-tests` and review the
//! diff.

use std::process::Command;

/// The minor version the `.stderr` files were generated with.
const PINNED: &str = "rustc 1.95.";

fn rustc_version() -> Option<String> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let out = Command::new(rustc).arg("--version").output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

#[test]
fn ui() {
    match rustc_version() {
        Some(v) if v.starts_with(PINNED) => {}
        other => {
            eprintln!(
                "SKIPPED: the ui cases' .stderr files are for `{PINNED}x`; this toolchain is {}",
                other
                    .as_deref()
                    .unwrap_or("unknown (`rustc --version` failed)")
            );
            return;
        }
    }
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/fail/**/*.rs");
    t.pass("tests/ui/pass/*.rs");
}
