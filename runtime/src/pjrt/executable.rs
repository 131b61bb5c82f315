//! A compiled program, loaded on its devices.

use std::ffi::c_int;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use super::api::Api;
use super::client::ClientInner;
use super::compile_options::CompileOptions;
use super::completion::Completion;
use super::{Buffer, Client, Device, args, pjrt_fn, plugin_slice};
use crate::error::{Error, Result};
use crate::ffi;
use crate::signature::Signature;

mod introspect;

pub(super) use introspect::{memory_stats, optimized_program};

pub use introspect::CompiledMemoryStats;
use stackscan::TensorType;

/// The last launch id handed out in this process (see [`next_launch_id`]).
static LAUNCH_IDS: AtomicU32 = AtomicU32::new(0);

/// A launch id no other execution in this process is using.
///
/// The CPU plugin keys the rendezvous of every collective by the execution's run id, which it
/// takes from the launch id, and by the global device ids. Left at 0, two executions that run
/// at the same time in one process (two clients of two devices each, say) meet in the same
/// rendezvous, and the plugin aborts the process ("Unexpected number of participants"). A
/// fresh id per execution keeps them apart. Ids stay positive and wrap long before `c_int`
/// would overflow; two executions 2^31 launches apart never overlap.
fn next_launch_id() -> c_int {
    let n = LAUNCH_IDS.fetch_add(1, Ordering::Relaxed);
    // `% c_int::MAX` keeps the value in 0..c_int::MAX, so it fits and `+ 1` cannot overflow.
    (n % c_int::MAX as u32) as c_int + 1
}

impl std::fmt::Display for CacheOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CacheOutcome::Off => f.write_str("compile cache off"),
            CacheOutcome::Hit => f.write_str("loaded from the compile cache, nothing compiled"),
            CacheOutcome::Miss => f.write_str("not in the compile cache; compiled and stored"),
            CacheOutcome::Replaced(why) => {
                write!(
                    f,
                    "compile cache entry not trusted ({why}); compiled and replaced"
                )
            }
            CacheOutcome::NotStored(why) => write!(f, "compiled; not stored in the cache: {why}"),
        }
    }
}

/// A program compiled for a set of devices.
pub struct Executable {
    client: Arc<ClientInner>,
    loaded: *mut ffi::PJRT_LoadedExecutable,
    executable: *mut ffi::PJRT_Executable,
    devices: Vec<Device>,
    num_outputs: usize,
    /// What `execute` checks arguments against; every executable has one.
    signature: Signature,
    /// The parameters the program takes over (input/output aliasing), where the program
    /// says; `None` for foreign text, whose arguments are all asked about after a run.
    donated: Option<Vec<usize>>,
    /// How the compile cache served this executable.
    cache: CacheOutcome,
    /// Each device's output types, as the plugin reported them for the first launch; later
    /// launches take them from here instead of asking two questions per output again.
    learned_output_types: OnceLock<Vec<Vec<TensorType>>>,
}

/// An execution the plugin has queued ([`Executable::launch`]).
///
/// The outputs can be used at once: passed to the next launch (the plugin orders it after
/// this one) or read ([`Buffer::to_host`] waits until the value is there).
#[derive(Debug)]
pub struct Launched {
    /// One output list per device, in the order of [`Executable::devices`].
    pub outputs: Vec<Vec<Buffer>>,
    /// When each device is done; [`Completion::wait`] reports a failed execution.
    pub completion: Completion,
    /// When the launch call returned: from then on the work is the plugin's.
    pub queued: Instant,
}

/// How the persistent compile cache served an executable (see
/// [`CompileCache`](crate::CompileCache)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CacheOutcome {
    /// No cache: compiled.
    Off,
    /// Loaded from the cache: nothing was compiled.
    Hit,
    /// Not in the cache: compiled and stored.
    Miss,
    /// An entry was there but could not be trusted (the reason says why: truncated, checksum,
    /// another key, the plugin refused it); compiled and the entry replaced.
    Replaced(String),
    /// Compiled, but the entry could not be written (the reason says why); the next compile
    /// compiles again.
    NotStored(String),
}

