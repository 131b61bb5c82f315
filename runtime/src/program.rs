//! Compiling a stackscan [`Program`]: its form and its per-device signature come from the
//! program itself, so nothing is read back from the emitted text.
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

use crate::error::{Error, Result};
use crate::mesh::{Mesh, ProgramForm};
use crate::pjrt::{Client, Executable};
use crate::signature::Signature;

impl Client {
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
