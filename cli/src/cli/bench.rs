//! `bench`: the training step measured against this machine's own matmul peak
//! ([`crate::bench`]), its JSON report on standard output or in `--out FILE`.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use super::CliError;
use crate::bench::{self, BenchArgs, BenchError};

/// Arguments of `bench`.
#[derive(Clone, Debug, Args)]
pub struct BenchCommand {
    /// What to measure.
    #[command(flatten)]
    pub bench: BenchArgs,
    /// Write the JSON report here (atomically) instead of standard output.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// Runs `bench`. Flags that describe nothing runnable, a step that does not fit the memory
/// here, and a destination that cannot be written, fail before anything is measured (status
/// 2, as the parser's own errors).
pub fn run(a: &BenchCommand, out: &mut dyn Write) -> Result<(), CliError> {
    let usage = |e: BenchError| CliError::Usage(e.to_string());
    let config = bench::config(&a.bench).map_err(usage)?;
    bench::check_memory(&a.bench, &config).map_err(usage)?;
    if let Some(path) = &a.out {
        bench::check_destination(path).map_err(usage)?;
    }
    let report = bench::run(&a.bench)?;
    match &a.out {
        Some(path) => {
            bench::write_json(path, &report)?;
            writeln!(out, "wrote {}", path.display())?;
        }
        None => writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?,
    }
    Ok(())
}
