//! Collectives on two-axis meshes (`fsdp × expert`, 2 × 4 and 4 × 2 on 8 CPU devices) and on a
//! one-axis mesh, run on the plugin and compared with a host simulation of the devices.
//!
//! The host side computes each device's group from its row-major coordinates, independently
//! of `Mesh::replica_groups`: along `expert` the devices with the same `fsdp` coordinate, along
//! `fsdp` those with the same `expert` coordinate, along the compound `fsdp,expert` every
//! device. Every value is a distinct small integer, so f64 results are exact and any mix-up of
//! groups, of order within a group, or of pieces of an all_to_all changes them. The
//! all_to_all's VJP (the inverse all_to_all) is checked against central differences on both
//! sub-axes.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan::{Axis, DType, Mesh, Program, Scope, Sharding, Tensor, TensorType};
use stackscan_runtime::testing as common;

use common::graph::{Arg, CompiledOnMesh, Data, TOL, check_vjp_on_mesh, float_arg};
use stackscan::rng::Rng;

/// Local rows and columns of every device's input.
const ROWS: usize = 8;
const COLS: usize = 2;

/// Device `d`'s input: `100·d + i` for element `i`.
fn input(d: usize) -> Vec<f64> {
    (0..ROWS * COLS).map(|i| (100 * d + i) as f64).collect()
}

/// The devices of `d`'s group along `which` on an `f × x` mesh, in group order.
fn group(f: usize, x: usize, d: usize, which: &str) -> Vec<usize> {
    let (df, dx) = (d / x, d % x);
    match which {
        "expert" => (0..x).map(|j| df * x + j).collect(),
        "fsdp" => (0..f).map(|i| i * x + dx).collect(),
        _ => (0..f * x).collect(),
    }
}

/// Rows `[r0, r1)` of a device's `[ROWS, COLS]` value.
fn rows(v: &[f64], r0: usize, r1: usize) -> Vec<f64> {
    v[r0 * COLS..r1 * COLS].to_vec()
}

/// What device `d` must hold after each collective, in the order the program returns them.
fn expected(f: usize, x: usize, d: usize, axes: &[&str]) -> Vec<Vec<f64>> {
    let mut out = Vec::new();
    for &which in axes {
        let g = group(f, x, d, which);
        let n = g.len();
        let me = g.iter().position(|&e| e == d).unwrap();
        // all_gather along rows.
        out.push(g.iter().flat_map(|&e| input(e)).collect());
        // reduce_scatter of (d + 1)·x along rows: my piece of the sum.
        let piece = ROWS / n;
        let mut rs = vec![0.0; piece * COLS];
        for &e in &g {
            for (r, v) in rs
                .iter_mut()
                .zip(rows(&input(e), me * piece, (me + 1) * piece))
            {
                *r += (e + 1) as f64 * v;
            }
        }
        out.push(rs);
        // psum.
        let mut sum = vec![0.0; ROWS * COLS];
        for &e in &g {
            for (s, v) in sum.iter_mut().zip(input(e)) {
                *s += v;
            }
        }
        out.push(sum);
        // all_to_all: split rows into n pieces, piece j to member j; what arrives is
        // concatenated along columns, member j's piece in columns [j·COLS, (j+1)·COLS).
        let mut a2a = vec![0.0; piece * n * COLS];
        for (j, &e) in g.iter().enumerate() {
            let got = rows(&input(e), me * piece, (me + 1) * piece);
            for r in 0..piece {
                for c in 0..COLS {
                    a2a[r * n * COLS + j * COLS + c] = got[r * COLS + c];
                }
            }
        }
        out.push(a2a);
        // axis_index.
        out.push(vec![me as f64]);
    }
    out
}

/// The axis called `which` on `mesh` (`all` for the compound of both).
fn axis(mesh: &Mesh, which: &str) -> Axis {
    if which == "all" {
        mesh.all()
    } else {
        mesh.axis(which).unwrap()
    }
}

fn collectives(x: &Tensor, a: &Axis) -> stackscan::Result<Vec<Tensor>> {
    let me = x.scope().axis_index(a)?;
    Ok(vec![
        x.all_gather(0, a)?,
        x.reduce_scatter(0, a)?,
        x.psum(a)?,
        x.all_to_all(0, 1, a)?,
        me.convert(DType::F64)?.reshape(&[1])?,
    ])
}

