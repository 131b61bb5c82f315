//! Compiling a stackscan [`Program`]: its form and its per-device signature come from the
//! program itself, so nothing is read back from the emitted text; and a program written
//! elsewhere, whose signature is read from its text. Both go through the client's compile
//! cache ([`crate::compile_cache`]).
//!
//! A program on a mesh axis knows it is in the partitions form and how many devices the axis
//! spans; its `main`'s parameter types are already the per-device ones. Deriving both here
//! leaves callers nothing to restate, and nothing to get wrong.
//!
//! ```no_run
//! use stackscan::{DType, Program, Scope, TensorType};
//! use stackscan_runtime::{Client, ClientOptions, Mesh, Plugin, plugin};
//!
//! let plugin = Plugin::load(plugin::resolve("cpu")?)?;
//! let client = Client::new(&plugin, &ClientOptions::cpu(1))?;
//! let f = Scope::new("main");
//! let x = f.param(TensorType::new(DType::F32, [2]));
//! let y = x.exp()?;
//! let program = Program::new(f.finish(&[y])?);
//! let exe = client.compile_program(&program, &Mesh::new(&client, "x", 1)?)?;
//! assert_eq!(exe.parameter_types(), [TensorType::new(DType::F32, [2])]);
//! # Ok::<(), stackscan_runtime::Error>(())
//! ```

use stackscan::Program;

use crate::compile_options::CompileOptions;
use crate::error::{Error, Result};
use crate::mesh::{Mesh, ProgramForm};
use crate::pjrt::{Client, Executable};
use crate::signature::Signature;

impl Client {
    /// Compiles a StableHLO program (MLIR text) written outside stackscan with the given
    /// options; compile a stackscan [`Program`](stackscan::Program) with
    /// [`compile_program`](Client::compile_program) instead.
    ///
    /// The per-device type of every parameter of `main` is read from the text, so that
    /// [`Executable::execute`] can check arguments. Where it cannot be read with certainty
    /// (no or several `main`s, a non-tensor or dynamic type, an unknown mesh, an open or
    /// uneven Shardy sharding, a GSPMD or missing sharding on several partitions) this
    /// returns [`Error::Signature`] instead of running unchecked.
    pub fn compile(&self, program: &str, options: &CompileOptions) -> Result<Executable> {
        let partitions = options.replicas_and_partitions().1;
        crate::compile_cache::compile(
            self,
            program,
            options,
            || Signature::read(program, partitions),
            None,
        )
    }

    /// Compiles a stackscan program for `mesh`, with no re-parse of its text.
    ///
    /// A program on a mesh axis is compiled in the partitions form over the mesh's devices,
    /// which must be as many as the axis spans; a single-device program needs a one-device
    /// mesh. Arguments are checked against `main`'s parameter types, which are per device.
    pub fn compile_program(&self, program: &Program, mesh: &Mesh) -> Result<Executable> {
        let (form, devices) = match program.axis() {
            Some(axis) => (ProgramForm::Partitions, axis.size),
            None => (ProgramForm::Replicas, 1),
        };
        if devices != mesh.size() {
            return Err(Error::MeshSize {
                program: devices,
                mesh: mesh.size(),
            });
        }
        let text = program.emit()?;
        let donated = program.aliases().iter().map(|a| a.param).collect();
        crate::compile_cache::compile(
            self,
            &text,
            &mesh.compile_options(form),
            || Ok(Signature::of_program(program)),
            Some(donated),
        )
    }
}

impl crate::Topology {
    /// Compiles a stackscan program for the first devices of this topology, as many as its
    /// mesh axis spans (all of them for a program that spans the topology), in the
    /// partitions form [`Client::compile_program`] uses. A mesh whose size does not divide
    /// the topology's device count is refused before anything compiles: a slice runs a
    /// program on whole groups of its chips.
    pub fn compile_program(&self, program: &Program) -> Result<crate::TopologyExecutable> {
        self.compile_program_with(program, |options| options)
    }

    /// [`compile_program`](Self::compile_program) with the compile options adjusted by
    /// `adjust` (a compiler option set with [`crate::CompileOptions::with_override`]).
    pub fn compile_program_with(
        &self,
        program: &Program,
        adjust: impl FnOnce(crate::CompileOptions) -> crate::CompileOptions,
    ) -> Result<crate::TopologyExecutable> {
        let available = self.devices().len();
        let devices = program.axis().map_or(1, |axis| axis.size);
        if devices == 0 || devices > available || !available.is_multiple_of(devices) {
            return Err(Error::Mesh(format!(
                "a program on {devices} devices does not divide topology `{}`, which has \
                 {available}: give a mesh of {}",
                self.name(),
                divisors(available)
            )));
        }
        let ids: Vec<i32> = self.devices()[..devices].iter().map(|d| d.id).collect();
        let options = match program.axis() {
            Some(_) => crate::CompileOptions::partitions(&ids)?,
            None => crate::CompileOptions::replicas(&ids)?,
        };
        let options = crate::workarounds::for_platform(self.platform(), options);
        self.compile(&program.emit()?, &adjust(options))
    }
}

/// The divisors of `n`, for an error message (`1, 2, 4 or 8`).
fn divisors(n: usize) -> String {
    let all: Vec<String> = (1..=n)
        .filter(|d| n.is_multiple_of(*d))
        .map(|d| d.to_string())
        .collect();
    match all.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => all.join(""),
    }
}