// SAFETY: PJRT executables may be executed and destroyed from any thread.
unsafe impl Send for Executable {}
// SAFETY: `&Executable` only issues thread-safe PJRT calls and reads immutable metadata.
unsafe impl Sync for Executable {}

impl std::fmt::Debug for Executable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executable")
            .field("devices", &self.devices.len())
            .field("num_outputs", &self.num_outputs)
            .finish()
    }
}

impl Drop for Executable {
    fn drop(&mut self) {
        let api = &self.client.api;
        if !self.executable.is_null()
            && let Ok(f) = pjrt_fn!(api, PJRT_Executable_Destroy)
        {
            let mut a = args::<ffi::PJRT_Executable_Destroy_Args>();
            a.executable = self.executable;
            // SAFETY: the executable view is ours (from GetExecutable) and not used after this.
            let err = unsafe { f(&mut a) };
            let _ = api.check("PJRT_Executable_Destroy", err);
        }
        if let Ok(f) = pjrt_fn!(api, PJRT_LoadedExecutable_Destroy) {
            let mut a = args::<ffi::PJRT_LoadedExecutable_Destroy_Args>();
            a.executable = self.loaded;
            // SAFETY: the loaded executable is ours and not used after this.
            let err = unsafe { f(&mut a) };
            let _ = api.check("PJRT_LoadedExecutable_Destroy", err);
        }
    }
}

impl Executable {
    /// Compiles `program` and takes its signature from `signature`, called once the plugin has
    /// accepted the program, so the plugin's diagnostics for malformed text come first.
    /// `donated` lists the parameters the program takes over, where known.
    pub(crate) fn compile(
        client: &Client,
        program: &str,
        options: &CompileOptions,
        signature: impl FnOnce() -> Result<Signature>,
        donated: Option<Vec<usize>>,
    ) -> Result<Executable> {
        let inner = &client.inner;
        let api = &inner.api;
        let options_bytes = options.encode();
        let mut code = program.as_bytes().to_vec();
        let p = super::mlir_program(&mut code);
        let f = pjrt_fn!(api, PJRT_Client_Compile)?;
        let mut a = args::<ffi::PJRT_Client_Compile_Args>();
        a.client = inner.raw;
        a.program = &p;
        a.compile_options = options_bytes.as_ptr().cast();
        a.compile_options_size = options_bytes.len();
        // SAFETY: the program, its code and format strings and the serialized options all
        // outlive the call; `inner.raw` is a live client.
        let err = unsafe { f(&mut a) };
        api.check("PJRT_Client_Compile", err)?;
        Executable::from_loaded(client, a.executable, signature, donated)
    }

    /// Loads an executable [`serialize`](Self::serialize) wrote, with the plugin and
    /// options it was compiled by; the caller vouches for that (the compile cache keys its
    /// entries by both). Takes the signature and donated parameters as `compile` does.
    pub(crate) fn deserialize(
        client: &Client,
        bytes: &[u8],
        signature: impl FnOnce() -> Result<Signature>,
        donated: Option<Vec<usize>>,
    ) -> Result<Executable> {
        let inner = &client.inner;
        let api = &inner.api;
        let f = pjrt_fn!(api, PJRT_Executable_DeserializeAndLoad)?;
        let mut a = args::<ffi::PJRT_Executable_DeserializeAndLoad_Args>();
        a.client = inner.raw;
        a.serialized_executable = bytes.as_ptr().cast();
        a.serialized_executable_size = bytes.len();
        // SAFETY: `bytes` outlives the call and holds `serialized_executable_size` bytes;
        // no overriding options are given (null, size 0); `inner.raw` is a live client.
        let err = unsafe { f(&mut a) };
        api.check("PJRT_Executable_DeserializeAndLoad", err)?;
        Executable::from_loaded(client, a.loaded_executable, signature, donated)
    }

    /// The plugin's serialized form of the compiled program, which
    /// `PJRT_Executable_DeserializeAndLoad` of the same plugin build loads without compiling.
    pub fn serialize(&self) -> Result<Vec<u8>> {
        // SAFETY: `self.executable` is live while `self` is.
        unsafe { serialize(&self.client.api, self.executable) }
    }

