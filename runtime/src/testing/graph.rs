//! Running DSL functions on the CPU plugin in f64, and checking their VJPs against central
//! finite differences.

use stackscan::{DType, Function, Program, Scope, Tensor, TensorType};

use crate::{Buffer, Client, Executable, Mesh};

use stackscan::rng::Rng;

/// One argument: its type and row-major values.
#[derive(Clone, Debug)]
pub struct Arg {
    /// The argument's type; an f32 argument's values are rounded from f64 on upload.
    pub ty: TensorType,
    /// Its values.
    pub data: Data,
}

/// Argument values.
#[derive(Clone, Debug)]
pub enum Data {
    /// Float values, kept in f64 so finite differences do not lose digits on the host.
    F(Vec<f64>),
    /// Integer values (indices).
    I(Vec<i32>),
}

/// An f64 argument of shape `dims` uniform in `[lo, hi)`.
pub fn float_arg(rng: &mut Rng, dims: &[i64], lo: f64, hi: f64) -> Arg {
    let ty = TensorType::new(DType::F64, dims);
    let data = Data::F(rng.uniform(lo, hi, ty.num_elements()));
    Arg { ty, data }
}

/// The toy models' global batch: inputs `x` and targets `y`, each f32 `[rows, width]` uniform
/// in `[-1, 1)`, drawn in that order from `Rng::new(seed)`.
pub fn uniform_rows(seed: u64, rows: i64, width: i64) -> Vec<Arg> {
    let mut rng = Rng::new(seed);
    let ty = TensorType::new(DType::F32, [rows, width]);
    (0..2)
        .map(|_| Arg {
            ty: ty.clone(),
            data: Data::F(rng.uniform(-1.0, 1.0, ty.num_elements())),
        })
        .collect()
}

/// An i32 argument.
pub fn int_arg(dims: &[i64], values: Vec<i32>) -> Arg {
    Arg {
        ty: TensorType::new(DType::I32, dims),
        data: Data::I(values),
    }
}

fn upload(client: &Client, arg: &Arg, device: usize) -> Buffer {
    let dev = &client.devices()[device];
    match &arg.data {
        Data::F(v) => match arg.ty.dtype {
            DType::F32 => {
                let v: Vec<f32> = v.iter().map(|&x| x as f32).collect();
                client.buffer(&v, &arg.ty.dims, dev)
            }
            _ => client.buffer(v, &arg.ty.dims, dev),
        },
        Data::I(v) => client.buffer(v, &arg.ty.dims, dev),
    }
    .expect("upload an argument")
}

fn download(b: &Buffer) -> Vec<f64> {
    match b.tensor_type().dtype {
        DType::F64 => b.to_host::<f64>().expect("read f64"),
        DType::F32 => b
            .to_host::<f32>()
            .expect("read f32")
            .into_iter()
            .map(f64::from)
            .collect(),
        DType::I32 => b
            .to_host::<i32>()
            .expect("read i32")
            .into_iter()
            .map(f64::from)
            .collect(),
        other => panic!("cannot read {other} back in tests"),
    }
}

/// A compiled single-device function.
#[derive(Debug)]
pub struct Compiled {
    client: Client,
    exe: Executable,
}

impl Compiled {
    pub fn new(client: &Client, f: &Function) -> Compiled {
        let program = Program::new(f.clone());
        let mesh = Mesh::new(client, "x", 1).expect("mesh");
        let exe = client
            .compile_program(&program, &mesh)
            .unwrap_or_else(|e| panic!("compile `{}`: {e}\n{:?}", f.name, program.emit()));
        Compiled {
            client: client.clone(),
            exe,
        }
    }

    /// Runs on the given arguments; each output as f64 values.
    pub fn run(&self, args: &[Arg]) -> Vec<Vec<f64>> {
        let bufs: Vec<Buffer> = args.iter().map(|a| upload(&self.client, a, 0)).collect();
        let refs: Vec<&Buffer> = bufs.iter().collect();
        let out = self.exe.execute(&[refs]).expect("execute");
        out[0].iter().map(download).collect()
    }
}

/// A compiled program on a mesh of the client's first `n` devices (Shardy form); arguments
/// and results are given per device.
#[derive(Debug)]
pub struct CompiledOnMesh {
    client: Client,
    exe: Executable,
}

