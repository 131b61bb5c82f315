//! The XLA plugins' own log lines. Both CPU plugins log through TSL/absl straight to stderr
//! (`I0000 … pjrt_c_api_cpu_internal.cc:59] cpu_device_count set via create_options: 4`,
//! `Using Shardy for XLA SPMD propagation.`, and an absl warning that logging is not
//! initialised). No PJRT create option controls that; the plugins honour TSL's environment
//! variable `TF_CPP_MIN_LOG_LEVEL` (0 = info, 1 = warning, 2 = error, 3 = fatal), read when
//! they first log, so it must be in the environment before the plugin is loaded. Setting the
//! environment is only sound before any other thread starts, so a binary calls [`configure`]
//! first thing in `main`.
//!
//! ```no_run
//! use stackscan_runtime::xla_log::{self, XlaLog};
//!
//! // First thing in `main`: no INFO lines from the plugin unless the user asked for them.
//! xla_log::configure(XlaLog::Errors)?;
//! # Ok::<(), stackscan_runtime::Error>(())
//! ```

use crate::error::Result;
use crate::pjrt::os::set_env_single_threaded;

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

/// Sets the plugin's log threshold, unless the user already set [`LEVEL_ENV`] themselves
/// (theirs wins). Returns the value in force. Fails with
/// [`Error::EnvironmentAfterThreads`](crate::Error::EnvironmentAfterThreads) once other
/// threads have started.
pub fn configure(log: XlaLog) -> Result<String> {
    if let Some(set) = std::env::var_os(LEVEL_ENV).and_then(|v| v.into_string().ok()) {
        return Ok(set);
    }
    set_env_single_threaded(LEVEL_ENV, log.level())?;
    Ok(log.level().to_owned())
}
