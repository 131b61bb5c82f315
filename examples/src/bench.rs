//! The `bench` command: step time of the tiny Llama with prefetch off / on / on + deferred
//! on N CPU devices, and compile time at 4, 16 and 48 layers, as JSON (stdout, or `--out
//! FILE`). [`run`] is the one entry point the CLI calls.
//!
//! ```text
//! cargo run --release -p stackscan-examples --bin stackscan -- bench [--devices 4] [--steps 10] [--out bench.json]
//! ```

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::cli::CliError;
use crate::llama::{LlamaConfig, model, synthetic_batch};
use stackscan::Axis;
use stackscan::fsdp::{Adam, train_step, with_adam};
use stackscan::plan::PlanOptions;
use stackscan_runtime::train::{HostInput, Trainer};
use stackscan_runtime::{Client, ClientOptions, Mesh, Plugin, ProgramForm, plugin};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn options_name(o: PlanOptions) -> &'static str {
    match (o.prefetch_fsdp_weights, o.defer_grad_reduce_scatter) {
        (false, _) => "prefetch_off",
        (true, false) => "prefetch_on",
        (true, true) => "prefetch_deferred",
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn measure(devices: usize, steps: usize) -> Res<String> {
    let plugin = Plugin::load(plugin::resolve("cpu")?)?;
    let client = Client::new(&plugin, &ClientOptions::cpu(devices))?;
    let mesh = Mesh::new(&client, "fsdp", devices)?;
    let cfg = LlamaConfig::tiny();
    let mut json = String::from("{\n");
    let _ = writeln!(
        json,
        "  \"model\": \"tiny llama (d {}, {} layers)\",",
        cfg.d_model, cfg.layers
    );
    let _ = writeln!(
        json,
        "  \"devices\": {devices},\n  \"measured_steps\": {steps},\n  \"step_time_s\": {{"
    );
    let all = [
        PlanOptions::baseline(),
        PlanOptions::prefetch(),
        PlanOptions::prefetch_deferred(),
    ];
    for (i, o) in all.iter().enumerate() {
        let mut trainer = Trainer::new(&client, &mesh, &model(&cfg)?, *o, Adam::default(), 1)?;
        let mut times = Vec::new();
        for step in 0..steps + 2 {
            let inputs: Vec<Vec<HostInput>> = (0..devices)
                .map(|d| {
                    let (t, l) =
                        synthetic_batch(&cfg, cfg.batch_per_device, (step * devices + d) as u64);
                    vec![HostInput::I32(t), HostInput::I32(l)]
                })
                .collect();
            let r = trainer.step(&inputs)?;
            if step >= 2 {
                times.push(r.seconds);
            }
        }
        let mem = trainer.memory_stats()?;
        let comma = if i + 1 < all.len() { "," } else { "" };
        let _ = writeln!(
            json,
            "    \"{}\": {{\"median\": {:.6}, \"min\": {:.6}, \"temp_bytes\": {}, \"compile_s\": {:.3}}}{comma}",
            options_name(*o),
            median(times.clone()),
            times.iter().copied().fold(f64::INFINITY, f64::min),
            mem.temp,
            trainer.compile_seconds()
        );
        tracing::info!("{}: median {:.4} s", options_name(*o), median(times));
    }
    let _ = writeln!(json, "  }},\n  \"compile_time_s\": {{");
    let depths = [4usize, 16, 48];
    for (i, layers) in depths.iter().enumerate() {
        let m = model(&LlamaConfig {
            layers: *layers,
            ..cfg
        })?;
        let axis = Axis {
            name: "fsdp".into(),
            size: devices,
        };
        let started = Instant::now();
        let step = train_step(&m, PlanOptions::prefetch_deferred(), &axis)?;
        let text = with_adam(&step, Adam::default())?.emit()?;
        let lowered = started.elapsed().as_secs_f64();
        let started = Instant::now();
        client.compile(&text, &mesh.compile_options(ProgramForm::Partitions))?;
        let compiled = started.elapsed().as_secs_f64();
        let comma = if i + 1 < depths.len() { "," } else { "" };
        let _ = writeln!(
            json,
            "    \"{layers}\": {{\"lower_and_emit\": {lowered:.3}, \"xla_compile\": {compiled:.3}, \"program_bytes\": {}}}{comma}",
            text.len()
        );
        tracing::info!("{layers} layers: lower {lowered:.3} s, compile {compiled:.3} s");
    }
    json.push_str("  }\n}\n");
    Ok(json)
}

/// Most measured steps per configuration: a week of the tiny model's steps, far more than a
/// benchmark needs, and far from the counter's overflow.
pub const MAX_STEPS: usize = 1_000_000;

/// Arguments of `bench`.
#[derive(Clone, Debug, clap::Args)]
pub struct BenchArgs {
    /// CPU devices on the FSDP axis (the tiny Llama splits over 1, 2, 4 or 8).
    #[arg(long, default_value_t = 4, value_parser = crate::cli::args::device_count, allow_negative_numbers = true)]
    pub devices: usize,
    /// Measured steps per schedule, after two warm-up steps.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=MAX_STEPS as u64), allow_negative_numbers = true)]
    pub steps: u64,
    /// Write the JSON to FILE (atomically, once the run succeeded) instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// What `bench` measured, as JSON text.
#[derive(Debug)]
pub struct Report {
    /// The JSON.
    pub json: String,
    /// Where it was written; `None`: the caller prints it.
    pub written: Option<PathBuf>,
}

/// Checks the arguments (the model fits the devices, the destination is writable) before
/// anything is measured, then measures and writes the JSON where `--out` says.
pub fn run(args: &BenchArgs) -> Result<Report, CliError> {
    model(&LlamaConfig::tiny())
        .and_then(|m| m.validate(args.devices))
        .map_err(|e| {
            CliError::Usage(format!(
                "the model does not fit {} devices: {e}",
                args.devices
            ))
        })?;
    let out = args
        .out
        .as_deref()
        .map(Output::create)
        .transpose()
        .map_err(CliError::Usage)?;
    let steps = usize::try_from(args.steps).map_err(|e| CliError::Usage(e.to_string()))?;
    let json = measure(args.devices, steps)?;
    let written = match out {
        Some(out) => {
            let dest = out.dest.clone();
            out.finish(&json).map_err(CliError::failed)?;
            Some(dest)
        }
        None => None,
    };
    Ok(Report { json, written })
}

/// Where the JSON goes: a temporary file beside the destination, created before the run so an
/// unwritable path fails at once, and renamed over the destination when the run succeeded.
struct Output {
    dest: PathBuf,
    temp: PathBuf,
    file: std::fs::File,
}

impl Output {
    fn create(dest: &Path) -> Result<Output, String> {
        let dest = dest.to_path_buf();
        let name = dest
            .file_name()
            .ok_or_else(|| format!("`--out {}` names no file", dest.display()))?;
        let mut temp_name = std::ffi::OsString::from(".");
        temp_name.push(name);
        temp_name.push(format!(".{}.tmp", std::process::id()));
        let temp = dest.with_file_name(temp_name);
        let file = std::fs::File::create(&temp)
            .map_err(|e| format!("cannot write `{}`: {e}", dest.display()))?;
        Ok(Output { dest, temp, file })
    }

    fn finish(mut self, json: &str) -> Result<(), String> {
        use std::io::Write as _;
        let written = self
            .file
            .write_all(json.as_bytes())
            .and_then(|()| self.file.sync_all())
            .and_then(|()| std::fs::rename(&self.temp, &self.dest));
        written.map_err(|e| format!("writing `{}`: {e}", self.dest.display()))
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        // After a successful rename there is nothing left to remove.
        let _ = std::fs::remove_file(&self.temp);
    }
}
