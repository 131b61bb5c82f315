//! A loaded plugin: the shared library and the function table `GetPjrtApi` returned.
//!
//! A plugin, once loaded, stays loaded until the process exits, and each file is loaded once.
//! XLA registers process-exit handlers and thread-local destructors that point into the
//! library: unloading it (`dlclose` when the last handle drops) leaves those pointing into
//! unmapped code, so the process dies with SIGSEGV at exit, and loading the same file again
//! initialises XLA's globals twice (an abort with a double free). Loading is therefore a
//! process-wide registry keyed by the file's canonical path, and the library handle is never
//! closed.

use std::mem::ManuallyDrop;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use libloading::Library;

use super::{args, plugin_string};
use crate::error::{Error, ErrorCode, Result};
use crate::ffi;

/// The major API version this binding is written against (`PJRT_API_MAJOR`).
pub(crate) const API_MAJOR: i32 = 0;

/// A loaded PJRT plugin. Cheap to clone; the library stays loaded for the rest of the process
/// (see the module documentation for why it is never unloaded).
#[derive(Clone, Debug)]
pub struct Plugin {
    pub(crate) api: Arc<Api>,
    /// XLA `DebugOptions` every client made from this handle starts with
    /// ([`Plugin::with_xla_options`]).
    pub(crate) xla_options: Arc<[(String, super::compile_options::OverrideValue)]>,
}

/// The library and its table. Dropped last: every handle holds an `Arc` to it.
pub(crate) struct Api {
    table: *const ffi::PJRT_Api,
    table_size: usize,
    pub(crate) major: i32,
    pub(crate) minor: i32,
    path: PathBuf,
    /// Never dropped: unloading an XLA plugin is not safe (module documentation).
    _library: ManuallyDrop<Library>,
}

// SAFETY: the PJRT C API is thread-safe: its functions may be called from any thread, and the
// table itself is immutable after `GetPjrtApi` returns.
unsafe impl Send for Api {}
// SAFETY: as above; `Api` exposes no interior mutability of its own.
unsafe impl Sync for Api {}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("path", &self.path)
            .field("version", &(self.major, self.minor))
            .field("table_size", &self.table_size)
            .finish()
    }
}

/// Plugins loaded by this process, by canonical path. Entries are never removed.
static LOADED: Mutex<Vec<(PathBuf, Plugin)>> = Mutex::new(Vec::new());

