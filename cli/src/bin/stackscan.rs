//! `stackscan`: the command line of the examples (`train`, `plan`, `params`, `bench`,
//! `timeline`, `collectives`; `stackscan --help` lists them, `stackscan <command> --help`
//! their flags). All of it lives in [`stackscan_cli::cli`].

use std::process::ExitCode;

fn main() -> ExitCode {
    stackscan_cli::cli::main(
        std::env::args_os(),
        &mut std::io::stdout(),
        &mut std::io::stderr(),
    )
}
