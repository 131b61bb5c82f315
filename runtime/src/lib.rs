//! stackscan-runtime: runs StableHLO programs on PJRT plugins (XLA's CPU plugin here, libtpu
//! on TPU, the CUDA plugin on GPU) through a binding of our own to the PJRT C API.
//!
//! ```no_run
//! use stackscan_runtime::{Client, ClientOptions, CompileOptions, Plugin, plugin};
//!
//! let plugin = Plugin::load(plugin::resolve("cpu")?)?;
//! let client = Client::new(&plugin, &ClientOptions::cpu(1))?;
//! let program = r#"
//! func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
//!   %y = stablehlo.add %x, %x : tensor<2xf32>
//!   return %y : tensor<2xf32>
//! }"#;
//! let exe = client.compile(program, &CompileOptions::default())?;
//! let x = client.buffer(&[1.0f32, 2.0], &[2], &client.devices()[0])?;
//! let out = exe.execute(&[[&x]])?;
//! assert_eq!(out[0][0].to_host::<f32>()?, vec![2.0, 4.0]);
//! # Ok::<(), stackscan_runtime::Error>(())
//! ```

pub mod backend;
pub mod checkpoint;
pub mod compile_cache;
mod element;
mod error;
mod ffi;
pub mod generate;
pub mod hf;
pub mod hlo;
pub mod mesh;
#[expect(
    unsafe_code,
    reason = "the PJRT C API binding: the one module of stackscan that calls foreign code"
)]
mod pjrt;
pub mod plugin;
mod program;
pub mod shard;
mod signature;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tokens;
pub mod topology;
pub mod train;
mod workarounds;
pub mod xla_log;

pub use compile_cache::CompileCache;
pub use compile_options::{CompileOptions, OverrideValue};
pub use element::Element;
pub use error::{Error, ErrorCode, Result};
pub use mesh::{Mesh, ProgramForm};
pub use pjrt::compile_options;
pub use pjrt::{
    AcceleratorOptions, Buffer, CacheOutcome, Client, ClientOptions, CompiledMemoryStats,
    Completion, Device, Executable, Launched, MAX_CPU_DEVICES, Plugin,
};
pub use pjrt::{AttributeValue, Topology, TopologyDevice, TopologyExecutable};
pub use stackscan::{DType, TensorType};
pub use workarounds::allow_gather_decomposition;
