//! `train`: the main job, an alias of `stackscan train` that README's set-up command runs
//! (`cargo run --release -p stackscan-cli --bin train -- [flags of stackscan train]`).

use std::ffi::OsString;
use std::process::ExitCode;

fn main() -> ExitCode {
    // Parsed as `stackscan train …`, so help and errors name the command as the CLI does.
    let args = std::env::args_os().skip(1);
    let argv = ["stackscan", "train"]
        .into_iter()
        .map(OsString::from)
        .chain(args);
    stackscan_cli::cli::main(argv, &mut std::io::stdout(), &mut std::io::stderr())
}
