//! This machine's CPU as a hardware profile, measured rather than looked up: a matrix
//! product, a streaming elementwise op, a cache-resident elementwise chain and an all-gather,
//! each compiled through the same plugin and run on every virtual device at once (the
//! devices of a training step share the cores, so a per-device rate is only meaningful under
//! that contention). The profile marks collectives as run by the computing threads, so the
//! simulator overlaps nothing (on a CPU, prefetch has nothing to hide behind), and training
//! as f32 (the CPU runs the model as declared).
//!
//! [`check`] then trains the tiny Llama at several depths, prefetch off and on, with the
//! same trainer and the same mean as `train`, and sets each measured step time beside the
//! one [`predict`](crate::predict::predict) gives from a profile measured just before.

use stackscan_models::registry::Architecture;
use std::time::Instant;

use stackscan::fsdp::{Adam, StackModel};
use stackscan::plan::PlanOptions;
use stackscan::{Axis, DType, Program, Scope, Sharding, TensorType};
use stackscan_runtime::train::{HostInput, Trainer};
use stackscan_runtime::{Buffer, Client, Mesh, Result};

use crate::hardware::Hardware;
use crate::predict::predict;
use stackscan_models::llama::{LlamaConfig, synthetic_batch};

mod pieces;
pub use pieces::{Piece, pieces};

/// Rates measured per device, with every device running.
#[derive(Clone, Debug, PartialEq)]
pub struct Rates {
    /// f32 matrix product, GFLOP/s.
    pub matmul_gflops: f64,
    /// f32 matrix products by rows, `(rows, GFLOP/s)`: `[rows, 512]·[512, 512]` for each of
    /// [`SIDES`], the last the 512-square product above.
    pub matmul_side_gflops: Vec<(i64, f64)>,
    /// Streaming elementwise traffic (read plus write), GB/s.
    pub copy_gb_per_s: f64,
    /// Elementwise FLOPs on cache-resident data, GFLOP/s.
    pub vector_gflops: f64,
    /// Bytes each device receives per second in a large all-gather, GB/s.
    pub gather_gb_per_s: f64,
    /// Time of an all-gather of four bytes a device, µs.
    pub collective_latency_us: f64,
    /// Time of one kernel doing next to nothing (an 8×8 product in a dependent chain), µs.
    pub kernel_overhead_us: f64,
}

/// The fastest of `repeats` runs (after one warm-up) of `f` with one argument list per
/// device, each argument shaped as `arg_dims` says. The fastest, not the median: other work
/// on a shared machine only ever adds time, so the fastest run is the closest to the rate
/// the machine itself has, and the one that moves least from one calibration to the next.
fn time(
    client: &Client,
    mesh: &Mesh,
    f: stackscan::Function,
    arg_dims: &[&[i64]],
    repeats: usize,
) -> Result<f64> {
    debug_assert_eq!(f.params.len(), arg_dims.len(), "one shape per parameter");
    let axis = Axis {
        name: "fsdp".into(),
        size: mesh.size(),
    };
    let params = vec![Sharding::Dim(0); f.params.len()];
    let results = vec![Sharding::Dim(0); f.results.len()];
    let times = run_times(
        client,
        mesh,
        &Program::on_mesh(f, axis, params, results)?,
        repeats,
    )?;
    Ok(times[0])
}

/// Median of `repeats` runs (after one warm-up) of `program` on every device of `mesh`, its
/// arguments filled with small positive floats and zero integers (valid token ids, a
/// nonzero optimizer step).
pub fn time_program(
    client: &Client,
    mesh: &Mesh,
    program: &Program,
    repeats: usize,
) -> Result<f64> {
    let times = run_times(client, mesh, program, repeats)?;
    Ok(times[times.len() / 2])
}

