//! Loading a plugin, with the checks this machine's state calls for before its library is
//! mapped: the policy over [`pjrt`](crate::Plugin)'s one-load-per-file mechanism.

use std::path::Path;

use super::accelerator::check_accelerator;
use crate::error::{Error, Result};
use crate::pjrt::Plugin;

impl Plugin {
    /// Loads the PJRT plugin at `path`, checks its API version and initialises it; a file this
    /// process already loaded is not loaded again, and the same plugin is returned.
    ///
    /// A plugin for an accelerator this machine does not have (libtpu without a TPU) is
    /// refused with [`Error::NoAccelerator`] before it loads. Before the library is mapped its
    /// ELF headers are checked against the file's size, so a truncated file is an
    /// [`Error::NotAPlugin`] rather than a SIGBUS inside `dlopen`.
    pub fn load(path: impl AsRef<Path>) -> Result<Plugin> {
        Plugin::load_admitted(path.as_ref(), check_accelerator)
    }

    /// Loads the plugin at `path` to describe topologies and compile for them
    /// ([`Topology`](crate::Topology)), on a machine that need not have its devices: the
    /// check for the accelerator's device nodes that [`Plugin::load`] makes is skipped.
    ///
    /// libtpu, loaded where it finds no TPU, asks the cloud metadata server for its topology,
    /// retrying each key for a long while; the environment that
    /// [`topology::prepare_environment`](crate::topology::prepare_environment) sets stops that,
    /// and its absence is refused here with [`Error::DevicelessEnvironment`] rather than waited
    /// out. A file this process already loaded is returned as it is.
    pub fn load_compile_only(path: impl AsRef<Path>) -> Result<Plugin> {
        Plugin::load_admitted(
            path.as_ref(),
            |path| match crate::topology::missing_environment(path) {
                Some(variable) => Err(Error::DevicelessEnvironment {
                    path: path.to_owned(),
                    variable,
                }),
                None => Ok(()),
            },
        )
    }
}
