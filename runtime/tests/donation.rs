//! Donation (input/output aliasing): a program that declares `w → w'` writes its result into
//! the argument's buffer, XLA's compiled statistics count that buffer once, and the handle
//! passed in becomes unusable with a typed error. On both CPU plugins.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan::{Alias, Axis, DType, Program, Scope, Sharding, TensorType};
use stackscan_runtime::testing as common;
use stackscan_runtime::{Client, ClientOptions, Error, Mesh, Plugin};

const N: i64 = 1024;

/// `(w, x) -> (w + x, sum(x))` over `devices`, `w` and `x` sharded on dimension 0; with
/// `donate`, `w` aliases the first result.
fn update(devices: usize, donate: bool) -> Program {
    let s = Scope::new("update");
    let local = TensorType::new(DType::F32, [N]);
    let w = s.param(local.clone());
    let x = s.param(local);
    let total = x.sum_all().unwrap();
    let f = s.finish(&[w.add(&x).unwrap(), total]).unwrap();
    let axis = Axis {
        name: "fsdp".into(),
        size: devices,
    };
    let program = Program::on_mesh(
        f,
        axis,
        vec![Sharding::Dim(0); 2],
        vec![Sharding::Dim(0), Sharding::Replicated],
    )
    .unwrap();
    let aliases = if donate {
        vec![Alias {
            param: 0,
            result: 0,
        }]
    } else {
        Vec::new()
    };
    program.with_aliases(aliases).unwrap()
}

fn check_donation(plugin: &Plugin) {
    let devices = 2;
    let client = Client::new(plugin, &ClientOptions::cpu(devices)).unwrap();
    let mesh = Mesh::new(&client, "fsdp", devices).unwrap();
    let bytes = N * 4;

    // Without aliasing the state is counted as an argument and again as an output.
    let kept = client
        .compile_program(&update(devices, false), &mesh)
        .unwrap();
    let stats = kept.memory_stats().unwrap();
    assert_eq!(stats.alias, 0, "{stats:?}");
    let donating = client
        .compile_program(&update(devices, true), &mesh)
        .unwrap();
    let stats = donating.memory_stats().unwrap();
    assert_eq!(stats.alias, bytes, "{stats:?}");
    let before = kept.memory_stats().unwrap();
    assert!(
        stats.footprint() + bytes <= before.footprint(),
        "donating saves the state's bytes: {stats:?} vs {before:?}"
    );
    assert_eq!(donating.donated_parameters(), Some(&[0usize][..]));

    let upload = |v: f32, d: usize| {
        client
            .buffer(&vec![v; N as usize], &[N], &client.devices()[d])
            .unwrap()
    };
    let w: Vec<_> = (0..devices).map(|d| upload(1.0 + d as f32, d)).collect();
    let x: Vec<_> = (0..devices).map(|d| upload(0.5, d)).collect();
    let lists: Vec<Vec<_>> = (0..devices).map(|d| vec![&w[d], &x[d]]).collect();

    // The non-donating program leaves its arguments alone.
    kept.execute(&lists).unwrap();
    assert!(w.iter().chain(&x).all(|b| !b.is_donated()));

    let out = donating.execute(&lists).unwrap();
    for d in 0..devices {
        assert_eq!(
            out[d][0].to_host::<f32>().unwrap(),
            vec![1.5 + d as f32; N as usize]
        );
        assert!(w[d].is_donated(), "device {d}: w was aliased");
        assert!(!x[d].is_donated(), "device {d}: x was not aliased");
        assert_eq!(x[d].to_host::<f32>().unwrap(), vec![0.5; N as usize]);
    }
    match w[0].to_host::<f32>() {
        Err(Error::Donated { argument: None, ty }) => assert_eq!(ty.dims, vec![N]),
        other => panic!("expected Donated, got {other:?}"),
    }
    let err = donating.execute(&lists).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Donated {
                argument: Some((0, 0)),
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("use that result instead"), "{err}");

    // The result carries the state on: feed it back, as a trainer does.
    let next: Vec<Vec<_>> = (0..devices).map(|d| vec![&out[d][0], &x[d]]).collect();
    let again = donating.execute(&next).unwrap();
    assert_eq!(again[1][0].to_host::<f32>().unwrap(), vec![3.0; N as usize]);
    assert!(out[1][0].is_donated());

    // One buffer in a donated slot and another slot: the plugin must not donate it.
    let twice: Vec<Vec<_>> = (0..devices).map(|d| vec![&x[d], &x[d]]).collect();
    let doubled = donating.execute(&twice).unwrap();
    assert_eq!(
        doubled[0][0].to_host::<f32>().unwrap(),
        vec![1.0; N as usize]
    );
    assert!(x.iter().all(|b| !b.is_donated()));
    assert_eq!(x[0].to_host::<f32>().unwrap(), vec![0.5; N as usize]);
}

#[test]
fn a_donated_argument_is_reused_for_its_result_and_refused_after() {
    check_donation(&common::cpu_plugin());
}

#[test]
fn the_newer_plugin_donates_too() {
    if let Ok(plugin) = common::newer_cpu_plugin().inspect_err(|why| eprintln!("skipped: {why}")) {
        check_donation(&plugin);
    }
}
