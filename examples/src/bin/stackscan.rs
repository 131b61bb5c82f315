//! `stackscan`: the command line of the examples (`train`, `plan`, `params`, `bench`,
//! `timeline`, `collectives`; `stackscan --help` lists them, `stackscan <command> --help`
//! their flags). All of it lives in [`stackscan_examples::cli`].

use std::process::ExitCode;

fn main() -> ExitCode {
    stackscan_examples::cli::main(
        std::env::args_os(),
        &mut std::io::stdout(),
        &mut std::io::stderr(),
    )
}
