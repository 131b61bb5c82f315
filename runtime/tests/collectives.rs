//! Four devices, both program forms: `all_gather` and `reduce_scatter` inside a
//! `stablehlo.while` of 3 trips give the exact values a plain-Rust simulation predicts.
//!
//! The loop body (per device `d`, carry `x_d: [2]`, `acc_d: [8]`):
//! `g = all_gather(x)`, `acc += g`, `s_d = x_d[0] + 1`, `r = reduce_scatter(g · s_d)`,
//! `x_d = r / 8`. Every device scales its contribution differently, so a reduce-scatter that
//! sliced instead of summing (off by the device count and the scales) gives other numbers. All
//! values stay small integers or exact binary fractions, so f32 results are exact whatever the
//! summation order.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan_runtime::testing as common;

use stackscan_runtime::{Client, ClientOptions, Mesh, Plugin, ProgramForm};

const DEVICES: usize = 4;
const TRIPS: usize = 3;

/// The loop, written once; `{groups}` and `{attrs_*}` differ between the two forms.
fn loop_body(x: &str, ag_attrs: &str, rs_attrs: &str) -> String {
    format!(
        r#"
    %c0 = stablehlo.constant dense<0> : tensor<i32>
    %acc0 = stablehlo.constant dense<0.0> : tensor<8xf32>
    %res:3 = stablehlo.while(%i = %c0, %xx = {x}, %acc = %acc0) : tensor<i32>, tensor<2xf32>, tensor<8xf32>
     cond {{
      %n = stablehlo.constant dense<{TRIPS}> : tensor<i32>
      %p = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    }} do {{
      %g = "stablehlo.all_gather"(%xx) <{{all_gather_dim = 0 : i64, {ag_attrs}}}> : (tensor<2xf32>) -> tensor<8xf32>
      %acc1 = stablehlo.add %acc, %g : tensor<8xf32>
      %head = "stablehlo.slice"(%xx) <{{start_indices = array<i64: 0>, limit_indices = array<i64: 1>, strides = array<i64: 1>}}> : (tensor<2xf32>) -> tensor<1xf32>
      %h = stablehlo.reshape %head : (tensor<1xf32>) -> tensor<f32>
      %one = stablehlo.constant dense<1.0> : tensor<f32>
      %s = stablehlo.add %h, %one : tensor<f32>
      %sb = stablehlo.broadcast_in_dim %s, dims = [] : (tensor<f32>) -> tensor<8xf32>
      %y = stablehlo.multiply %g, %sb : tensor<8xf32>
      %r = "stablehlo.reduce_scatter"(%y) <{{scatter_dimension = 0 : i64, {rs_attrs}}}> ({{
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %sum = stablehlo.add %a, %b : tensor<f32>
        stablehlo.return %sum : tensor<f32>
      }}) : (tensor<8xf32>) -> tensor<2xf32>
      %eighth = stablehlo.constant dense<0.125> : tensor<2xf32>
      %x1 = stablehlo.multiply %r, %eighth : tensor<2xf32>
      %one_i = stablehlo.constant dense<1> : tensor<i32>
      %i1 = stablehlo.add %i, %one_i : tensor<i32>
      stablehlo.return %i1, %x1, %acc1 : tensor<i32>, tensor<2xf32>, tensor<8xf32>
    }}"#
    )
}

const GROUPS: &str = "replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>";

/// `mhlo.num_replicas = 4`: each replica gets its own argument list.
fn replicas_program() -> String {
    let body = loop_body("%x", GROUPS, GROUPS);
    format!(
        r#"module @collectives_replicas attributes {{mhlo.num_replicas = 4 : i32, mhlo.num_partitions = 1 : i32}} {{
  func.func public @main(%x: tensor<2xf32>) -> (tensor<2xf32>, tensor<8xf32>) {{{body}
    return %res#1, %res#2 : tensor<2xf32>, tensor<8xf32>
  }}
}}"#
    )
}

/// The form JAX emits for `shard_map`: partitions, a Shardy mesh, a manual computation, and
/// collectives on global device ids with channel handles.
fn partitions_program() -> String {
    let ag = format!(
        "channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, {GROUPS}, use_global_device_ids"
    );
    let rs = format!(
        "channel_handle = #stablehlo.channel_handle<handle = 2, type = 1>, {GROUPS}, use_global_device_ids"
    );
    let body = loop_body("%x", &ag, &rs);
    format!(
        r#"module @collectives_partitions attributes {{mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32}} {{
  sdy.mesh @mesh = <["fsdp"=4]>
  func.func public @main(%arg0: tensor<8xf32> {{sdy.sharding = #sdy.sharding<@mesh, [{{"fsdp"}}]>}}) -> (tensor<8xf32> {{sdy.sharding = #sdy.sharding<@mesh, [{{"fsdp"}}]>}}, tensor<32xf32> {{sdy.sharding = #sdy.sharding<@mesh, [{{"fsdp"}}]>}}) {{
    %out:2 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{{"fsdp"}}]>] out_shardings=[<@mesh, [{{"fsdp"}}]>, <@mesh, [{{"fsdp"}}]>] manual_axes={{"fsdp"}} (%x: tensor<2xf32>) {{{body}
      sdy.return %res#1, %res#2 : tensor<2xf32>, tensor<8xf32>
    }} : (tensor<8xf32>) -> (tensor<8xf32>, tensor<32xf32>)
    return %out#0, %out#1 : tensor<8xf32>, tensor<32xf32>
  }}
}}"#
    )
}