/// The times of `repeats` runs (at least one) of `program` after one warm-up, sorted.
fn run_times(client: &Client, mesh: &Mesh, program: &Program, repeats: usize) -> Result<Vec<f64>> {
    let exe = client.compile_program(program, mesh)?;
    let types = program.main().param_types();
    let args: Vec<Vec<Buffer>> = client
        .devices()
        .iter()
        .take(mesh.size())
        .map(|dev| {
            types
                .iter()
                .map(|t| {
                    let n = t.num_elements();
                    if t.dtype.is_float() {
                        let v: Vec<f32> = (0..n).map(|i| ((i % 7) + 1) as f32 * 0.0625).collect();
                        client.buffer(&v, &t.dims, dev)
                    } else {
                        client.buffer(&vec![0i32; n], &t.dims, dev)
                    }
                })
                .collect()
        })
        .collect::<Result<_>>()?;
    let mut args = args;
    let mut times = Vec::with_capacity(repeats);
    // One warm-up, then the timed runs. A donated argument's buffer is gone after a run; its
    // result takes its place, as in training.
    for run in 0..=repeats.max(1) {
        let refs: Vec<Vec<&Buffer>> = args.iter().map(|l| l.iter().collect()).collect();
        let t = Instant::now();
        let mut out = exe.execute(&refs)?;
        if run > 0 {
            times.push(t.elapsed().as_secs_f64());
        }
        for (device_args, device_out) in args.iter_mut().zip(&mut out) {
            for a in program.aliases() {
                std::mem::swap(&mut device_args[a.param], &mut device_out[a.result]);
            }
        }
    }
    times.sort_by(f64::total_cmp);
    Ok(times)
}

fn f32(dims: &[i64]) -> TensorType {
    TensorType::new(DType::F32, dims)
}

/// The row counts of the products whose rates the profile's `matrix_side_tflops` lists: from
/// a layer's tokens at the smallest batches to the width where the rate stops rising.
pub const SIDES: [i64; 5] = [32, 64, 128, 256, 512];

/// Measures the rates on `mesh` (every device of it running), each from the fastest of
/// `repeats` runs.
pub fn measure(client: &Client, mesh: &Mesh, repeats: usize) -> Result<Rates> {
    let n = mesh.size() as f64;
    // A 512³ product: 2·512³ FLOPs a device.
    let m = 512i64;
    let s = Scope::new("matmul");
    let (x, w) = (s.param(f32(&[m, m])), s.param(f32(&[m, m])));
    let y = x.matmul(&w)?;
    let t = time(client, mesh, s.finish(&[y])?, &[&[m, m], &[m, m]], repeats)?;
    let matmul_gflops = 2.0 * (m * m * m) as f64 / t / 1e9;
    // Products of fewer rows against the same 512-square right operand: a layer's tokens
    // times its weights.
    let mut matmul_side_gflops = Vec::new();
    for side in SIDES {
        if side == m {
            matmul_side_gflops.push((side, matmul_gflops));
            continue;
        }
        let s = Scope::new("matmul_rows");
        let (x, w) = (s.param(f32(&[side, m])), s.param(f32(&[m, m])));
        let y = x.matmul(&w)?;
        let t = time(
            client,
            mesh,
            s.finish(&[y])?,
            &[&[side, m], &[m, m]],
            repeats,
        )?;
        matmul_side_gflops.push((side, 2.0 * (side * m * m) as f64 / t / 1e9));
    }
    // y = 2x + 1 over 4 Mi f32 elements, far more than any cache holds: one fused pass that
    // reads each element from memory and writes it back.
    let big = 4i64 << 20;
    let s = Scope::new("copy");
    let y = s.param(f32(&[big])).scale(2.0)?.add_scalar(1.0)?;
    let t = time(client, mesh, s.finish(&[y])?, &[&[big]], repeats)?;
    let copy_gb_per_s = 8.0 * big as f64 / t / 1e9;
    // 64 fused multiply-adds over 16 Ki f32 elements, few enough to stay in cache: 128 FLOPs
    // each.
    let small = 16i64 << 10;
    let s = Scope::new("vector");
    let mut y = s.param(f32(&[small]));
    for _ in 0..64 {
        y = y.scale(0.999)?.add_scalar(0.001)?;
    }
    let t = time(client, mesh, s.finish(&[y])?, &[&[small]], repeats)?;
    let vector_gflops = 128.0 * small as f64 / t / 1e9;
    // All-gathers of 1 Mi f32 elements and of one element a device.
    let axis = Axis {
        name: "fsdp".into(),
        size: mesh.size(),
    };
    let gather = |len: i64| -> Result<f64> {
        let s = Scope::new("gather");
        let y = s.param(f32(&[len])).all_gather(0, &axis)?;
        // The gathered value is per device [n·len]; return one slab so results stay sharded.
        let y = y.slice_axis(0, 0, len)?;
        time(client, mesh, s.finish(&[y])?, &[&[len]], repeats)
    };
    // 64 dependent 8×8 products: each its own kernel, each nearly free of work.
    let s = Scope::new("kernels");
    let (mut y, w) = (s.param(f32(&[8, 8])), s.param(f32(&[8, 8])));
    for _ in 0..64 {
        y = y.matmul(&w)?;
    }
    let t = time(client, mesh, s.finish(&[y])?, &[&[8, 8], &[8, 8]], repeats)?;
    let kernel_overhead_us = t / 64.0 * 1e6;
    let latency = gather(1)?;
    let shard = 1i64 << 20;
    let t = gather(shard)?;
    let gather_gb_per_s = (n - 1.0).max(1.0) * 4.0 * shard as f64 / (t - latency).max(1e-9) / 1e9;
    Ok(Rates {
        matmul_gflops,
        matmul_side_gflops,
        copy_gb_per_s,
        vector_gflops,
        gather_gb_per_s,
        collective_latency_us: latency * 1e6,
        kernel_overhead_us,
    })
}

