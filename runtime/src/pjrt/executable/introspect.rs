//! What the plugin says about a compiled program: its planned memory, its outputs' types and
//! the optimized program itself. Split from the parent only to keep files short; a child
//! module, so it reads the executable's handle directly.

use super::Executable;
use crate::error::Result;
use crate::ffi;
use crate::pjrt::api::Api;
use crate::pjrt::{args, dtype_of, pjrt_fn, plugin_slice};
use stackscan::TensorType;

/// What XLA reports about the memory a compiled program needs, per device, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompiledMemoryStats {
    /// Generated code.
    pub generated_code: i64,
    /// Arguments.
    pub arguments: i64,
    /// Outputs.
    pub outputs: i64,
    /// Bytes of arguments reused for outputs.
    pub alias: i64,
    /// Temporaries (activations, gathered weights, loop buffers).
    pub temp: i64,
    /// Peak device memory, where the plugin reports it (0 otherwise).
    pub peak: i64,
    /// Host-side temporaries.
    pub host_temp: i64,
}

impl CompiledMemoryStats {
    /// Device bytes the program holds while it runs: arguments, outputs and temporaries, with
    /// the aliased (donated) bytes counted once rather than as an argument and again as an
    /// output.
    pub fn footprint(&self) -> i64 {
        self.arguments + self.outputs - self.alias + self.temp
    }
}

impl Executable {
    /// The program XLA compiled, after its optimization passes: the plugin's serialized
    /// module and the format it names (`hlo_with_config` or `hlo`; see
    /// [`crate::hlo::OptimizedModule`], which reads it). What fused, what was rematerialised
    /// and which buffers the collectives move are read here, not guessed from the program
    /// stackscan emitted.
    pub fn optimized_program(&self) -> Result<(String, Vec<u8>)> {
        // SAFETY: `self.executable` is live while `self` is.
        unsafe { optimized_program(&self.client.api, self.executable) }
    }

    /// The memory XLA planned for one device of this program.
    pub fn memory_stats(&self) -> Result<CompiledMemoryStats> {
        // SAFETY: `self.executable` is live while `self` is.
        unsafe { memory_stats(&self.client.api, self.executable) }
    }

    /// Element type and dimensions of each output (per device).
    pub fn output_types(&self) -> Result<Vec<TensorType>> {
        let api = &self.client.api;
        let f = pjrt_fn!(api, PJRT_Executable_OutputElementTypes)?;
        let mut a = args::<ffi::PJRT_Executable_OutputElementTypes_Args>();
        a.executable = self.executable;
        // SAFETY: `executable` is live.
        let err = unsafe { f(&mut a) };
        api.check("PJRT_Executable_OutputElementTypes", err)?;
        // SAFETY: the types array is owned by the executable, alive for this call.
        let types = unsafe { plugin_slice(a.output_types, a.num_output_types) }.to_vec();

        let f = pjrt_fn!(api, PJRT_Executable_OutputDimensions)?;
        let mut a = args::<ffi::PJRT_Executable_OutputDimensions_Args>();
        a.executable = self.executable;
        a.num_outputs = types.len();
        // SAFETY: `executable` is live; `num_outputs` is the count the plugin reported.
        let err = unsafe { f(&mut a) };
        api.check("PJRT_Executable_OutputDimensions", err)?;
        // SAFETY: `dim_sizes` has `num_outputs` entries, owned by the executable.
        let ranks = unsafe { plugin_slice(a.dim_sizes, types.len()) };
        let total = ranks.iter().sum();
        // SAFETY: `dims` holds the concatenated dimensions, `sum(ranks)` values.
        let dims = unsafe { plugin_slice(a.dims, total) };
        let mut at = 0;
        types
            .iter()
            .zip(ranks)
            .map(|(&t, &rank)| {
                let ty = TensorType::new(dtype_of(t)?, dims[at..at + rank].to_vec());
                at += rank;
                Ok(ty)
            })
            .collect()
    }
}

/// [`Executable::optimized_program`] of a live executable of `api`'s plugin, loaded or not.
///
/// # Safety
/// - `executable` is a live executable of `api`'s plugin.
pub(in crate::pjrt) unsafe fn optimized_program(
    api: &Api,
    executable: *mut ffi::PJRT_Executable,
) -> Result<(String, Vec<u8>)> {
    let f = pjrt_fn!(api, PJRT_Executable_OptimizedProgram)?;
    let mut program = args::<ffi::PJRT_Program>();
    let mut a = args::<ffi::PJRT_Executable_OptimizedProgram_Args>();
    a.executable = executable;
    a.program = &mut program;
    // SAFETY: the caller's `executable` is live and `program` outlives the call; with a null `code`
    // the plugin only writes `code_size` and the format fields.
    let err = unsafe { f(&mut a) };
    api.check("PJRT_Executable_OptimizedProgram", err)?;
    let mut code = vec![0u8; program.code_size];
    program.code = code.as_mut_ptr().cast();
    let mut a = args::<ffi::PJRT_Executable_OptimizedProgram_Args>();
    a.executable = executable;
    a.program = &mut program;
    // SAFETY: `code` holds `code_size` writable bytes, the size the plugin asked for, and
    // outlives the call.
    let err = unsafe { f(&mut a) };
    api.check("PJRT_Executable_OptimizedProgram", err)?;
    code.truncate(program.code_size);
    // SAFETY: the plugin set `format` to a string it owns for the executable's life.
    let format = unsafe { crate::pjrt::plugin_string(program.format, program.format_size) };
    Ok((format, code))
}

/// [`Executable::memory_stats`] of a live executable of `api`'s plugin, loaded or not.
///
/// # Safety
/// - `executable` is a live executable of `api`'s plugin.
pub(in crate::pjrt) unsafe fn memory_stats(
    api: &Api,
    executable: *mut ffi::PJRT_Executable,
) -> Result<CompiledMemoryStats> {
    let f = pjrt_fn!(api, PJRT_Executable_GetCompiledMemoryStats)?;
    let mut a = args::<ffi::PJRT_Executable_GetCompiledMemoryStats_Args>();
    a.executable = executable;
    // SAFETY: `executable` is live.
    let err = unsafe { f(&mut a) };
    api.check("PJRT_Executable_GetCompiledMemoryStats", err)?;
    Ok(CompiledMemoryStats {
        generated_code: a.generated_code_size_in_bytes,
        arguments: a.argument_size_in_bytes,
        outputs: a.output_size_in_bytes,
        alias: a.alias_size_in_bytes,
        temp: a.temp_size_in_bytes,
        peak: a.peak_memory_in_bytes,
        host_temp: a.host_temp_size_in_bytes,
    })
}
