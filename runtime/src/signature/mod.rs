//! The per-device parameter types of a program's `main`, which `execute` checks arguments
//! against.
//!
//! PJRT checks argument byte sizes at best, so an `i32` array handed to an `f32` parameter of
//! the same size would run silently. A stackscan [`Program`] knows its per-device types, so
//! [`Signature::of_program`] takes them from it and reads no text. Only a foreign program is
//! read ([`Signature::read`]), by a small MLIR lexer and parser that skips comments and
//! strings, accepts the pretty and the generic op form, and divides Shardy-sharded parameters
//! into their per-device shape. Where it cannot be certain of a parameter's per-device type it
//! refuses with [`Error::Signature`]: a parameter left unchecked is how a wrong dtype or shape
//! used to run.

mod cursor;
mod function;
#[cfg(test)]
mod fuzz;
mod lexer;
mod module;
mod sharding;
#[cfg(test)]
mod tests;

use stackscan::{Program, TensorType};

use crate::error::{Error, Result};
use function::Layout;
use module::Module;

/// `main`'s parameters, as each device receives them.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Signature {
    /// Per-device type of each parameter, in order.
    pub params: Vec<TensorType>,
}

impl Signature {
    /// The signature of a stackscan program: `main`'s own parameter types are the
    /// per-device ones, whether or not it runs on a mesh.
    pub fn of_program(program: &Program) -> Signature {
        Signature {
            params: program.main().param_types(),
        }
    }

    /// Reads the signature of `main` in foreign program text compiled for `partitions`
    /// partitions (SPMD devices that each hold a shard).
    pub fn read(text: &str, partitions: i64) -> Result<Signature> {
        read_params(text, partitions.max(1))
            .map(|params| Signature { params })
            .map_err(|reason| Error::Signature { reason: reason.0 })
    }
}

fn read_params(text: &str, partitions: i64) -> Result<Vec<TensorType>, Reason> {
    let module = Module::scan(text)?;
    let main = match module.mains.as_slice() {
        [] => return Err(Reason::new("no `func.func @main` in the program")),
        [main] => main,
        many => {
            return Err(Reason::new(format!(
                "{} functions are named `main`",
                many.len()
            )));
        }
    };
    function::params(main, &module)?
        .into_iter()
        .enumerate()
        .map(|(index, param)| {
            per_device(&param.ty, &param.layout, &module, partitions).map_err(|r| r.in_param(index))
        })
        .collect()
}

/// What one device holds of a parameter of global type `ty`.
fn per_device(
    ty: &TensorType,
    layout: &Layout,
    module: &Module<'_>,
    partitions: i64,
) -> Result<TensorType, Reason> {
    match layout {
        Layout { sdy: Some(s), .. } => s.per_device(ty, module, partitions),
        // Without SPMD partitioning, every device holds whole values whatever the annotation.
        _ if partitions == 1 => Ok(ty.clone()),
        // Seen on XLA's CPU plugin: with the Shardy partitioner the runtime compiles with, an
        // argument's `mhlo.sharding` (even `{replicated}`) and a missing annotation both leave
        // its per-device shape to propagation from the body.
        Layout {
            gspmd: Some(sharding),
            ..
        } => Err(Reason::new(format!(
            "its GSPMD `mhlo.sharding = \"{sharding}\"` does not fix its per-device shape on \
             {partitions} partitions under the Shardy partitioner; annotate it with \
             `sdy.sharding`"
        ))),
        Layout { .. } => Err(Reason::new(format!(
            "it has no `sdy.sharding`, so on {partitions} partitions the partitioner chooses \
             its per-device shape"
        ))),
    }
}

/// Why a signature could not be read, before it becomes an [`Error::Signature`].
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Reason(String);

impl Reason {
    fn new(message: impl Into<String>) -> Reason {
        Reason(message.into())
    }

    /// Prefixes the parameter the reason is about.
    fn in_param(self, index: usize) -> Reason {
        self.context(&format!("parameter {index}"))
    }

    fn context(self, what: &str) -> Reason {
        Reason(format!("{what}: {}", self.0))
    }
}
