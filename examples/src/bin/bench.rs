//! Benchmark: MFU, tokens/s, host overhead per step, compiled memory and compile time of the
//! tiny Llama's training step on N CPU devices (see `stackscan_examples::bench`). Writes JSON
//! to stdout, or to `--out FILE`.
//!
//! ```text
//! cargo run --release -p stackscan-examples --bin bench -- [--layers 16] [--batch 16] [--seq 128]
//!     [--devices 4] [--steps 10] [--options off,on,deferred] [--out bench.json]
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use stackscan_examples::bench::{self, BenchArgs};

/// Measures the training step against this machine's own matmul peak.
#[derive(Parser)]
#[command(name = "bench")]
struct Cli {
    #[command(flatten)]
    bench: BenchArgs,
    /// Write the JSON report here instead of stdout.
    #[arg(long)]
    out: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Flags that describe nothing runnable, and a destination that cannot be written, fail
    // before anything is measured, as the parser's own errors do (status 2).
    let checked = bench::config(&cli.bench)
        .map(|_| ())
        .and_then(|()| match &cli.out {
            Some(path) => bench::check_destination(path),
            None => Ok(()),
        });
    if let Err(e) = checked {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    let report = match bench::run(&cli.bench) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let written = match &cli.out {
        Some(path) => bench::write_json(path, &report),
        None => serde_json::to_string_pretty(&report)
            .map(|json| println!("{json}"))
            .map_err(|e| bench::BenchError::Io(std::io::Error::other(e))),
    };
    if let Err(e) = written {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