impl Rates {
    /// The profile as TOML, each figure's provenance beside it.
    pub fn profile_toml(&self, devices: usize) -> String {
        format!(
            "# This machine's CPU, one of {devices} virtual devices sharing its cores, measured by \
             `calibrate` (every figure from the fastest of several runs with all {devices} devices busy).\n\
             name = \"CPU ({devices} virtual devices)\"\n\
             # A 512x512x512 f32 product.\n\
             matrix_tflops_bf16 = {:.6}\n\
             matrix_tflops_f32 = {:.6}\n\
             # 64 fused multiply-adds over 64 KiB.\n\
             vector_tflops = {:.6}\n\
             # y = 2x + 1 over 16 MiB (read plus write).\n\
             memory_gb_per_s = {:.3}\n\
             # An all-gather of 4 MiB a device, latency subtracted; both lanes are the compute\n\
             # threads (`collectives_on_compute`).\n\
             fsdp_lane_gb_per_s = {:.3}\n\
             second_lane_gb_per_s = {:.3}\n\
             # An all-gather of 4 bytes a device.\n\
             collective_latency_us = {:.1}\n\
             # The product above is the rate reached; no further derating.\n\
             # f32 products [rows, 512]x[512, 512], [rows, TFLOP/s].\n\
             matrix_side_tflops = [{}]\n\
             matrix_efficiency = 1.0\n\
             # 64 dependent 8x8 products, per product.\n\
             kernel_overhead_us = {:.2}\n\
             collectives_on_compute = true\n\
             # XLA's CPU compiler copies a loop's carried buffers into each trip (one\n\
             # `copy` per prefetched weight and per deferred gradient in its optimized HLO).\n\
             copies_loop_carries = true\n\
             # XLA's CPU compiler fuses a producer only into its one reader and no producer\n\
             # into a reduction (its optimized HLO of the Adam update).\n\
             single_consumer_fusion = true\n\
             trains_in_f32 = true\n",
            self.matmul_gflops / 1e3,
            self.matmul_gflops / 1e3,
            self.vector_gflops / 1e3,
            self.copy_gb_per_s,
            self.gather_gb_per_s,
            self.gather_gb_per_s,
            self.collective_latency_us,
            self.matmul_side_gflops
                .iter()
                .map(|(side, g)| format!("[{side}.0, {:.6}]", g / 1e3))
                .collect::<Vec<_>>()
                .join(", "),
            self.kernel_overhead_us,
        )
    }
}

