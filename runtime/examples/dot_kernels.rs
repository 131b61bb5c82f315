//! How fast a plugin's kernels run the products of a small Llama step, each timed alone on
//! one device: the piece-by-piece side of issue 31's comparison with JAX, whose counterpart
//! is `examples/jax/dot_kernels.py` (the same products, the same shapes, one JSON line each).
//!
//! ```text
//! cargo run --release -p stackscan-runtime --example dot_kernels -- [PLUGIN] [TOKENS] [SEQ]
//! ```
//!
//! PLUGIN is a plugin name or path (default `cpu`); TOKENS the tokens per device in the
//! projections (default 128, what 8 sequences of 64 give each of 4 devices); SEQ the
//! sequence length of the per-head products (default 64), whose batch is TOKENS / SEQ
//! sequences times 8 heads. Model width 256, MLP width 896, head width 32: the tiny preset.

use std::time::Instant;

use stackscan::{Axis, DType, DotDims, Program, Scope, Sharding, TensorType};
use stackscan_runtime::{Client, ClientOptions, Mesh, Plugin};

/// Products per execution, chained through their sums so that none is skipped or merged.
const CHAIN: usize = 10;
/// Executions timed after [`WARMUP`]; the median counts.
const RUNS: usize = 15;
const WARMUP: usize = 5;

/// One product: a name, the operand shapes and the dimension numbers.
struct Case {
    name: &'static str,
    lhs: Vec<i64>,
    rhs: Vec<i64>,
    dims: DotDims,
}

fn cases(tokens: i64, seq: i64) -> Vec<Case> {
    let (d, f, hd) = (256, 896, 32);
    let bh = (tokens / seq).max(1) * 8;
    let plain = |l: usize, r: usize| DotDims {
        lhs_contract: vec![l],
        rhs_contract: vec![r],
        ..DotDims::default()
    };
    let batched = |l: usize, r: usize| DotDims {
        lhs_batch: vec![0],
        rhs_batch: vec![0],
        lhs_contract: vec![l],
        rhs_contract: vec![r],
    };
    let products = [
        ("x·W (forward)", [tokens, d], [d, f], plain(1, 0)),
        ("g·Wᵀ (input gradient)", [tokens, f], [d, f], plain(1, 1)),
        (
            "xᵀ·g (weight gradient)",
            [tokens, d],
            [tokens, f],
            plain(0, 0),
        ),
    ];
    let per_head = [
        ("q·kᵀ per head", [bh, seq, hd], [bh, seq, hd], batched(2, 2)),
        ("p·v per head", [bh, seq, seq], [bh, seq, hd], batched(2, 1)),
    ];
    let case = |(name, lhs, rhs, dims): (&'static str, &[i64], &[i64], DotDims)| Case {
        name,
        lhs: lhs.to_vec(),
        rhs: rhs.to_vec(),
        dims,
    };
    let projections = products
        .iter()
        .map(|(n, l, r, d)| case((n, l, r, d.clone())));
    let heads = per_head
        .iter()
        .map(|(n, l, r, d)| case((n, l, r, d.clone())));
    projections.chain(heads).collect()
}

/// `CHAIN` products of `lhs_i` with `rhs`, `lhs_{i+1} = lhs_i + 0 · Σ(lhs_i · rhs)`.
fn program(c: &Case) -> stackscan_runtime::Result<Program> {
    let s = Scope::new("dot_kernels");
    let x = s.param(TensorType::new(DType::F32, c.lhs.as_slice()));
    let w = s.param(TensorType::new(DType::F32, c.rhs.as_slice()));
    let zero = s.full(0.0, TensorType::new(DType::F32, []))?;
    let (mut xi, mut sums) = (x, Vec::new());
    for _ in 0..CHAIN {
        let total = xi.dot_general(&w, c.dims.clone())?.sum_all()?;
        xi = xi.add(&total.mul(&zero)?.broadcast_to(&c.lhs)?)?;
        sums.push(total);
    }
    let f = s.finish(&sums)?;
    let axis = Axis {
        name: "fsdp".into(),
        size: 1,
    };
    Ok(Program::on_mesh(
        f,
        axis,
        vec![Sharding::Replicated; 2],
        vec![Sharding::Replicated; CHAIN],
    )?)
}

/// `2 · |lhs| · |rhs's free dimensions|`: every left element meets every free right column.
fn flops(c: &Case) -> f64 {
    let lhs: f64 = c.lhs.iter().map(|&n| n as f64).product();
    let free: f64 = (0..c.rhs.len())
        .filter(|i| !c.dims.rhs_batch.contains(i) && !c.dims.rhs_contract.contains(i))
        .map(|i| c.rhs[i] as f64)
        .product();
    2.0 * lhs * free
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let plugin_name = args.first().map_or("cpu", String::as_str);
    let number = |i: usize, default: i64| -> Result<i64, Box<dyn std::error::Error>> {
        Ok(args
            .get(i)
            .map(|a| a.parse::<i64>())
            .transpose()?
            .unwrap_or(default))
    };
    let (tokens, seq) = (number(1, 128)?, number(2, 64)?);
    let plugin = Plugin::load(&stackscan_runtime::plugin::resolve(plugin_name)?)?;
    let client = Client::new(&plugin, &ClientOptions::cpu(1))?;
    let mesh = Mesh::new(&client, "fsdp", 1)?;
    let dev = &client.devices()[0];
    for c in cases(tokens, seq) {
        let exe = client.compile_program(&program(&c)?, &mesh)?;
        let fill = |dims: &[i64], v: f32| vec![v; dims.iter().product::<i64>() as usize];
        let x = client.buffer(&fill(&c.lhs, 0.01), &c.lhs, dev)?;
        let w = client.buffer(&fill(&c.rhs, 0.02), &c.rhs, dev)?;
        let mut times = Vec::with_capacity(RUNS);
        for run in 0..WARMUP + RUNS {
            let started = Instant::now();
            let out = exe.execute(&[vec![&x, &w]])?;
            out[0][CHAIN - 1].to_host::<f32>()?;
            if run >= WARMUP {
                times.push(started.elapsed().as_secs_f64());
            }
        }
        times.sort_by(f64::total_cmp);
        let seconds = times[RUNS / 2] / CHAIN as f64;
        let line = serde_json::json!({
            "framework": format!("stackscan ({plugin_name})"),
            "product": c.name,
            "lhs": c.lhs,
            "rhs": c.rhs,
            "lhs_contract": c.dims.lhs_contract,
            "rhs_contract": c.dims.rhs_contract,
            "microseconds": seconds * 1e6,
            "gflop_per_second": flops(&c) / seconds / 1e9,
        });
        println!("{line}");
    }
    Ok(())
}
