//! StableHLO text emission: a [`Program`] is a function plus where it runs.
//!
//! A program without a mesh is a plain `func.func @main`. A program on a mesh is written in
//! the form JAX emits for `shard_map`: `mhlo.num_partitions = N`, an `sdy.mesh`, and `main`'s
//! body inside `sdy.manual_computation` over the mesh axis, so every op inside sees per-device
//! shapes and collectives name partitions. Scans are lowered to `stablehlo.while` first.
//!
//! ```
//! use stackscan::{DType, Program, Scope, TensorType};
//! let f = Scope::new("main");
//! let x = f.param(TensorType::new(DType::F32, [2]));
//! let y = x.exp()?;
//! let text = Program::new(f.finish(&[y])?).emit()?;
//! assert!(text.contains("\"stablehlo.exponential\""));
//! # Ok::<(), stackscan::Error>(())
//! ```

pub(crate) mod writer;

use crate::error::{Error, Result};
use crate::ir::{Axis, Function};
use crate::mesh::Mesh;
use crate::types::TensorType;

/// How a parameter or result of a program on a mesh is laid out across devices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Sharding {
    /// Every device holds the whole value.
    Replicated,
    /// Split into equal slabs along this dimension, slab `i` on device `i`: over every axis
    /// of the mesh, the first the major one (Shardy's `{"fsdp", "expert"}`).
    Dim(usize),
}

/// A function ready to emit: on one device, or on a mesh of one or more named axes.
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    main: Function,
    mesh: Option<MeshLayout>,
}

#[derive(Clone, Debug, PartialEq)]
struct MeshLayout {
    mesh: Mesh,
    /// Every device of the mesh, in device order.
    all: Axis,
    params: Vec<Sharding>,
    results: Vec<Sharding>,
}

impl Program {
    /// A single-device program.
    pub fn new(main: Function) -> Program {
        Program { main, mesh: None }
    }

    /// A program whose `main` runs per device on `axis`: `params` and `results` say how each
    /// global value is laid out; `main`'s own types are the per-device ones.
    pub fn on_mesh(
        main: Function,
        axis: Axis,
        params: Vec<Sharding>,
        results: Vec<Sharding>,
    ) -> Result<Program> {
        if axis.size == 0 {
            return Err(Error::invalid(
                "program",
                "a mesh axis needs at least one device",
            ));
        }
        Program::on_device_mesh(main, Mesh::line(&axis)?, params, results)
    }

    /// A program whose `main` runs per device on `mesh`, whatever its number of axes; values
    /// split by [`Sharding::Dim`] are split over all of its devices, and collectives may run
    /// over any of its axes or a compound of them ([`Axis::compound`]).
    pub fn on_device_mesh(
        main: Function,
        mesh: Mesh,
        params: Vec<Sharding>,
        results: Vec<Sharding>,
    ) -> Result<Program> {
        if params.len() != main.params.len() || results.len() != main.results.len() {
            return Err(Error::invalid(
                "program",
                format!(
                    "{} parameter and {} result shardings for a function with {} and {}",
                    params.len(),
                    results.len(),
                    main.params.len(),
                    main.results.len()
                ),
            ));
        }
        let check = |s: &Sharding, t: &TensorType| match s {
            Sharding::Dim(d) if *d >= t.rank() => Err(Error::AxisOutOfRange {
                op: "program",
                axis: *d as i64,
                operand: t.clone(),
            }),
            _ => Ok(()),
        };
        for (s, t) in params.iter().zip(main.param_types()) {
            check(s, &t)?;
        }
        for (s, t) in results.iter().zip(main.result_types()) {
            check(s, &t)?;
        }
        Ok(Program {
            main,
            mesh: Some(MeshLayout {
                all: mesh.all(),
                mesh,
                params,
                results,
            }),
        })
    }

    /// The function.
    pub fn main(&self) -> &Function {
        &self.main
    }

    /// The axis spanning every device, for a program on a mesh (the mesh's one axis on a
    /// one-axis mesh).
    pub fn axis(&self) -> Option<&Axis> {
        self.mesh.as_ref().map(|m| &m.all)
    }

    /// The mesh, for a program on one.
    pub fn mesh(&self) -> Option<&Mesh> {
        self.mesh.as_ref().map(|m| &m.mesh)
    }

    /// How each parameter is laid out, for a program on a mesh.
    pub fn param_shardings(&self) -> Option<&[Sharding]> {
        self.mesh.as_ref().map(|m| m.params.as_slice())
    }

    /// How each result is laid out, for a program on a mesh.
    pub fn result_shardings(&self) -> Option<&[Sharding]> {
        self.mesh.as_ref().map(|m| m.results.as_slice())
    }

    /// The global type of a per-device value laid out by `sharding`.
    pub fn global_type(&self, local: &TensorType, sharding: Sharding) -> Result<TensorType> {
        match (&self.mesh, sharding) {
            (Some(m), Sharding::Dim(d)) => {
                if d >= local.rank() {
                    return Err(Error::AxisOutOfRange {
                        op: "program",
                        axis: d as i64,
                        operand: local.clone(),
                    });
                }
                let mut dims = local.dims.clone();
                dims[d] *= m.all.size as i64;
                Ok(local.with_dims(dims))
            }
            _ => Ok(local.clone()),
        }
    }

    /// The StableHLO module text.
    pub fn emit(&self) -> Result<String> {
        let lowered = crate::lower::lower_scans(&self.main)?;
        writer::write_program(
            &lowered,
            self.mesh
                .as_ref()
                .map(|m| (&m.mesh, m.params.as_slice(), m.results.as_slice())),
        )
    }
}