impl CompiledOnMesh {
    pub fn new(client: &Client, program: &Program, n: usize) -> CompiledOnMesh {
        let mesh = Mesh::new(client, "x", n).expect("mesh");
        let exe = client
            .compile_program(program, &mesh)
            .unwrap_or_else(|e| panic!("compile: {e}\n{:?}", program.emit()));
        CompiledOnMesh {
            client: client.clone(),
            exe,
        }
    }

    /// `args[d]` are device `d`'s arguments; returns each device's outputs.
    pub fn run(&self, args: &[Vec<Arg>]) -> Vec<Vec<Vec<f64>>> {
        let bufs: Vec<Vec<Buffer>> = args
            .iter()
            .enumerate()
            .map(|(d, a)| a.iter().map(|x| upload(&self.client, x, d)).collect())
            .collect();
        let lists: Vec<Vec<&Buffer>> = bufs.iter().map(|l| l.iter().collect()).collect();
        let out = self.exe.execute(&lists).expect("execute");
        out.iter()
            .map(|l| l.iter().map(download).collect())
            .collect()
    }
}

/// Builds `f(params) = build(params)` for the argument types.
pub fn function(
    name: &str,
    args: &[Arg],
    build: impl FnOnce(&[Tensor]) -> stackscan::Result<Vec<Tensor>>,
) -> Function {
    let s = Scope::new(name);
    let params: Vec<Tensor> = args.iter().map(|a| s.param(a.ty.clone())).collect();
    let out = build(&params).unwrap_or_else(|e| panic!("build `{name}`: {e}"));
    s.finish(&out)
        .unwrap_or_else(|e| panic!("finish `{name}`: {e}"))
}

/// Tolerances of a finite-difference check.
#[derive(Clone, Copy, Debug)]
pub struct Tol {
    /// The finite-difference step.
    pub step: f64,
    /// Relative tolerance, of the larger of the two derivatives.
    pub rtol: f64,
    /// Absolute tolerance.
    pub atol: f64,
}

/// Tolerances for f64 functions of moderate curvature.
pub const TOL: Tol = Tol {
    step: 1e-5,
    rtol: 1e-6,
    atol: 1e-8,
};

/// Checks the VJP of a single-output `f` against central differences of
/// `L(x) = Σ f(x) · w` for a fixed random `w`, for every element of every float argument.
/// Panics naming `name`, the argument and the element on a mismatch.
pub fn check_vjp(
    client: &Client,
    name: &str,
    args: &[Arg],
    tol: Tol,
    build: impl FnOnce(&[Tensor]) -> stackscan::Result<Tensor>,
) {
    let f = function(name, args, |p| Ok(vec![build(p)?]));
    let out_ty = f.result_types()[0].clone();
    assert!(out_ty.dtype.is_float(), "{name}: output must be float");
    let mut rng = Rng::new(name.len() as u64 * 7919 + 17);
    let w = rng.uniform(-1.0, 1.0, out_ty.num_elements());
    let forward = Compiled::new(client, &f);
    let grads_fn = stackscan::vjp(&f).unwrap_or_else(|e| panic!("vjp `{name}`: {e}"));
    let backward = Compiled::new(client, &grads_fn);
    let mut vjp_args = args.to_vec();
    vjp_args.push(Arg {
        ty: out_ty.clone(),
        data: Data::F(w.clone()),
    });
    let grads = backward.run(&vjp_args);
    let loss = |a: &[Arg]| -> f64 {
        let y = &forward.run(a)[0];
        y.iter().zip(&w).map(|(y, w)| y * w).sum()
    };
    let mut g = grads.iter();
    for (i, arg) in args.iter().enumerate() {
        let Data::F(values) = &arg.data else { continue };
        let grad = g
            .next()
            .unwrap_or_else(|| panic!("{name}: no gradient for argument {i}"));
        assert_eq!(
            grad.len(),
            values.len(),
            "{name}: gradient {i} has the wrong size"
        );
        for j in 0..values.len() {
            let mut plus = args.to_vec();
            let mut minus = args.to_vec();
            if let Data::F(v) = &mut plus[i].data {
                v[j] += tol.step;
            }
            if let Data::F(v) = &mut minus[i].data {
                v[j] -= tol.step;
            }
            let fd = (loss(&plus) - loss(&minus)) / (2.0 * tol.step);
            let err = (grad[j] - fd).abs();
            let bound = tol.atol + tol.rtol * grad[j].abs().max(fd.abs());
            assert!(
                err <= bound,
                "{name}: d/d(arg {i})[{j}]: vjp {} vs finite difference {fd} (error {err:e})",
                grad[j]
            );
        }
    }
}