impl Plugin {
    /// Loads the PJRT plugin at `path` once per process, checks its API version and
    /// initialises it; a file this process already loaded is not loaded again, and the same
    /// plugin is returned. `admit(path)` runs first on a file not yet loaded: the caller's
    /// policy ([`Plugin::load`](crate::Plugin::load) checks that the machine has the plugin's
    /// accelerator, [`Plugin::load_compile_only`](crate::Plugin::load_compile_only) the
    /// environment a deviceless compile needs).
    ///
    /// Before the library is mapped its ELF headers are checked against the file's size, so
    /// a truncated file is an [`Error::NotAPlugin`] rather than a SIGBUS inside `dlopen`.
    pub(crate) fn load_admitted(
        path: &Path,
        admit: impl FnOnce(&Path) -> Result<()>,
    ) -> Result<Plugin> {
        let path = path.to_path_buf();
        if !path.is_file() {
            return Err(Error::PluginNotFound { path });
        }
        let key = std::fs::canonicalize(&path)
            .map_err(|e| Error::io(format!("resolving `{}`", path.display()), e))?;
        // Held across the load, so two threads loading one file initialise it once.
        let mut loaded = LOADED.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, plugin)) = loaded.iter().find(|(k, _)| *k == key) {
            return Ok(plugin.clone());
        }
        #[cfg(target_os = "linux")]
        super::elf::check_shared_object(&path).map_err(|e| Error::NotAPlugin {
            path: path.clone(),
            reason: e.0,
        })?;
        admit(&path)?;
        let plugin = Plugin::open(&path)?;
        loaded.push((key, plugin.clone()));
        Ok(plugin)
    }

    /// Maps and initialises the library at `path`, whose ELF headers were checked against
    /// its size; called once per file by [`Plugin::load_admitted`].
    fn open(path: &Path) -> Result<Plugin> {
        let path = path.to_path_buf();
        let not_a_plugin = |reason: String| Error::NotAPlugin {
            path: path.clone(),
            reason,
        };
        // SAFETY: loading a shared library runs its initialisers. The caller named this file as
        // a PJRT plugin; plugins are ordinary shared objects whose initialisers have no
        // preconditions on our side. Its headers were checked against the file's size by
        // `load_admitted`, this function's only caller, so mapping it does not reach past the
        // end of the file.
        let library = unsafe { Library::new(&path) }
            .map(ManuallyDrop::new)
            .map_err(|e| not_a_plugin(with_sources(&e)))?;
        // SAFETY: `GetPjrtApi` is declared by pjrt_c_api.h as `const PJRT_Api* GetPjrtApi()`,
        // which is the type we read the symbol as.
        let get_api = unsafe { library.get::<ffi::GetPjrtApiFn>(ffi::GET_PJRT_API_SYMBOL) }
            .map_err(|_| not_a_plugin("it exports no `GetPjrtApi` symbol".into()))?;
        // SAFETY: the symbol has the declared signature (above) and takes no arguments.
        let table = unsafe { get_api() };
        if table.is_null() {
            return Err(not_a_plugin("`GetPjrtApi` returned null".into()));
        }
        // SAFETY: a non-null table starts with `struct_size` and `extension_start` in every API
        // version; we read only those two words before trusting `struct_size`.
        let table_size = unsafe { std::ptr::addr_of!((*table).struct_size).read() };
        let version_end = std::mem::offset_of!(ffi::PJRT_Api, pjrt_api_version)
            + std::mem::size_of::<ffi::PJRT_Api_Version>();
        if table_size < version_end {
            return Err(not_a_plugin(format!(
                "its function table is {table_size} bytes, too small to hold a version"
            )));
        }
        // SAFETY: `table_size` covers the version struct (checked just above).
        let version = unsafe { std::ptr::addr_of!((*table).pjrt_api_version).read() };
        let api = Api {
            table,
            table_size,
            major: version.major_version,
            minor: version.minor_version,
            path: path.clone(),
            _library: library,
        };
        if api.major != API_MAJOR {
            return Err(Error::IncompatibleApi {
                path,
                major: api.major,
                minor: api.minor,
                expected_major: API_MAJOR,
            });
        }
        let initialize = super::pjrt_fn!(api, PJRT_Plugin_Initialize)?;
        let mut init = args::<ffi::PJRT_Plugin_Initialize_Args>();
        // SAFETY: `init` is a zeroed struct with its size set, as the call expects.
        let err = unsafe { initialize(&mut init) };
        api.check("PJRT_Plugin_Initialize", err)?;
        Ok(Plugin {
            api: Arc::new(api),
            xla_options: Arc::from([]),
        })
    }

    /// The plugin's API version, `(major, minor)`.
    pub fn api_version(&self) -> (i32, i32) {
        (self.api.major, self.api.minor)
    }

    /// This handle with XLA `DebugOptions` that every client made from it starts with
    /// ([`Client::with_xla_options`](crate::Client::with_xla_options) replaces them for one
    /// client). The library stays the one loaded; other handles of it keep their own
    /// options. What a test support or an application sets once for all its clients.
    pub fn with_xla_options(
        mut self,
        options: Vec<(String, super::compile_options::OverrideValue)>,
    ) -> Plugin {
        self.xla_options = Arc::from(options);
        self
    }

    /// The XLA options [`with_xla_options`](Self::with_xla_options) set.
    pub fn xla_options(&self) -> &[(String, super::compile_options::OverrideValue)] {
        &self.xla_options
    }

    /// The file the plugin was loaded from.
    pub fn path(&self) -> &Path {
        &self.api.path
    }
}

/// An error's message followed by those of its sources: libloading's own message is only
/// "dlopen failed", and the loader's reason ("file too short", a missing dependency) is its
/// source.
fn with_sources(e: &dyn std::error::Error) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        message.push_str(": ");
        message.push_str(&s.to_string());
        source = s.source();
    }
    message
}

impl Api {
    /// The file the plugin was loaded from.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The plugin's API version, `(major, minor)`.
    pub(crate) fn version(&self) -> (i32, i32) {
        (self.major, self.minor)
    }

