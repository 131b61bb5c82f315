//! Running the package's binaries as a user does, for the tests that check what they print:
//! `train` (the main job's alias) or `stackscan <command>`, XLA's informational log silenced,
//! compiled programs cached per test process, and the CPU plugin compiling with the tests'
//! options (`testing::binary_xla_flags`).

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Output};

/// Runs a binary of this package with XLA's informational log silenced, so stderr holds only
/// what the binary itself says. The CPU plugin is fetched first, here, so that the lines a
/// first fetch prints on a fresh machine are not taken for the binary's own. Compiled
/// programs go to a cache of this test process's own, not the user's.
pub fn run(bin: &str, args: &[&str]) -> Output {
    let cache = std::env::temp_dir().join(format!("stackscan-bin-cache-{}", std::process::id()));
    run_with_cache(bin, args, &cache)
}

pub fn run_with_cache(bin: &str, args: &[&str], cache: &std::path::Path) -> Output {
    command(bin, args)
        .env("TF_CPP_MIN_LOG_LEVEL", "1")
        .env(stackscan_runtime::compile_cache::COMPILE_CACHE_ENV, cache)
        .output()
        .expect("start the binary")
}

/// `train` (the alias) or `stackscan <bin>`, with `args`.
pub fn command(bin: &str, args: &[&str]) -> Command {
    static FETCHED: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    FETCHED.get_or_init(|| {
        stackscan_runtime::plugin::resolve("cpu").expect("fetch the cpu plugin");
    });
    let mut c = if bin == "train" {
        Command::new(env!("CARGO_BIN_EXE_train"))
    } else {
        let mut c = Command::new(env!("CARGO_BIN_EXE_stackscan"));
        c.arg(bin);
        c
    };
    c.args(args).env_remove("RUST_LOG");
    if let Some(flags) = stackscan_runtime::testing::binary_xla_flags() {
        c.env("XLA_FLAGS", flags);
    }
    c
}

/// Runs `bin` and requires exit status `code` and no signal; returns its stderr and the run
/// described for an assertion's message.
pub fn exits(bin: &str, args: &[&str], code: i32) -> (String, String) {
    let out = run(bin, args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let shown = format!(
        "`{bin} {}`: {:?}; stderr:\n{stderr}",
        args.join(" "),
        out.status
    );
    assert_eq!(out.status.signal(), None, "killed by a signal: {shown}");
    assert_eq!(out.status.code(), Some(code), "{shown}");
    (stderr, shown)
}

/// Requires a failure: exit status `code`, no signal, exactly one line on stderr holding
/// every string of `says`.
pub fn fails(bin: &str, args: &[&str], code: i32, says: &[&str]) {
    let (stderr, shown) = exits(bin, args, code);
    assert_eq!(
        stderr.trim_end().lines().count(),
        1,
        "not one line: {shown}"
    );
    assert!(stderr.starts_with("error: "), "{shown}");
    for s in says {
        assert!(stderr.contains(s), "no `{s}` in {shown}");
    }
}

/// Requires success; returns stdout.
#[allow(
    dead_code,
    reason = "not every test binary that includes this module runs a success"
)]
pub fn succeeds(bin: &str, args: &[&str]) -> String {
    let out = run(bin, args);
    assert!(
        out.status.success(),
        "`{bin} {}`: {:?}\n{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