/// [`check_vjp`] for a per-device function on an `n`-device mesh (axis `x`): every parameter
/// and the result are sharded along dimension 0, `args[d]` are device `d`'s values, and the
/// checked loss is `Σ_d Σ f_d · w_d`, perturbing one device's element at a time.
pub fn check_vjp_mesh(
    client: &Client,
    name: &str,
    n: usize,
    args: &[Vec<Arg>],
    tol: Tol,
    build: impl FnOnce(&[Tensor], &stackscan::Axis) -> stackscan::Result<Tensor>,
) {
    let axis = stackscan::Axis::new("x", n);
    let mesh = stackscan::Mesh::line(&axis).expect("a one-axis mesh");
    check_vjp_on_mesh(client, name, &mesh, args, tol, |p, _| build(p, &axis));
}

/// [`check_vjp_mesh`] on a mesh of any number of axes: `build` picks the axes its collectives
/// run over; every parameter and the result are split over all of the mesh's devices.
pub fn check_vjp_on_mesh(
    client: &Client,
    name: &str,
    mesh: &stackscan::Mesh,
    args: &[Vec<Arg>],
    tol: Tol,
    build: impl FnOnce(&[Tensor], &stackscan::Mesh) -> stackscan::Result<Tensor>,
) {
    use stackscan::Sharding;
    let n = mesh.size();
    let f = function(name, &args[0], |p| Ok(vec![build(p, mesh)?]));
    let out_ty = f.result_types()[0].clone();
    let shard = |k: usize| vec![Sharding::Dim(0); k];
    let forward = CompiledOnMesh::new(
        client,
        &Program::on_device_mesh(f.clone(), mesh.clone(), shard(f.params.len()), shard(1))
            .expect("forward program"),
        n,
    );
    let g = stackscan::vjp(&f).unwrap_or_else(|e| panic!("vjp `{name}`: {e}"));
    let backward = CompiledOnMesh::new(
        client,
        &Program::on_device_mesh(
            g.clone(),
            mesh.clone(),
            shard(g.params.len()),
            shard(g.results.len()),
        )
        .expect("vjp program"),
        n,
    );
    let mut rng = Rng::new(name.len() as u64 * 31 + 5);
    let w: Vec<Vec<f64>> = (0..n)
        .map(|_| rng.uniform(-1.0, 1.0, out_ty.num_elements()))
        .collect();
    let with_w: Vec<Vec<Arg>> = args
        .iter()
        .zip(&w)
        .map(|(a, wd)| {
            let mut a = a.clone();
            a.push(Arg {
                ty: out_ty.clone(),
                data: Data::F(wd.clone()),
            });
            a
        })
        .collect();
    let grads = backward.run(&with_w);
    let loss = |a: &[Vec<Arg>]| -> f64 {
        forward
            .run(a)
            .iter()
            .zip(&w)
            .map(|(out, wd)| out[0].iter().zip(wd).map(|(y, w)| y * w).sum::<f64>())
            .sum()
    };
    for d in 0..n {
        let mut gi = grads[d].iter();
        for (i, arg) in args[d].iter().enumerate() {
            let Data::F(values) = &arg.data else { continue };
            let grad = gi.next().expect("a gradient per float argument");
            for j in 0..values.len() {
                let mut plus = args.to_vec();
                let mut minus = args.to_vec();
                if let Data::F(v) = &mut plus[d][i].data {
                    v[j] += tol.step;
                }
                if let Data::F(v) = &mut minus[d][i].data {
                    v[j] -= tol.step;
                }
                let fd = (loss(&plus) - loss(&minus)) / (2.0 * tol.step);
                let err = (grad[j] - fd).abs();
                assert!(
                    err <= tol.atol + tol.rtol * grad[j].abs().max(fd.abs()),
                    "{name}: device {d}, d/d(arg {i})[{j}]: vjp {} vs finite difference {fd}",
                    grad[j]
                );
            }
        }
    }
}
