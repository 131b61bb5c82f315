//! The binaries' log subscriber: `tracing` events of stackscan's crates on stderr, their
//! levels from `-v`/`--quiet` or RUST_LOG, printed around the progress bar rather than
//! through it; and the XLA plugin's own log threshold, which has to be in the environment
//! before the plugin loads.

use std::io::Write;

use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use stackscan_runtime::xla_log::{self, XlaLog};

/// The filter for `-v` × `verbose`, or errors only when `quiet`; RUST_LOG, when set and
/// valid, replaces it.
pub fn filter(verbose: u8, quiet: bool) -> Targets {
    if let Some(spec) = std::env::var("RUST_LOG").ok().filter(|s| !s.is_empty()) {
        // `Targets` reads `level` and `target=level` lists, what RUST_LOG holds in practice.
        if let Ok(t) = spec.parse::<Targets>() {
            return t;
        }
    }
    let ours = match (quiet, verbose) {
        (true, _) => LevelFilter::ERROR,
        (false, 0) => LevelFilter::INFO,
        (false, 1) => LevelFilter::DEBUG,
        (false, _) => LevelFilter::TRACE,
    };
    let others = if quiet {
        LevelFilter::ERROR
    } else {
        LevelFilter::WARN
    };
    Targets::new()
        .with_default(others)
        .with_target("stackscan", ours)
        .with_target("stackscan_runtime", ours)
        .with_target("stackscan_cli", ours)
}

/// The plugin's log level for `-v`/`--quiet`.
pub fn xla_level(verbose: u8, quiet: bool) -> XlaLog {
    match (quiet, verbose) {
        (true, _) => XlaLog::Fatal,
        (false, 0) => XlaLog::Errors,
        (false, _) => XlaLog::Info,
    }
}

/// Sets the XLA plugin's log level and installs the subscriber. Call first thing in `main`:
/// the plugin's level can only be set while the process has one thread.
pub fn init(verbose: u8, quiet: bool) -> stackscan_runtime::Result<()> {
    xla_log::configure(xla_level(verbose, quiet))?;
    // A plugin fetch is a large download: it shows pip's progress, unless asked to be quiet.
    stackscan_runtime::plugin::show_fetch_progress(!quiet);
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(AroundProgress)
        .with_ansi(stackscan_runtime::xla_log::stderr_is_terminal())
        .with_target(false)
        .without_time();
    // A second init (tests calling `main` twice in one process) keeps the first subscriber.
    let _ = tracing_subscriber::registry()
        .with(layer)
        .with(filter(verbose, quiet))
        .try_init();
    Ok(())
}

/// Writes log lines to stderr, hiding the progress bar while it does.
#[derive(Clone, Copy, Debug)]
struct AroundProgress;

impl<'a> MakeWriter<'a> for AroundProgress {
    type Writer = AroundProgress;

    fn make_writer(&'a self) -> Self::Writer {
        AroundProgress
    }
}

impl Write for AroundProgress {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        crate::progress::suspended(|| std::io::stderr().write_all(buf))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbosity_maps_to_levels() {
        assert_eq!(xla_level(0, false), XlaLog::Errors);
        assert_eq!(xla_level(1, false), XlaLog::Info);
        assert_eq!(xla_level(0, true), XlaLog::Fatal);
        // Without RUST_LOG (the test environment does not set it for stackscan's targets).
        if std::env::var_os("RUST_LOG").is_none() {
            let t = filter(1, false);
            assert!(t.would_enable("stackscan_runtime::plugin", &tracing::Level::DEBUG));
            assert!(!t.would_enable("hyper", &tracing::Level::INFO));
            let q = filter(0, true);
            assert!(!q.would_enable("stackscan_runtime", &tracing::Level::WARN));
        }
    }
}