/// The same loop simulated on the host: per device `(x_d, acc_d)` after the last trip.
fn simulate(x: &[Vec<f32>]) -> Vec<(Vec<f32>, Vec<f32>)> {
    let mut x = x.to_vec();
    let mut acc = vec![vec![0.0f32; 8]; DEVICES];
    for _ in 0..TRIPS {
        let g: Vec<f32> = x.concat();
        for a in &mut acc {
            a.iter_mut().zip(&g).for_each(|(a, g)| *a += g);
        }
        let scales: Vec<f32> = x.iter().map(|xd| xd[0] + 1.0).collect();
        x = (0..DEVICES)
            .map(|d| {
                (0..2)
                    .map(|k| scales.iter().map(|s| g[2 * d + k] * s).sum::<f32>() * 0.125)
                    .collect()
            })
            .collect();
    }
    x.into_iter().zip(acc).collect()
}

fn run(plugin: &Plugin, form: ProgramForm, program: &str) {
    let client = Client::new(plugin, &ClientOptions::cpu(DEVICES)).unwrap();
    let mesh = Mesh::new(&client, "fsdp", DEVICES).unwrap();
    let exe = client
        .compile(program, &mesh.compile_options(form))
        .unwrap_or_else(|e| panic!("{form:?}: {e}"));
    assert_eq!(
        exe.devices(),
        mesh.devices(),
        "argument lists follow the mesh"
    );
    let inputs: Vec<Vec<f32>> = (0..DEVICES)
        .map(|d| vec![2.0 * d as f32, 2.0 * d as f32 + 1.0])
        .collect();
    let buffers: Vec<_> = inputs
        .iter()
        .zip(mesh.devices())
        .map(|(x, dev)| client.buffer(x, &[2], dev).unwrap())
        .collect();
    let lists: Vec<Vec<_>> = buffers.iter().map(|b| vec![b]).collect();
    let out = exe.execute(&lists).unwrap();
    assert_eq!(out.len(), DEVICES);
    let expected = simulate(&inputs);
    for (d, (outputs, (x, acc))) in out.iter().zip(&expected).enumerate() {
        assert_eq!(outputs.len(), 2);
        assert_eq!(
            &outputs[0].to_host::<f32>().unwrap(),
            x,
            "{form:?} x on device {d}"
        );
        assert_eq!(
            &outputs[1].to_host::<f32>().unwrap(),
            acc,
            "{form:?} acc on device {d}"
        );
    }
    // The reference itself: three gathers of x, 2x, 7x the iota; x ends at 77 times itself.
    assert_eq!(expected[3].0, vec![462.0, 539.0]);
    assert_eq!(
        expected[0].1,
        vec![0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0]
    );
}

#[test]
fn replicas_form_gathers_and_scatters_exactly_in_a_loop() {
    run(
        &common::cpu_plugin(),
        ProgramForm::Replicas,
        &replicas_program(),
    );
}

#[test]
fn partitions_form_gathers_and_scatters_exactly_in_a_loop() {
    run(
        &common::cpu_plugin(),
        ProgramForm::Partitions,
        &partitions_program(),
    );
}

#[test]
fn newer_plugin_runs_both_forms() {
    let Ok(plugin) = common::newer_cpu_plugin().inspect_err(|why| eprintln!("skipped: {why}"))
    else {
        return;
    };
    run(&plugin, ProgramForm::Replicas, &replicas_program());
    run(&plugin, ProgramForm::Partitions, &partitions_program());
}

/// Two clients of the same device count in one process, each running the loop over and over
/// on its own thread: their collectives must not meet in one rendezvous. (The CPU plugin keys
/// a rendezvous by launch id and device ids; with one launch id for every execution, the two
/// collided and the plugin aborted the process.)
#[test]
fn two_clients_run_collectives_at_the_same_time() {
    let threads: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(|| {
                let plugin = common::cpu_plugin();
                for _ in 0..40 {
                    run(&plugin, ProgramForm::Partitions, &partitions_program());
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}