/// One row of the calibration check.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CheckRow {
    /// Layers of the tiny Llama.
    pub layers: usize,
    /// Prefetch (with deferred reduce-scatter) on.
    pub prefetch: bool,
    /// Predicted step, seconds.
    pub predicted: f64,
    /// Measured mean step after the first, seconds, as `train` reports it.
    pub measured: f64,
}

impl CheckRow {
    /// `predicted / measured − 1`, percent.
    pub fn error_percent(&self) -> f64 {
        (self.predicted / self.measured - 1.0) * 100.0
    }
}

/// One configuration of the check: the tiny Llama at `layers` layers, prefetch (with
/// deferred reduce-scatter) off or on.
#[expect(missing_debug_implementations, reason = "the model holds closures")]
pub struct Configuration {
    /// Layers of the tiny Llama.
    pub layers: usize,
    /// Prefetch on.
    pub prefetch: bool,
    /// The model's sizes.
    pub config: LlamaConfig,
    /// The model built from them.
    pub model: StackModel,
    /// The plan's options: [`PlanOptions::baseline`] or [`PlanOptions::prefetch_deferred`].
    pub options: PlanOptions,
}

/// The configurations the check trains and `--pieces` times: each of `depths`, prefetch off
/// then on.
pub fn configurations(depths: &[usize]) -> Result<Vec<Configuration>> {
    let mut out = Vec::new();
    for &layers in depths {
        let config = LlamaConfig {
            layers,
            ..LlamaConfig::tiny()
        };
        for (prefetch, options) in [
            (false, PlanOptions::baseline()),
            (true, PlanOptions::prefetch_deferred()),
        ] {
            out.push(Configuration {
                layers,
                prefetch,
                config,
                model: Architecture::build(&config)?.0,
                options,
            });
        }
    }
    Ok(out)
}

/// Trains the tiny Llama at each of `depths` layers on `mesh`, prefetch off and on, `steps`
/// steps each, and sets the measured mean step (after the first, as `train` computes it)
/// beside the prediction from `hardware`. One profile predicts every row, as a profile
/// predicts any model it is given: the rows then differ only by what the model says about
/// depth and prefetch, not by the load each re-measurement happened to see.
pub fn check(
    client: &Client,
    mesh: &Mesh,
    hardware: &Hardware,
    depths: &[usize],
    steps: usize,
) -> Result<Vec<CheckRow>> {
    let devices = mesh.size();
    let mut rows = Vec::new();
    for c in configurations(depths)? {
        let Configuration {
            layers,
            prefetch,
            config: cfg,
            model: m,
            options,
        } = c;
        let predicted = predict(&m, options, hardware, devices, &[])?.step_seconds();
        let mut trainer = Trainer::new(client, mesh, &m, options, Adam::default(), 17)?;
        let mut times = Vec::new();
        for step in 0..steps.max(2) {
            let inputs: Vec<Vec<HostInput>> = (0..devices)
                .map(|d| {
                    let (t, l) =
                        synthetic_batch(&cfg, cfg.batch_per_device, (step * devices + d) as u64);
                    vec![HostInput::I32(t), HostInput::I32(l)]
                })
                .collect();
            times.push(trainer.step(&inputs)?.seconds);
        }
        let steady = &times[1..];
        rows.push(CheckRow {
            layers,
            prefetch,
            predicted,
            measured: steady.iter().sum::<f64>() / steady.len() as f64,
        });
    }
    Ok(rows)
}
