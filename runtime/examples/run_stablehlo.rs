//! Times a StableHLO training step written outside stackscan (JAX's, exported by
//! `examples/jax/llama_step.py --export PATH`) through a plugin of stackscan's, so that a
//! JAX program and a stackscan program can be compared on the same XLA: the program-level
//! side of issue 31's comparison, where `dot_kernels` is the kernel-level one.
//!
//! ```text
//! cargo run --release -p stackscan-runtime --example run_stablehlo -- FILE [PLUGIN] [DEVICES] [STEPS] [WARMUP]
//! ```
//!
//! The program runs on DEVICES devices (default 4) as `mhlo.num_partitions` says, through
//! PLUGIN (default `cpu`). Every parameter starts filled with a small constant (integers with
//! zero, valid token ids); after each step every result but the last (a step's new state,
//! then its loss) becomes the parameter at the same position, as a training loop feeds its
//! state back. Prints one JSON line: the median and fastest step of STEPS (default 10) after
//! WARMUP (default 2), the compiled temp size per device and the last loss.

use std::time::Instant;

use stackscan::DType;
use stackscan_runtime::{Buffer, Client, ClientOptions, Mesh, Plugin, ProgramForm};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(file) = args.first() else {
        return Err("usage: run_stablehlo FILE [PLUGIN] [DEVICES] [STEPS] [WARMUP]".into());
    };
    let plugin_name = args.get(1).map_or("cpu", String::as_str);
    let number = |i: usize, default: usize| -> Result<usize, Box<dyn std::error::Error>> {
        Ok(args
            .get(i)
            .map(|a| a.parse::<usize>())
            .transpose()?
            .unwrap_or(default))
    };
    let (devices, steps, warmup) = (number(2, 4)?, number(3, 10)?, number(4, 2)?);
    let text = std::fs::read_to_string(file)?;
    let plugin = Plugin::load(&stackscan_runtime::plugin::resolve(plugin_name)?)?;
    let client = Client::new(&plugin, &ClientOptions::cpu(devices))?;
    let mesh = Mesh::new(&client, "fsdp", devices)?;
    let started = Instant::now();
    let exe = client.compile(&text, &mesh.compile_options(ProgramForm::Partitions))?;
    let compile_seconds = started.elapsed().as_secs_f64();
    let temp = exe.memory_stats()?.temp;
    let mut lists: Vec<Vec<Buffer>> = Vec::with_capacity(devices);
    for dev in mesh.devices() {
        let mut list = Vec::new();
        for ty in exe.parameter_types() {
            let n = ty.dims.iter().product::<i64>() as usize;
            list.push(match ty.dtype {
                DType::F32 => client.buffer(&vec![0.01f32; n], &ty.dims, dev)?,
                DType::I32 => client.buffer(&vec![0i32; n], &ty.dims, dev)?,
                other => return Err(format!("a parameter of type {other}").into()),
            });
        }
        lists.push(list);
    }
    let Some(carried) = exe.num_outputs().checked_sub(1) else {
        return Err("the program has no results (its last should be the loss)".into());
    };
    let (mut times, mut loss) = (Vec::with_capacity(steps), f32::NAN);
    for step in 0..warmup + steps {
        let started = Instant::now();
        let refs: Vec<Vec<&Buffer>> = lists.iter().map(|l| l.iter().collect()).collect();
        let outputs = exe.execute(&refs)?;
        loss = outputs[0][carried].to_host::<f32>()?[0];
        if step >= warmup {
            times.push(started.elapsed().as_secs_f64());
        }
        for (list, out) in lists.iter_mut().zip(outputs) {
            for (slot, value) in list.iter_mut().zip(out.into_iter().take(carried)) {
                *slot = value;
            }
        }
    }
    times.sort_by(f64::total_cmp);
    let line = serde_json::json!({
        "program": file,
        "plugin": plugin_name,
        "devices": devices,
        "step_seconds_median": times.get(steps / 2),
        "step_seconds_min": times.first(),
        "temp_bytes": temp,
        "compile_seconds": compile_seconds,
        "loss_last": loss,
    });
    println!("{line}");
    Ok(())
}
