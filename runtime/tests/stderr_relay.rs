//! The stderr relay of `xla_log::configure`, seen from outside: this test runs itself as a
//! child process (one thread, as `configure` needs), which configures the log level and
//! writes absl's logging note and XLA's slow-compile notice between other lines, then exits or
//! aborts. Only those two may be missing from what the child's stderr shows, and only at the
//! default level.

use std::io::Write;
use std::process::Command;

use stackscan_runtime::xla_log::{self, LEVEL_ENV, XlaLog};

/// Tells the child what to do.
const ROLE_ENV: &str = "STACKSCAN_RELAY_TEST_ROLE";

const NOTICE: &str = "E1205 12:00:00.123456    4242 slow_operation_alarm.cc:73] \n\
    ********************************\n\
    [Compiling module jit_step] Very slow compile? If you want to file a bug, run with envvar \
    XLA_FLAGS=--xla_dump_to=/tmp/foo and attach the results.\n\
    ********************************\n";
const BEFORE: &str = "before the notice\n";
const ABSL: &str =
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n";
const OTHER_ERROR: &str = "E1205 12:00:01.000000    4243 rendezvous.cc:31] a peer is stuck\n";
const LAST: &str = "the last words, without a newline";

fn child(role: &str) {
    let level = if role == "verbose" {
        XlaLog::Info
    } else {
        XlaLog::Errors
    };
    xla_log::configure(level).expect("configure");
    let mut stderr = std::io::stderr();
    for piece in [ABSL, BEFORE, NOTICE, OTHER_ERROR, LAST] {
        stderr.write_all(piece.as_bytes()).expect("write");
    }
    println!("stdout is untouched");
    if role == "abort" {
        std::process::abort();
    }
}

fn run(role: &str, preset_level: Option<&str>) -> (String, String) {
    let mut command = Command::new(std::env::current_exe().expect("test binary"));
    command.env(ROLE_ENV, role).env_remove(LEVEL_ENV);
    if let Some(level) = preset_level {
        command.env(LEVEL_ENV, level);
    }
    let output = command.output().expect("run the child");
    assert_eq!(
        output.status.success(),
        role != "abort",
        "{role}: {output:?}"
    );
    let text = |bytes: Vec<u8>| String::from_utf8(bytes).expect("utf-8");
    (text(output.stdout), text(output.stderr))
}

fn main() {
    if let Ok(role) = std::env::var(ROLE_ENV) {
        child(&role);
        return;
    }
    let without = format!("{BEFORE}{OTHER_ERROR}{LAST}");
    let with = format!("{ABSL}{BEFORE}{NOTICE}{OTHER_ERROR}{LAST}");
    // The default level: the notice alone is dropped, also when the process aborts right
    // after its last write (the relay is a process of its own and drains the pipe).
    for role in ["exit", "abort"] {
        let (stdout, stderr) = run(role, None);
        assert_eq!(stderr, without, "{role}");
        assert_eq!(stdout, "stdout is untouched\n", "{role}");
    }
    // Asking for the plugin's lines shows the notice with them.
    assert_eq!(run("verbose", None).1, with);
    // A level the user set themselves wins, and nothing is filtered.
    assert_eq!(run("exit", Some("2")).1, with);
    println!("stderr_relay: 4 children checked");
}
