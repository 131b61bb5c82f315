//! `calibrate`: measures this machine's CPU as a hardware profile and checks the profile's
//! predicted step times against the tiny Llama's measured ones ([`crate::calibrate`]).

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use stackscan_runtime::{Client, Mesh, Plugin, plugin};

use super::CliError;
use super::args::device_count;
use crate::calibrate::{check, configurations, measure, pieces};
use crate::hardware::Hardware;

/// The tiny Llama's depths the check trains.
const DEPTHS: [usize; 2] = [4, 16];

/// Arguments of `calibrate`.
#[derive(Clone, Debug, Args)]
pub struct CalibrateArgs {
    /// Virtual CPU devices, 1 to 4096.
    #[arg(long, default_value_t = 4, value_parser = device_count, value_name = "N", allow_negative_numbers = true)]
    pub devices: usize,
    /// Training steps per configuration of the check (the first is not counted).
    // Twenty, not ten: at ten, one late step of a 16-layer run on a 2-core machine moved its
    // mean by more than the error the check is there to catch.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(2..=100_000))]
    pub steps: u32,
    /// Where to write the measured profile (TOML).
    #[arg(long, default_value = "cpu.toml")]
    pub profile: PathBuf,
    /// Where to write the JSON report (default: standard output).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Only measure the profile; skip the step-time check.
    #[arg(long)]
    pub no_check: bool,
    /// Also time each piece of the step alone (a layer's forward, backward, gather and
    /// reduce-scatter, the outer parts, the optimizer) beside its prediction, at each depth,
    /// prefetch off and on.
    #[arg(long)]
    pub pieces: bool,
    /// Print the predicted-vs-measured tables (Markdown) instead of the JSON, with the
    /// machine's load average beside them; `--out` still receives the JSON.
    #[arg(long)]
    pub table: bool,
}

/// Runs `calibrate`, its JSON on `out` unless `--out` names a file.
pub fn run(a: &CalibrateArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let plugin = Plugin::load(plugin::resolve("cpu")?)?;
    let client = Client::for_devices(&plugin, a.devices)?;
    let mesh = Mesh::new(&client, "fsdp", a.devices)?;
    let rates = measure(&client, &mesh, 15)?;
    let toml = rates.profile_toml(a.devices);
    std::fs::write(&a.profile, &toml)
        .map_err(|e| CliError::failed(format!("cannot write `{}`: {e}", a.profile.display())))?;
    let hardware = Hardware::from_toml(&toml)?;
    let rows = if a.no_check {
        Vec::new()
    } else {
        check(&client, &mesh, &hardware, &DEPTHS, a.steps as usize)?
    };
    let mut parts = Vec::new();
    if a.pieces {
        for c in configurations(&DEPTHS)? {
            for p in pieces(&client, &mesh, &c.model, c.options, &hardware, 9)? {
                parts.push(serde_json::json!({
                    "layers": c.layers,
                    "prefetch": c.prefetch,
                    "piece": p.name,
                    "measured_s": p.measured,
                    "predicted_s": p.predicted,
                    "error_percent": (p.predicted / p.measured - 1.0) * 100.0,
                }));
            }
        }
    }
    let json = serde_json::json!({
        "devices": a.devices,
        "profile": a.profile.display().to_string(),
        "rates": {
            "matmul_gflops": rates.matmul_gflops,
            "matmul_side_gflops": rates.matmul_side_gflops,
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
        "pieces": parts,
    });
    let text = serde_json::to_string_pretty(&json)? + "\n";
    match &a.out {
        Some(path) => {
            std::fs::write(path, text)
                .map_err(|e| CliError::failed(format!("cannot write `{}`: {e}", path.display())))?;
            writeln!(out, "wrote {}", path.display())?;
        }
        None if !a.table => out.write_all(text.as_bytes())?,
        None => {}
    }
    if a.table {
        write_tables(out, &json)?;
    }
    Ok(())
}

/// The check's and the pieces' rows as Markdown tables, milliseconds, after the load average
/// (a shared machine's figures mean little without it).
fn write_tables(out: &mut dyn Write, json: &serde_json::Value) -> Result<(), CliError> {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    writeln!(
        out,
        "load average (1, 5, 15 min): {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(", ")
    )?;
    let ms = |v: &serde_json::Value| v.as_f64().unwrap_or(f64::NAN) * 1e3;
    let on = |v: &serde_json::Value| {
        if v.as_bool() == Some(true) {
            "on"
        } else {
            "off"
        }
    };
    let err = |v: &serde_json::Value| v.as_f64().unwrap_or(f64::NAN);
    if let Some(rows) = json["check"].as_array().filter(|r| !r.is_empty()) {
        writeln!(
            out,
            "\n| layers | prefetch | predicted (ms) | measured (ms) | error |"
        )?;
        writeln!(out, "|---|---|---|---|---|")?;
        for r in rows {
            writeln!(
                out,
                "| {} | {} | {:.1} | {:.1} | {:+.1} % |",
                r["layers"],
                on(&r["prefetch"]),
                ms(&r["predicted_s"]),
                ms(&r["measured_s"]),
                err(&r["error_percent"])
            )?;
        }
    }
    if let Some(rows) = json["pieces"].as_array().filter(|r| !r.is_empty()) {
        writeln!(
            out,
            "\n| layers | prefetch | piece | predicted (ms) | measured alone (ms) | error |"
        )?;
        writeln!(out, "|---|---|---|---|---|---|")?;
        for r in rows {
            writeln!(
                out,
                "| {} | {} | {} | {:.2} | {:.2} | {:+.1} % |",
                r["layers"],
                on(&r["prefetch"]),
                r["piece"].as_str().unwrap_or(""),
                ms(&r["predicted_s"]),
                ms(&r["measured_s"]),
                err(&r["error_percent"])
            )?;
        }
    }
    Ok(())
}