    /// Owns a loaded executable the plugin returned and reads what `execute` needs from it.
    fn from_loaded(
        client: &Client,
        loaded: *mut ffi::PJRT_LoadedExecutable,
        signature: impl FnOnce() -> Result<Signature>,
        donated: Option<Vec<usize>>,
    ) -> Result<Executable> {
        let inner = &client.inner;
        let api = &inner.api;
        if loaded.is_null() {
            return Err(Error::Program(
                "the plugin returned a null executable".into(),
            ));
        }
        let mut exe = Executable {
            client: Arc::clone(inner),
            loaded,
            executable: std::ptr::null_mut(),
            devices: Vec::new(),
            num_outputs: 0,
            // Replaced below; `exe` owns the loaded executable first so an error frees it.
            signature: Signature { params: Vec::new() },
            donated,
            cache: CacheOutcome::Off,
            learned_output_types: OnceLock::new(),
        };

        let f = pjrt_fn!(api, PJRT_LoadedExecutable_GetExecutable)?;
        let mut a = args::<ffi::PJRT_LoadedExecutable_GetExecutable_Args>();
        a.loaded_executable = exe.loaded;
        // SAFETY: `loaded` is the live executable just compiled.
        let err = unsafe { f(&mut a) };
        api.check("PJRT_LoadedExecutable_GetExecutable", err)?;
        exe.executable = a.executable;

        let f = pjrt_fn!(api, PJRT_Executable_NumOutputs)?;
        let mut a = args::<ffi::PJRT_Executable_NumOutputs_Args>();
        a.executable = exe.executable;
        // SAFETY: `executable` is live.
        let err = unsafe { f(&mut a) };
        api.check("PJRT_Executable_NumOutputs", err)?;
        exe.num_outputs = a.num_outputs;

        let f = pjrt_fn!(api, PJRT_LoadedExecutable_AddressableDevices)?;
        let mut a = args::<ffi::PJRT_LoadedExecutable_AddressableDevices_Args>();
        a.executable = exe.loaded;
        // SAFETY: `loaded` is live.
        let err = unsafe { f(&mut a) };
        api.check("PJRT_LoadedExecutable_AddressableDevices", err)?;
        // SAFETY: the device array is owned by the executable, alive for this call.
        let raw = unsafe { plugin_slice(a.addressable_devices, a.num_addressable_devices) };
        exe.devices = raw
            .iter()
            .map(|d| {
                inner
                    .raw_devices
                    .iter()
                    .position(|c| c == d)
                    .map(|i| inner.devices[i].clone())
                    .ok_or_else(|| {
                        Error::Program("the executable runs on a device the client lacks".into())
                    })
            })
            .collect::<Result<_>>()?;
        exe.signature = signature()?;
        Ok(exe)
    }

    /// The devices the program runs on; argument list `i` of [`execute`](Self::execute) goes to
    /// `devices()[i]`, and so does output list `i`.
    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// How the compile cache served this executable.
    pub fn cache_outcome(&self) -> &CacheOutcome {
        &self.cache
    }

    pub(crate) fn set_cache_outcome(&mut self, outcome: CacheOutcome) {
        self.cache = outcome;
    }

    /// The parameters the program takes over (their buffers are [donated](Buffer::is_donated)
    /// once it has run), when the program declared them; `None` for foreign text.
    pub fn donated_parameters(&self) -> Option<&[usize]> {
        self.donated.as_deref()
    }

    /// Outputs per device.
    pub fn num_outputs(&self) -> usize {
        self.num_outputs
    }

    /// The per-device type of each parameter, which [`execute`](Self::execute) checks every
    /// argument against.
    pub fn parameter_types(&self) -> &[TensorType] {
        &self.signature.params
    }

