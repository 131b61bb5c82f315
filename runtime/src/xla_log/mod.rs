//! The XLA plugins' own log lines. Both CPU plugins log through TSL/absl straight to stderr
//! (`I0000 … pjrt_c_api_cpu_internal.cc:59] cpu_device_count set via create_options: 4`,
//! `Using Shardy for XLA SPMD propagation.`, and an absl warning that logging is not
//! initialised). No PJRT create option controls that; the plugins honour TSL's environment
//! variable `TF_CPP_MIN_LOG_LEVEL` (0 = info, 1 = warning, 2 = error, 3 = fatal), read when
//! they first log, so it must be in the environment before the plugin is loaded. Setting the
//! environment is only sound before any other thread starts, so a binary calls [`configure`]
//! first thing in `main`.
//!
//! At the default level, [`XlaLog::Errors`], [`configure`] also routes stderr through a small
//! relay process that drops one ERROR block: XLA's "Very slow compile?" notice, which every
//! plugin prints when a compilation passes two minutes and which no option turns off (see
//! [`alarm`]); and absl's one-line note that logging was not initialised. Every other line reaches stderr unchanged and in order, the last lines before
//! a crash included. `-v` ([`XlaLog::Info`]) shows the notice with the plugin's other lines.
//!
//! ```no_run
//! use stackscan_runtime::xla_log::{self, XlaLog};
//!
//! // First thing in `main`: no INFO lines from the plugin unless the user asked for them.
//! xla_log::configure(XlaLog::Errors)?;
//! # Ok::<(), stackscan_runtime::Error>(())
//! ```

use std::fs::File;
use std::io::{IsTerminal, Read, Write};
use std::sync::OnceLock;

use crate::error::Result;
use crate::pjrt::os::{relay_stderr_single_threaded, set_env_single_threaded};

pub mod alarm;

use alarm::AlarmFilter;

/// TSL's log threshold variable, which XLA's plugins read.
pub const LEVEL_ENV: &str = "TF_CPP_MIN_LOG_LEVEL";

/// Which of the plugin's log lines reach stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XlaLog {
    /// Everything from informational lines up (`-v`).
    Info,
    /// Warnings and errors.
    Warnings,
    /// Errors only: the default of stackscan's binaries (the newer CPU plugin warns about
    /// every Shardy program, "stale model export", which is not the user's to act on).
    Errors,
    /// Nothing but fatal lines (`--quiet`).
    Fatal,
}

impl XlaLog {
    /// The value of [`LEVEL_ENV`] for this level.
    pub const fn level(self) -> &'static str {
        match self {
            XlaLog::Info => "0",
            XlaLog::Warnings => "1",
            XlaLog::Errors => "2",
            XlaLog::Fatal => "3",
        }
    }
}

/// Whether stderr was a terminal when [`configure`] ran, before any relay replaced it.
static STDERR_TERMINAL: OnceLock<bool> = OnceLock::new();

/// Sets the plugin's log threshold, unless the user already set [`LEVEL_ENV`] themselves
/// (theirs wins, and nothing is filtered). At [`XlaLog::Errors`] it also starts the relay that
/// drops XLA's slow-compile notice. Returns the value in force. Fails with
/// [`Error::EnvironmentAfterThreads`](crate::Error::EnvironmentAfterThreads) once other
/// threads have started.
pub fn configure(log: XlaLog) -> Result<String> {
    STDERR_TERMINAL.get_or_init(|| std::io::stderr().is_terminal());
    if let Some(set) = std::env::var_os(LEVEL_ENV).and_then(|v| v.into_string().ok()) {
        return Ok(set);
    }
    set_env_single_threaded(LEVEL_ENV, log.level())?;
    if log == XlaLog::Errors {
        // The relay only hides two notices: a process whose stderr cannot be relayed (closed
        // at start, or no process to spare) runs without it rather than not at all.
        if let Err(e) = relay_stderr_single_threaded(relay) {
            tracing::debug!("stderr is not relayed: {e}");
        }
    }
    Ok(log.level().to_owned())
}

/// Whether this process's stderr is a terminal, as it was before [`configure`] routed it
/// through the relay (a pipe): what a progress bar or coloured log should ask.
pub fn stderr_is_terminal() -> bool {
    *STDERR_TERMINAL.get_or_init(|| std::io::stderr().is_terminal())
}

/// The relay process's work: copies `input` to `output` without XLA's slow-compile notice,
/// until the pipe ends or the output is gone.
fn relay(mut input: File, mut output: File) {
    let mut filter = AlarmFilter::default();
    let mut buffer = vec![0u8; 1 << 16];
    let mut shown = Vec::new();
    loop {
        let read = match input.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => read,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        filter.feed(&buffer[..read], &mut shown);
        if output.write_all(&shown).is_err() {
            return;
        }
        shown.clear();
    }
    filter.finish(&mut shown);
    let _ = output.write_all(&shown);
}
