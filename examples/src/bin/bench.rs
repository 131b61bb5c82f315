//! Benchmark: step time of the tiny Llama with prefetch off / on / on + deferred on N CPU
//! devices, and compile time at 4, 16 and 48 layers. Writes JSON (stdout, or `--out FILE`).
//!
//! ```text
//! cargo run --release -p stackscan-examples --bin bench -- [--devices 4] [--steps 10] [--out bench.json]
//! ```

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Instant;

use stackscan::Axis;
use stackscan::fsdp::{Adam, train_step, with_adam};
use stackscan::plan::PlanOptions;
use stackscan_examples::llama::{LlamaConfig, model, synthetic_batch};
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

fn run(devices: usize, steps: usize) -> Res<String> {
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
        eprintln!("{}: median {:.4} s", options_name(*o), median(times));
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
        eprintln!("{layers} layers: lower {lowered:.3} s, compile {compiled:.3} s");
    }
    json.push_str("  }\n}\n");
    Ok(json)
}

/// Most measured steps per configuration: a week of the tiny model's steps, far more than a
/// benchmark needs, and far from the counter's overflow.
const MAX_STEPS: usize = 1_000_000;

/// Where the JSON goes: a temporary file beside the destination, created before the run so an
/// unwritable path fails at once, and renamed over the destination when the run succeeded.
struct Output {
    dest: std::path::PathBuf,
    temp: std::path::PathBuf,
    file: std::fs::File,
}

impl Output {
    fn create(dest: &str) -> Result<Output, String> {
        let dest = std::path::PathBuf::from(dest);
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

fn parse() -> Result<(usize, usize, Option<Output>), String> {
    let usage = "usage: bench [--devices N] [--steps N] [--out FILE]";
    let mut devices = 4;
    let mut steps = 10;
    let mut out = None;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let Some(value) = it.next() else {
            return Err(format!("`{flag}` needs a value; {usage}"));
        };
        let count = |what: &str, max: usize| {
            value
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=max).contains(n))
                .ok_or_else(|| {
                    format!("`{what}` expects an integer from 1 to {max}, got `{value}`")
                })
        };
        match flag.as_str() {
            "--devices" => devices = count("--devices", 4096)?,
            "--steps" => steps = count("--steps", MAX_STEPS)?,
            "--out" => out = Some(value),
            other => return Err(format!("unknown argument `{other}`; {usage}")),
        }
    }
    model(&LlamaConfig::tiny())
        .and_then(|m| m.validate(devices))
        .map_err(|e| format!("the model does not fit {devices} devices: {e}"))?;
    let out = out.as_deref().map(Output::create).transpose()?;
    Ok((devices, steps, out))
}

fn main() -> ExitCode {
    let (devices, steps, out) = match parse() {
        Ok(parsed) => parsed,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let json = match run(devices, steps) {
        Ok(json) => json,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    match out {
        Some(out) => {
            if let Err(e) = out.finish(&json) {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
        None => print!("{json}"),
    }
    ExitCode::SUCCESS
}