    /// Runs the program on all its devices: one argument list per device, one output list
    /// per device back, in the order of [`devices`](Self::devices). Waits until every device
    /// is done; [`launch`](Self::launch) returns before.
    ///
    /// The arguments of donated parameters ([`donated_parameters`](Self::donated_parameters))
    /// are taken over: afterwards they are [donated](Buffer::is_donated) and the outputs hold
    /// the new values. A buffer passed in two places of one list is never donated (the plugin
    /// is told so), so it stays valid.
    pub fn execute<'b, L: AsRef<[&'b Buffer]>>(
        &self,
        argument_lists: &[L],
    ) -> Result<Vec<Vec<Buffer>>> {
        let mut launched = self.launch(argument_lists)?;
        launched.completion.wait()?;
        Ok(launched.outputs)
    }

    /// Queues the program on all its devices and returns without waiting for it, as JAX's
    /// dispatch does: the host can prepare the next step while this one runs. Arguments are
    /// checked and donated as for [`execute`](Self::execute); an argument may be the output of
    /// a launch still running (the plugin starts this one once its inputs are there).
    pub fn launch<'b, L: AsRef<[&'b Buffer]>>(&self, argument_lists: &[L]) -> Result<Launched> {
        self.check_arguments(argument_lists)?;
        let api = &self.client.api;
        let num_devices = self.devices.len();
        let num_args = argument_lists.first().map_or(0, |l| l.as_ref().len());
        let raw_args: Vec<Vec<*mut ffi::PJRT_Buffer>> = argument_lists
            .iter()
            .map(|l| l.as_ref().iter().map(|b| b.raw).collect())
            .collect();
        let arg_ptrs: Vec<*const *mut ffi::PJRT_Buffer> =
            raw_args.iter().map(|l| l.as_ptr()).collect();
        let mut outputs: Vec<Vec<*mut ffi::PJRT_Buffer>> =
            vec![vec![std::ptr::null_mut(); self.num_outputs]; num_devices];
        let output_ptrs: Vec<*mut *mut ffi::PJRT_Buffer> =
            outputs.iter_mut().map(|l| l.as_mut_ptr()).collect();
        let mut events: Vec<*mut ffi::PJRT_Event> = vec![std::ptr::null_mut(); num_devices];
        let keep = repeated_arguments(&raw_args);
        let mut options = args::<ffi::PJRT_ExecuteOptions>();
        options.non_donatable_input_indices = keep.as_ptr();
        options.num_non_donatable_input_indices = keep.len();
        options.launch_id = next_launch_id();

        let f = pjrt_fn!(api, PJRT_LoadedExecutable_Execute)?;
        let mut a = args::<ffi::PJRT_LoadedExecutable_Execute_Args>();
        a.executable = self.loaded;
        a.options = &mut options;
        a.argument_lists = arg_ptrs.as_ptr();
        a.num_devices = num_devices;
        a.num_args = num_args;
        a.output_lists = output_ptrs.as_ptr();
        a.device_complete_events = events.as_mut_ptr();
        // SAFETY: `argument_lists` is `num_devices` lists of `num_args` live buffers of this
        // client (checked above); `output_lists` is `num_devices` arrays of `num_outputs` slots
        // the plugin fills; `events` has `num_devices` slots; `keep` holds
        // `num_non_donatable_input_indices` indices; all outlive the call.
        let err = unsafe { f(&mut a) };
        let queued = Instant::now();
        // Own the events first: whatever fails below, they are awaited and destroyed.
        let completion = Completion::new(&self.client, events);
        // Whatever the outcome, a donated argument may be gone now.
        self.note_donations(argument_lists);
        api.check("PJRT_LoadedExecutable_Execute", err)?;

        // Own every output before anything can fail, so none leaks.
        let known = self.learned_output_types.get();
        let owned: Vec<Vec<Result<Buffer>>> = outputs
            .iter()
            .enumerate()
            .map(|(d, l)| {
                l.iter()
                    .enumerate()
                    .map(|(i, &raw)| {
                        if raw.is_null() {
                            return Err(Error::Program("the plugin returned a null output".into()));
                        }
                        match known.and_then(|k| k.get(d)).and_then(|k| k.get(i)) {
                            Some(ty) => Ok(Buffer::from_raw(&self.client, raw, ty.clone())),
                            None => Buffer::from_output(&self.client, raw),
                        }
                    })
                    .collect()
            })
            .collect();
        let outputs = owned
            .into_iter()
            .map(|l| l.into_iter().collect::<Result<Vec<_>>>())
            .collect::<Result<Vec<_>>>()?;
        if known.is_none() {
            let types = outputs
                .iter()
                .map(|l| l.iter().map(|b| b.tensor_type().clone()).collect())
                .collect();
            // Another thread's first launch may have set it: the same types.
            let _ = self.learned_output_types.set(types);
        }
        Ok(Launched {
            outputs,
            completion,
            queued,
        })
    }

    /// Marks the arguments the program took over: those of donated parameters when the
    /// program says which (a stackscan [`Program`](stackscan::Program)), else all of them,
    /// as the plugin reports.
    fn note_donations<'b, L: AsRef<[&'b Buffer]>>(&self, lists: &[L]) {
        for list in lists {
            let list = list.as_ref();
            match &self.donated {
                Some(params) => params
                    .iter()
                    .filter_map(|&p| list.get(p))
                    .for_each(|b| b.note_donation()),
                None => list.iter().for_each(|b| b.note_donation()),
            }
        }
    }

    fn check_arguments<'b, L: AsRef<[&'b Buffer]>>(&self, lists: &[L]) -> Result<()> {
        if lists.len() != self.devices.len() {
            return Err(Error::DeviceLists {
                expected: self.devices.len(),
                actual: lists.len(),
            });
        }
        for (device, list) in lists.iter().enumerate() {
            let list = list.as_ref();
            let params = &self.signature.params;
            if list.len() != params.len() {
                return Err(Error::ArgumentCount {
                    device,
                    expected: params.len(),
                    actual: list.len(),
                });
            }
            for (index, (buffer, expected)) in list.iter().zip(params).enumerate() {
                if !Arc::ptr_eq(&buffer.client, &self.client) {
                    return Err(Error::ForeignBuffer { device, index });
                }
                buffer.check_live(Some((device, index)))?;
                if buffer.tensor_type() != expected {
                    return Err(Error::ArgumentType {
                        device,
                        index,
                        expected: expected.clone(),
                        actual: buffer.tensor_type().clone(),
                    });
                }
            }
        }
        Ok(())
    }
}