/// Runs every collective over every axis of an `f × x` mesh (the one-axis mesh `expert` for
/// `f = 1`) and compares each device's values.
fn check_mesh(f: usize, x: usize) {
    let client = common::cpu_client(f * x);
    let (mesh, axes, written) = if f == 1 {
        let mesh = Mesh::new(&[("expert", x)]).unwrap();
        (mesh, &["expert", "all"][..], format!("<[\"expert\"={x}]>"))
    } else {
        let mesh = Mesh::new(&[("fsdp", f), ("expert", x)]).unwrap();
        let written = format!("<[\"fsdp\"={f}, \"expert\"={x}]>");
        (mesh, &["expert", "fsdp", "all"][..], written)
    };
    let s = Scope::new("mesh_collectives");
    let local = TensorType::new(DType::F64, [ROWS as i64, COLS as i64]);
    let xs = s.param(local.clone());
    // The reduce-scatter input is (device id + 1)·x, the id read through the compound axis.
    let id = s
        .axis_index(&mesh.all())
        .unwrap()
        .convert(DType::F64)
        .unwrap();
    let one = s.scalar(1.0, DType::F64).unwrap();
    let factor = id.add(&one).unwrap().broadcast_to(&local.dims).unwrap();
    let weighted = xs.mul(&factor).unwrap();
    let mut outs = Vec::new();
    for &which in axes {
        let a = axis(&mesh, which);
        let mut c = collectives(&xs, &a).unwrap();
        c[1] = weighted.reduce_scatter(0, &a).unwrap();
        outs.extend(c);
    }
    let main = s.finish(&outs).unwrap();
    let results = vec![Sharding::Dim(0); outs.len()];
    let program =
        Program::on_device_mesh(main, mesh.clone(), vec![Sharding::Dim(0)], results).unwrap();
    let text = program.emit().unwrap();
    assert!(
        text.contains(&format!("sdy.mesh @mesh = {written}")),
        "{text}"
    );
    let exe = CompiledOnMesh::new(&client, &program, f * x);
    let args: Vec<Vec<Arg>> = (0..f * x)
        .map(|d| {
            vec![Arg {
                ty: local.clone(),
                data: Data::F(input(d)),
            }]
        })
        .collect();
    let got = exe.run(&args);
    let names = [
        "all_gather",
        "reduce_scatter",
        "psum",
        "all_to_all",
        "axis_index",
    ];
    for (d, outs) in got.iter().enumerate() {
        let want = expected(f, x, d, axes);
        assert_eq!(outs.len(), want.len());
        for (i, (o, w)) in outs.iter().zip(&want).enumerate() {
            assert_eq!(
                o,
                w,
                "{f}×{x} mesh, device {d}: {} over `{}`",
                names[i % names.len()],
                axes[i / names.len()]
            );
        }
    }
}

#[test]
fn collectives_on_a_2x4_mesh_match_the_host() {
    check_mesh(2, 4);
}

#[test]
fn collectives_on_a_4x2_mesh_match_the_host() {
    check_mesh(4, 2);
}

#[test]
fn collectives_on_a_one_axis_mesh_match_the_host() {
    check_mesh(1, 4);
}

#[test]
fn all_to_all_vjp_on_each_sub_axis_matches_finite_differences() {
    let client = common::cpu_client(8);
    let mesh = Mesh::new(&[("fsdp", 2), ("expert", 4)]).unwrap();
    let mut rng = Rng::new(11);
    for which in ["expert", "fsdp"] {
        let args: Vec<Vec<Arg>> = (0..8)
            .map(|_| vec![float_arg(&mut rng, &[4, 3], -1.0, 1.0)])
            .collect();
        check_vjp_on_mesh(
            &client,
            &format!("all_to_all_{which}"),
            &mesh,
            &args,
            TOL,
            |p, m| {
                // The square makes the cotangent depend on where each value went.
                let a = m.axis(which)?;
                p[0].sin()?.all_to_all(0, 1, &a)?.square()
            },
        );
    }
}
