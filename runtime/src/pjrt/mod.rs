//! The safe layer over the PJRT C API: the one module of stackscan that holds `unsafe` code
//! (with [`os`]'s two system calls, a read-only file mapping and setting the environment
//! before threads start).
//!
//! Every raw handle the plugin hands out is owned by an RAII type here whose `Drop` calls the
//! matching destroy; every call goes through [`Api::get`] (which proves the function's slot
//! lies inside the plugin's table) and [`Api::check`] (which turns a `PJRT_Error*` into
//! [`Error::Pjrt`] and destroys it). Handles keep an `Arc` to what they came from, so nothing
//! outlives the loaded library.

mod api;
mod buffer;
mod client;
pub mod compile_options;
mod completion;
#[cfg(target_os = "linux")]
mod elf;
mod executable;
pub mod os;
mod topology;

pub use api::Plugin;
pub use buffer::Buffer;
pub use client::{AcceleratorOptions, Client, ClientOptions, Device, MAX_CPU_DEVICES};
pub use completion::Completion;
pub use executable::{CacheOutcome, CompiledMemoryStats, Executable, Launched};
pub use topology::{AttributeValue, Topology, TopologyDevice, TopologyExecutable};

use crate::ffi;
use stackscan::DType;

/// Looks up a function of the plugin's table, as a `Result` that names the function when the
/// plugin does not provide it.
macro_rules! pjrt_fn {
    ($api:expr, $name:ident) => {
        $api.get(
            stringify!($name),
            ::std::mem::offset_of!($crate::ffi::PJRT_Api, $name),
            |table| table.$name,
        )
    };
}
pub(crate) use pjrt_fn;

/// A zeroed argument struct with its `struct_size` set.
fn args<A: ffi::Args>() -> A {
    // SAFETY: `ffi::Args` is sealed and implemented only for `#[repr(C)]` structs of integers,
    // raw pointers, `Option<fn>` and unions of those, for which all-zero bytes are valid.
    let mut a: A = unsafe { std::mem::zeroed() };
    *a.struct_size_mut() = A::struct_size();
    a
}

/// The `PJRT_Program` of the StableHLO text in `code` (format `mlir`); it points into `code`,
/// which the caller keeps alive (and unmoved) across the call that reads it.
fn mlir_program(code: &mut [u8]) -> ffi::PJRT_Program {
    const FORMAT: &str = "mlir";
    let mut p = args::<ffi::PJRT_Program>();
    p.code = code.as_mut_ptr().cast();
    p.code_size = code.len();
    p.format = FORMAT.as_ptr().cast();
    p.format_size = FORMAT.len();
    p
}

/// The PJRT buffer type of an element type.
fn buffer_type(dtype: DType) -> ffi::PJRT_Buffer_Type {
    match dtype {
        DType::F32 => ffi::PJRT_Buffer_Type_F32,
        DType::BF16 => ffi::PJRT_Buffer_Type_BF16,
        DType::F64 => ffi::PJRT_Buffer_Type_F64,
        DType::I32 => ffi::PJRT_Buffer_Type_S32,
        DType::I64 => ffi::PJRT_Buffer_Type_S64,
        DType::Bool => ffi::PJRT_Buffer_Type_PRED,
        _ => ffi::PJRT_Buffer_Type_INVALID,
    }
}

/// The element type of a PJRT buffer type, if stackscan has one for it.
fn dtype_of(raw: ffi::PJRT_Buffer_Type) -> crate::Result<DType> {
    DType::ALL
        .into_iter()
        .find(|&d| buffer_type(d) == raw)
        .ok_or(crate::Error::UnsupportedBufferType(raw))
}

/// Copies a (pointer, length) string the plugin owns.
///
/// # Safety
/// - `ptr` is null, or valid for reads of `len` bytes for the duration of the call.
unsafe fn plugin_string(ptr: *const std::ffi::c_char, len: usize) -> String {
    if ptr.is_null() {
        return String::new();
    }
    // SAFETY: guaranteed by the caller: `ptr` is non-null and valid for `len` bytes.
    let bytes = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) };
    String::from_utf8_lossy(bytes).into_owned()
}

/// Views a (pointer, length) array the plugin owns; empty when the pointer is null.
///
/// # Safety
/// - `ptr` is null, or points to `len` initialised values of `T` that stay valid and unchanged
///   for the lifetime `'a` the caller picks.
unsafe fn plugin_slice<'a, T>(ptr: *const T, len: usize) -> &'a [T] {
    if ptr.is_null() || len == 0 {
        return &[];
    }
    // SAFETY: guaranteed by the caller.
    unsafe { std::slice::from_raw_parts(ptr, len) }
}
