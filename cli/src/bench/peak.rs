//! This machine's matrix-multiply peak, measured through the same plugin and devices as the
//! training step: every device runs a chain of square products at once, in the element type
//! the step computes in (f32, or bf16 under mixed precision), so the figure is what the whole
//! machine sustains at that type when all devices compute together — the denominator of MFU
//! on this machine, not a datasheet number.

use std::time::Instant;

use serde::Serialize;
use stackscan::{DType, Program, Scope, Sharding, TensorType};
use stackscan_runtime::{Client, Mesh};

/// Width of the square matrices on a CPU: large enough to run at the kernel's full rate, small
/// enough to measure in well under a second on a laptop.
const N_CPU: i64 = 512;
/// Width on an accelerator, whose products of 512 finish in microseconds and would measure
/// the launch rather than the math units.
const N_ACCELERATOR: i64 = 8192;
/// Products per execution, chained so none can be skipped or run at once.
const CHAIN: usize = 8;
/// Executions timed; the fastest counts (the peak is the best the machine sustains).
const RUNS: usize = 5;

/// The measured peak.
#[derive(Clone, Debug, Serialize)]
pub struct MatmulPeak {
    /// FLOP/s over all devices.
    pub flops_per_second: f64,
    /// Matrix width of the measurement.
    pub n: i64,
    /// Products per device per execution.
    pub chain: usize,
    /// Devices running at once.
    pub devices: usize,
    /// Fastest execution, seconds.
    pub best_seconds: f64,
    /// The products' element type.
    pub dtype: String,
}

/// Measures the matmul peak of `mesh`'s devices running together, for products in `dtype`.
pub fn measure(
    client: &Client,
    mesh: &Mesh,
    dtype: DType,
) -> stackscan_runtime::Result<MatmulPeak> {
    let devices = mesh.size();
    let big = if client.platform() == "cpu" {
        N_CPU
    } else {
        N_ACCELERATOR
    };
    let s = Scope::new("matmul_peak");
    let ty = TensorType::new(DType::F32, [big, big]);
    // The operands arrive in f32 and are cast once: N² conversions beside CHAIN · N³ products.
    let x = s.param(ty.clone()).convert(dtype)?;
    let w = s.param(ty).convert(dtype)?;
    let mut y = x;
    for _ in 0..CHAIN {
        y = y.matmul(&w)?;
    }
    // One scalar back per device: the readback costs nothing next to the products.
    let total = y.convert(DType::F32)?.sum(&[0, 1])?;
    let main = s.finish(&[total])?;
    let program = Program::on_device_mesh(
        main,
        mesh.layout().clone(),
        vec![Sharding::Replicated; 2],
        vec![Sharding::Replicated],
    )?;
    let exe = client.compile_program(&program, mesh)?;
    let n = big as usize;
    // Entries of size 1/√N keep every power of the product near unit scale (no overflow, no
    // denormals to slow the kernel down).
    let scale = 1.0 / (big as f32).sqrt();
    let xs: Vec<f32> = (0..n * n).map(|i| ((i % 7) as f32 - 3.0) * scale).collect();
    let ws: Vec<f32> = (0..n * n)
        .map(|i| (((i * 5) % 11) as f32 - 5.0) * scale / 2.0)
        .collect();
    let mut args = Vec::with_capacity(devices);
    for dev in mesh.devices() {
        args.push(vec![
            client.buffer(&xs, &[big, big], dev)?,
            client.buffer(&ws, &[big, big], dev)?,
        ]);
    }
    let lists: Vec<Vec<_>> = args.iter().map(|a| a.iter().collect()).collect();
    let mut best = f64::INFINITY;
    // One untimed run first: the first execution pays for thread pools and page faults.
    for run in 0..=RUNS {
        let started = Instant::now();
        let out = exe.execute(&lists)?;
        for o in &out {
            o[0].to_host::<f32>()?;
        }
        let t = started.elapsed().as_secs_f64();
        if run > 0 {
            best = best.min(t);
        }
    }
    let flops = 2.0 * (big as f64).powi(3) * CHAIN as f64 * devices as f64;
    Ok(MatmulPeak {
        flops_per_second: flops / best,
        n: big,
        chain: CHAIN,
        devices,
        best_seconds: best,
        dtype: dtype.to_string(),
    })
}
