//! Measures this machine's CPU as a hardware profile and checks it against the tiny Llama's
//! measured step times; writes JSON (stdout, or `--out FILE`) and the profile TOML.
//!
//! ```text
//! cargo run --release -p stackscan-examples --bin calibrate -- [--devices 4] [--steps 10]
//!     [--profile cpu.toml] [--out calibration.json] [--no-check]
//! ```

use std::process::ExitCode;

use clap::Parser;
use stackscan_examples::calibrate::{check, measure};
use stackscan_examples::hardware::Hardware;
use stackscan_runtime::{Client, ClientOptions, Mesh, Plugin, plugin};

#[derive(Parser)]
#[command(about = "Measure the CPU profile and check its step-time predictions")]
struct Args {
    /// Virtual CPU devices.
    #[arg(long, default_value_t = 4)]
    devices: usize,
    /// Training steps per configuration of the check (the first is not counted).
    #[arg(long, default_value_t = 10)]
    steps: usize,
    /// Where to write the profile.
    #[arg(long, default_value = "cpu.toml")]
    profile: std::path::PathBuf,
    /// Where to write the JSON (default: stdout).
    #[arg(long)]
    out: Option<std::path::PathBuf>,
    /// Only measure the profile.
    #[arg(long)]
    no_check: bool,
}

fn run(a: &Args) -> Result<String, Box<dyn std::error::Error>> {
    let plugin = Plugin::load(plugin::resolve("cpu")?)?;
    let client = Client::new(&plugin, &ClientOptions::cpu(a.devices))?;
    let mesh = Mesh::new(&client, "fsdp", a.devices)?;
    let rates = measure(&client, &mesh, 9)?;
    let toml = rates.profile_toml(a.devices);
    std::fs::write(&a.profile, &toml)?;
    Hardware::from_toml(&toml)?;
    let rows = if a.no_check {
        Vec::new()
    } else {
        check(&client, &mesh, &[4, 16], a.steps, 9)?
    };
    let json = serde_json::json!({
        "devices": a.devices,
        "profile": a.profile.display().to_string(),
        "rates": {
            "matmul_gflops": rates.matmul_gflops,
            "copy_gb_per_s": rates.copy_gb_per_s,
            "vector_gflops": rates.vector_gflops,
            "gather_gb_per_s": rates.gather_gb_per_s,
            "collective_latency_us": rates.collective_latency_us,
            "kernel_overhead_us": rates.kernel_overhead_us,
        },
        "check": rows.iter().map(|r| serde_json::json!({
            "layers": r.layers,
            "prefetch": r.prefetch,
            "predicted_s": r.predicted,
            "measured_s": r.measured,
            "error_percent": r.error_percent(),
        })).collect::<Vec<_>>(),
    });
    Ok(serde_json::to_string_pretty(&json)? + "\n")
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(json) => match &args.out {
            Some(path) => match std::fs::write(path, json) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: cannot write `{}`: {e}", path.display());
                    ExitCode::FAILURE
                }
            },
            None => {
                print!("{json}");
                ExitCode::SUCCESS
            }
        },
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
