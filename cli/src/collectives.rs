//! The `collectives` command: one FSDP exchange on N CPU devices, checked on the host.
//!
//! Each device holds one shard of a weight vector. The program (Shardy manual-computation form,
//! as JAX emits it for `shard_map`) all-gathers the full weights on every device, scales them
//! by a per-device factor (standing in for each device's local gradient), and reduce-scatters
//! the result back into shards. The values are written per device and checked against the same
//! arithmetic done on the host: the smallest end-to-end test of a plugin's collectives.

use std::io::Write;

use crate::cli::args::RuntimeArgs;
use stackscan_runtime::{Client, Mesh, Plugin, ProgramForm, plugin};

const SHARD: usize = 2;

/// The exchange for `n` devices: gather, scale by `device index + 1`, reduce-scatter.
fn program(n: usize) -> String {
    let full = n * SHARD;
    let groups: Vec<String> = (0..n).map(|i| i.to_string()).collect();
    let groups = format!(
        "replica_groups = dense<[[{}]]> : tensor<1x{n}xi64>",
        groups.join(", ")
    );
    format!(
        r#"module @fsdp_exchange attributes {{mhlo.num_partitions = {n} : i32, mhlo.num_replicas = 1 : i32}} {{
  sdy.mesh @mesh = <["fsdp"={n}]>
  func.func public @main(%w: tensor<{full}xf32> {{sdy.sharding = #sdy.sharding<@mesh, [{{"fsdp"}}]>}}) -> (tensor<{gathered}xf32> {{sdy.sharding = #sdy.sharding<@mesh, [{{"fsdp"}}]>}}, tensor<{full}xf32> {{sdy.sharding = #sdy.sharding<@mesh, [{{"fsdp"}}]>}}) {{
    %out:2 = sdy.manual_computation(%w) in_shardings=[<@mesh, [{{"fsdp"}}]>] out_shardings=[<@mesh, [{{"fsdp"}}]>, <@mesh, [{{"fsdp"}}]>] manual_axes={{"fsdp"}} (%shard: tensor<{SHARD}xf32>) {{
      %g = "stablehlo.all_gather"(%shard) <{{all_gather_dim = 0 : i64, channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, {groups}, use_global_device_ids}}> : (tensor<{SHARD}xf32>) -> tensor<{full}xf32>
      %pid = stablehlo.partition_id : tensor<ui32>
      %pidf = stablehlo.convert %pid : (tensor<ui32>) -> tensor<f32>
      %one = stablehlo.constant dense<1.0> : tensor<f32>
      %scale = stablehlo.add %pidf, %one : tensor<f32>
      %sb = stablehlo.broadcast_in_dim %scale, dims = [] : (tensor<f32>) -> tensor<{full}xf32>
      %grad = stablehlo.multiply %g, %sb : tensor<{full}xf32>
      %rs = "stablehlo.reduce_scatter"(%grad) <{{scatter_dimension = 0 : i64, channel_handle = #stablehlo.channel_handle<handle = 2, type = 1>, {groups}, use_global_device_ids}}> ({{
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %s = stablehlo.add %a, %b : tensor<f32>
        stablehlo.return %s : tensor<f32>
      }}) : (tensor<{full}xf32>) -> tensor<{SHARD}xf32>
      sdy.return %g, %rs : tensor<{full}xf32>, tensor<{SHARD}xf32>
    }} : (tensor<{full}xf32>) -> (tensor<{gathered}xf32>, tensor<{full}xf32>)
    return %out#0, %out#1 : tensor<{gathered}xf32>, tensor<{full}xf32>
  }}
}}"#,
        gathered = full * n
    )
}

/// Runs the exchange on `args.devices` devices, writing what each device holds to `out`;
/// `Ok(false)` when a device's result differs from the host's.
pub fn run(args: &RuntimeArgs, out: &mut dyn Write) -> Result<bool, Box<dyn std::error::Error>> {
    let plugin = Plugin::load(plugin::resolve(&args.plugin)?)?;
    let (major, minor) = plugin.api_version();
    writeln!(
        out,
        "plugin {} (PJRT API {major}.{minor})",
        plugin.path().display()
    )?;
    let client = Client::for_devices_with(&plugin, args.devices, args.accelerator())?;
    let mesh = Mesh::new(&client, "fsdp", args.devices)?;
    let n = mesh.size();
    writeln!(
        out,
        "{n} {} devices on mesh axis `{}`",
        client.platform(),
        mesh.axis()
    )?;
    let exe = client.compile(&program(n), &mesh.compile_options(ProgramForm::Partitions))?;
    let weights: Vec<f32> = (0..n * SHARD).map(|i| i as f32).collect();
    let shards = weights
        .chunks(SHARD)
        .zip(mesh.devices())
        .map(|(w, d)| client.buffer(w, &[SHARD as i64], d))
        .collect::<Result<Vec<_>, _>>()?;
    let lists: Vec<[_; 1]> = shards.iter().map(|b| [b]).collect();
    let outputs = exe.execute(&lists)?;

    // Host reference: every device gathers all weights; the reduce-scatter sums the scaled
    // copies, so shard d receives w[d] * (1 + 2 + … + n), computed here in f64. The gather
    // moves values and must be exact; the device sums n f32 terms in an order of its choosing,
    // each addition rounding by at most half an ulp of the running sum, so the sum may differ
    // from the exact one by up to n · ε · |sum|.
    let scale_sum = (n as f64) * (n as f64 + 1.0) / 2.0;
    let tolerance = n as f64 * f64::from(f32::EPSILON);
    let mut all_ok = true;
    for (d, result) in outputs.iter().enumerate() {
        let gathered = result[0].to_host::<f32>()?;
        let scattered = result[1].to_host::<f32>()?;
        let expected: Vec<f64> = weights[d * SHARD..(d + 1) * SHARD]
            .iter()
            .map(|&w| f64::from(w) * scale_sum)
            .collect();
        let close = scattered.len() == expected.len()
            && scattered
                .iter()
                .zip(&expected)
                .all(|(&got, &want)| (f64::from(got) - want).abs() <= tolerance * want.abs());
        let ok = gathered == weights && close;
        all_ok &= ok;
        writeln!(
            out,
            "device {d}: shard {:?} -> all_gather {gathered:?} -> reduce_scatter {scattered:?} {}",
            &weights[d * SHARD..(d + 1) * SHARD],
            if ok { "ok" } else { "MISMATCH" }
        )?;
    }
    let stats = exe.memory_stats()?;
    writeln!(
        out,
        "compiled memory per device: arguments {} B, outputs {} B, temp {} B",
        stats.arguments, stats.outputs, stats.temp
    )?;
    Ok(all_ok)
}
