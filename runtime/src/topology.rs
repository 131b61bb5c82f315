//! Compiling for devices this machine does not have: a TPU slice described by its name
//! (`tpu7x:4x4x4`), and the real TPU compiler run against it.
//!
//! libtpu describes a topology from its name and compiles a program for it through the PJRT
//! C API (`PJRT_TopologyDescription_Create`, then the client-less `PJRT_Compile`), the path
//! JAX's `jax.experimental.topologies` and MaxText's `train_compile.py` take: the memory per
//! device, the optimized program and the serialized executable are the compiler's own, with no
//! TPU attached. Loaded where it finds no TPU, libtpu first asks the cloud metadata server what
//! it runs on and retries each key for a long while; [`prepare_environment`] sets what stops it
//! (`TPU_SKIP_MDS_QUERY=1`, a worker host list of this machine alone so it does not warn about
//! one, and leave to load beside another process's libtpu), which a binary calls first thing in
//! `main`.
//!
//! ```no_run
//! use stackscan_runtime::{ClientOptions, CompileOptions, Plugin, Topology, plugin, topology};
//!
//! topology::prepare_environment()?;
//! let tpu = Plugin::load_compile_only(plugin::resolve_compile_only("tpu")?)?;
//! let slice = Topology::create(&tpu, "tpu7x:2x2x1", &ClientOptions::default())?;
//! let ids: Vec<i32> = slice.devices().iter().map(|d| d.id).collect();
//! # let program = "";
//! let exe = slice.compile(program, &CompileOptions::partitions(&ids)?)?;
//! println!("temp per device: {} bytes", exe.memory_stats()?.temp);
//! # Ok::<(), stackscan_runtime::Error>(())
//! ```

use std::path::Path;

use crate::error::Result;
use crate::pjrt::os::set_env_single_threaded;

/// The variable that keeps libtpu from asking the cloud metadata server for its topology.
pub const SKIP_METADATA_ENV: &str = "TPU_SKIP_MDS_QUERY";
/// libtpu's list of the slice's worker hosts; unset and with no metadata server, it warns on
/// every load.
pub const WORKER_HOSTNAMES_ENV: &str = "TPU_WORKER_HOSTNAMES";
/// The variable that lets libtpu load in a process while another holds its lock file
/// (`/tmp/libtpu_lockfile`), which guards the chips; a compile-only process opens none.
pub const MULTIPLE_LOAD_ENV: &str = "ALLOW_MULTIPLE_LIBTPU_LOAD";

/// The topology names libtpu takes, as forms (a generation, then the chips along each axis
/// of the slice): what an unknown name's error lists.
pub const KNOWN_FORMS: &[&str] = &[
    "tpu7x:AxBxC (e.g. tpu7x:2x2x1, 2 devices a chip)",
    "v6e:AxB (e.g. v6e:2x2)",
    "v5p:AxBxC (e.g. v5p:2x2x1)",
    "v5e:AxB (e.g. v5e:2x2)",
    "v4:AxBxC (e.g. v4:2x2x1)",
];

/// Sets the environment a compile-only TPU plugin needs ([`SKIP_METADATA_ENV`]` = 1`,
/// [`WORKER_HOSTNAMES_ENV`]` = localhost` and [`MULTIPLE_LOAD_ENV`]` = 1`, so that two
/// compiles can run at once), each unless already set, before any other thread has
/// started: setting the environment later is not sound, and is refused with
/// [`Error::EnvironmentAfterThreads`](crate::Error::EnvironmentAfterThreads). A value the
/// user set is left alone. On a TPU VM this is for compile-only runs: a job that runs on the
/// slice wants libtpu to ask the metadata server.
pub fn prepare_environment() -> Result<()> {
    let values = [
        (SKIP_METADATA_ENV, "1"),
        (WORKER_HOSTNAMES_ENV, "localhost"),
        (MULTIPLE_LOAD_ENV, "1"),
    ];
    for (key, value) in values {
        if std::env::var_os(key).is_none() {
            set_env_single_threaded(key, value)?;
        }
    }
    Ok(())
}

/// The variable missing for a compile-only load of the plugin at `path`, if any: libtpu
/// without [`SKIP_METADATA_ENV`]` = 1`.
pub(crate) fn missing_environment(path: &Path) -> Option<&'static str> {
    let is_tpu = path
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("libtpu"));
    let set = std::env::var_os(SKIP_METADATA_ENV).is_some_and(|v| v == "1");
    (is_tpu && !set).then_some(SKIP_METADATA_ENV)
}