    /// The function in the slot at `offset` of the table, or [`Error::Unavailable`] when the
    /// plugin's table ends before that slot or leaves it empty.
    pub(crate) fn get<F: Copy>(
        &self,
        call: &'static str,
        offset: usize,
        slot: impl FnOnce(&ffi::PJRT_Api) -> Option<F>,
    ) -> Result<F> {
        let unavailable = || Error::Unavailable {
            call,
            major: self.major,
            minor: self.minor,
            table_size: self.table_size,
        };
        if offset + std::mem::size_of::<Option<F>>() > self.table_size {
            return Err(unavailable());
        }
        let whole = std::mem::size_of::<ffi::PJRT_Api>();
        let f = if self.table_size >= whole {
            // SAFETY: the plugin's table is at least as large as our struct, so a reference to
            // the whole struct stays inside memory the plugin initialised.
            slot(unsafe { &*self.table })
        } else {
            // The table is shorter than our struct: copy the prefix it has into a zeroed
            // struct and read the slot from the copy, so no reference reaches past its end.
            let mut copy = std::mem::MaybeUninit::<ffi::PJRT_Api>::zeroed();
            // SAFETY: the source is valid for `table_size` bytes (the plugin says so), the
            // destination is a distinct local of size `whole > table_size`.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.table.cast::<u8>(),
                    copy.as_mut_ptr().cast::<u8>(),
                    self.table_size,
                );
            }
            // SAFETY: all-zero bytes are valid for every field of `PJRT_Api` (integers, raw
            // pointers, optional function pointers) and the prefix holds the plugin's values.
            slot(unsafe { copy.assume_init_ref() })
        };
        f.ok_or_else(unavailable)
    }

    /// Turns the result of a PJRT call into a `Result`, destroying the error object.
    pub(crate) fn check(&self, call: &'static str, err: *mut ffi::PJRT_Error) -> Result<()> {
        if err.is_null() {
            return Ok(());
        }
        let mut message = String::from("(the plugin gave no message)");
        if let Ok(f) = super::pjrt_fn!(self, PJRT_Error_Message) {
            let mut a = args::<ffi::PJRT_Error_Message_Args>();
            a.error = err;
            // SAFETY: `err` is a live error object the plugin just returned; `a` is initialised.
            unsafe { f(&mut a) };
            // SAFETY: the message is owned by `err`, which is alive until destroyed below.
            message = unsafe { plugin_string(a.message, a.message_size) };
        }
        let mut code = ErrorCode::Unknown;
        if let Ok(f) = super::pjrt_fn!(self, PJRT_Error_GetCode) {
            let mut a = args::<ffi::PJRT_Error_GetCode_Args>();
            a.error = err;
            // SAFETY: as above.
            let nested = unsafe { f(&mut a) };
            if nested.is_null() {
                code = ErrorCode::from_raw(a.code);
            } else {
                self.destroy_error(nested);
            }
        }
        self.destroy_error(err);
        Err(Error::Pjrt {
            call,
            code,
            message,
        })
    }

    fn destroy_error(&self, err: *mut ffi::PJRT_Error) {
        // Without `PJRT_Error_Destroy` the error object leaks; there is nothing better to do.
        if let Ok(f) = super::pjrt_fn!(self, PJRT_Error_Destroy) {
            let mut a = args::<ffi::PJRT_Error_Destroy_Args>();
            a.error = err;
            // SAFETY: `err` is a live error object not yet destroyed; it is not used after this.
            unsafe { f(&mut a) };
        }
    }

    /// Waits for `event` and destroys it, returning the event's error if it carries one.
    pub(crate) fn await_event(&self, event: *mut ffi::PJRT_Event) -> Result<()> {
        if event.is_null() {
            return Ok(());
        }
        let waited = super::pjrt_fn!(self, PJRT_Event_Await).and_then(|f| {
            let mut a = args::<ffi::PJRT_Event_Await_Args>();
            a.event = event;
            // SAFETY: `event` is a live event the plugin handed us and we have not destroyed.
            let err = unsafe { f(&mut a) };
            self.check("PJRT_Event_Await", err)
        });
        let destroyed = super::pjrt_fn!(self, PJRT_Event_Destroy).and_then(|f| {
            let mut a = args::<ffi::PJRT_Event_Destroy_Args>();
            a.event = event;
            // SAFETY: as above; `event` is not used after this call.
            let err = unsafe { f(&mut a) };
            self.check("PJRT_Event_Destroy", err)
        });
        waited.and(destroyed)
    }
}
