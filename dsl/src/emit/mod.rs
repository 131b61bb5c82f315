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

pub(crate) mod text;
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

/// A parameter whose buffer the program may reuse for one of its results (input/output
/// aliasing, what JAX calls donation).
///
/// A training step returns new weights and optimizer state of exactly the old ones' types;
/// aliasing them lets XLA write the new state over the old instead of holding both, which
/// halves the state's share of device memory. The caller gives the argument up: the runtime
/// marks a donated buffer unusable once the program has run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Alias {
    /// Index of `main`'s parameter.
    pub param: usize,
    /// Index of `main`'s result that may take over the parameter's buffer.
    pub result: usize,
}

/// A function ready to emit: on one device, or on a mesh of one or more named axes.
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    main: Function,
    mesh: Option<MeshLayout>,
    aliases: Vec<Alias>,
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
        Program {
            main,
            mesh: None,
            aliases: Vec::new(),
        }
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
            aliases: Vec::new(),
        })
    }

    /// The same program with `aliases` declared (replacing any declared before): each
    /// parameter's buffer may be reused for its result. A parameter and its result must have
    /// the same per-device type and, on a mesh, the same sharding; no parameter or result may
    /// appear twice.
    pub fn with_aliases(mut self, aliases: Vec<Alias>) -> Result<Program> {
        let params = self.main.param_types();
        let results = self.main.result_types();
        let bad = |message: String| Err(Error::invalid("program aliases", message));
        for (i, a) in aliases.iter().enumerate() {
            let (Some(pt), Some(rt)) = (params.get(a.param), results.get(a.result)) else {
                return bad(format!(
                    "parameter {} → result {} is out of range ({} parameters, {} results)",
                    a.param,
                    a.result,
                    params.len(),
                    results.len()
                ));
            };
            if pt != rt {
                return bad(format!(
                    "parameter {} is {pt} but result {} is {rt}",
                    a.param, a.result
                ));
            }
            if let Some(m) = &self.mesh
                && m.params[a.param] != m.results[a.result]
            {
                return bad(format!(
                    "parameter {} is laid out {:?} but result {} {:?}",
                    a.param, m.params[a.param], a.result, m.results[a.result]
                ));
            }
            if let Some(b) = aliases[..i]
                .iter()
                .find(|b| b.param == a.param || b.result == a.result)
            {
                return bad(format!(
                    "parameter {} → result {} overlaps parameter {} → result {}",
                    a.param, a.result, b.param, b.result
                ));
            }
        }
        self.aliases = aliases;
        Ok(self)
    }

    /// The declared input/output aliases, in the order given.
    pub fn aliases(&self) -> &[Alias] {
        &self.aliases
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
            &self.aliases,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::Scope;
    use crate::dtype::DType;

    fn row(n: i64) -> TensorType {
        TensorType::new(DType::F32, [n])
    }

    /// `(w, x) -> (w + x, sum(x))`: result 0 has `w`'s type, result 1 is a scalar.
    fn step() -> Result<Function> {
        let s = Scope::new("step");
        let w = s.param(row(4));
        let x = s.param(row(4));
        let total = x.sum_all()?;
        s.finish(&[w.add(&x)?, total])
    }

    #[test]
    fn a_donated_parameter_names_its_result_in_the_text() -> Result<()> {
        let alias = Alias {
            param: 0,
            result: 0,
        };
        let text = Program::new(step()?).with_aliases(vec![alias])?.emit()?;
        assert!(
            text.contains("%arg0: tensor<4xf32> {tf.aliasing_output = 0 : i32}"),
            "{text}"
        );
        assert_eq!(text.matches("tf.aliasing_output").count(), 1, "{text}");

        let axis = Axis {
            name: "fsdp".into(),
            size: 2,
        };
        let dim0 = vec![Sharding::Dim(0); 2];
        let on_mesh = Program::on_mesh(
            step()?,
            axis,
            dim0,
            vec![Sharding::Dim(0), Sharding::Replicated],
        )?;
        let text = on_mesh.with_aliases(vec![alias])?.emit()?;
        assert!(
            text.contains(
                "tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{\"fsdp\"}]>, tf.aliasing_output = 0 : i32}"
            ),
            "{text}"
        );
        assert_eq!(text.matches("tf.aliasing_output").count(), 1, "{text}");
        Ok(())
    }

    #[test]
    fn aliases_that_cannot_share_a_buffer_are_refused() -> Result<()> {
        let refused = |aliases: Vec<Alias>| -> Result<String> {
            let err = Program::new(step()?)
                .with_aliases(aliases)
                .expect_err("accepted");
            Ok(err.to_string())
        };
        let a = |param, result| Alias { param, result };
        let message = refused(vec![a(0, 1)])?;
        assert!(
            message.contains("parameter 0 is tensor<4xf32> but result 1 is tensor<f32>"),
            "{message}"
        );
        let message = refused(vec![a(2, 0)])?;
        assert!(
            message.contains("out of range (2 parameters, 2 results)"),
            "{message}"
        );
        let message = refused(vec![a(0, 0), a(1, 0)])?;
        assert!(
            message.contains("overlaps parameter 0 → result 0"),
            "{message}"
        );

        let axis = Axis {
            name: "fsdp".into(),
            size: 2,
        };
        let params = vec![Sharding::Replicated, Sharding::Dim(0)];
        let results = vec![Sharding::Dim(0), Sharding::Replicated];
        let on_mesh = Program::on_mesh(step()?, axis, params, results)?;
        let message = on_mesh
            .with_aliases(vec![a(0, 0)])
            .expect_err("accepted")
            .to_string();
        assert!(
            message.contains("laid out Replicated but result 0 Dim(0)"),
            "{message}"
        );
        Ok(())
    }
}