/// Argument positions that hold a buffer passed more than once in one device's list: the
/// plugin must not donate those (it would hand one buffer to a result while another argument
/// still reads it), so they are passed as `non_donatable_input_indices`.
fn repeated_arguments(lists: &[Vec<*mut ffi::PJRT_Buffer>]) -> Vec<i64> {
    let mut keep: Vec<i64> = Vec::new();
    for list in lists {
        let mut sorted: Vec<(usize, usize)> = list
            .iter()
            .enumerate()
            .map(|(i, &b)| (b as usize, i))
            .collect();
        sorted.sort_unstable();
        for run in sorted
            .chunk_by(|a, b| a.0 == b.0)
            .filter(|run| run.len() > 1)
        {
            keep.extend(run.iter().map(|&(_, i)| i as i64));
        }
    }
    keep.sort_unstable();
    keep.dedup();
    keep
}

/// [`Executable::serialize`] of a live executable of `api`'s plugin, loaded or not.
///
/// # Safety
/// - `executable` is a live executable of `api`'s plugin.
pub(super) unsafe fn serialize(
    api: &Api,
    executable: *mut ffi::PJRT_Executable,
) -> Result<Vec<u8>> {
    let f = pjrt_fn!(api, PJRT_Executable_Serialize)?;
    let mut a = args::<ffi::PJRT_Executable_Serialize_Args>();
    a.executable = executable;
    // SAFETY: `executable` is live; the plugin fills the out fields.
    let err = unsafe { f(&mut a) };
    api.check("PJRT_Executable_Serialize", err)?;
    // SAFETY: the bytes are backed by `serialized_executable`, alive until its deleter
    // runs below.
    let bytes =
        unsafe { plugin_slice(a.serialized_bytes.cast::<u8>(), a.serialized_bytes_size) }.to_vec();
    if let Some(delete) = a.serialized_executable_deleter {
        // SAFETY: the deleter the plugin gave for this serialization, called once, after
        // the last read of its bytes.
        unsafe { delete(a.serialized_executable) };
    }
    Ok(bytes)
}
