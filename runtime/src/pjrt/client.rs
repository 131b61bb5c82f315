//! A PJRT client: the plugin's view of a set of devices, and where buffers and programs live.

use std::ffi::CString;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use stackscan::DType;

use super::api::Api;
use super::compile_options::OverrideValue;
use super::{Buffer, Plugin, args, buffer_type, pjrt_fn, plugin_slice, plugin_string};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::ffi;
use stackscan::TensorType;

mod options;

pub use options::{AcceleratorOptions, ClientOptions, MAX_CPU_DEVICES};
use options::{OptionValue, PREALLOCATE, is_cpu_library, is_cuda_library};

/// One addressable device of a client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    /// Position in [`Client::devices`].
    pub index: usize,
    /// The global device id (`PJRT_DeviceDescription_Id`), used in device assignments.
    pub id: i32,
    /// The device kind the plugin reports (e.g. `cpu`).
    pub kind: String,
}

/// A PJRT client. Cheap to clone; the plugin client is destroyed when the last clone, buffer
/// and executable made from it are gone.
#[derive(Clone, Debug)]
pub struct Client {
    pub(crate) inner: Arc<ClientInner>,
    /// The directory compiled programs are kept in between runs, if any (the compile cache's,
    /// `crate::compile_cache`, which reads and writes it).
    pub(crate) cache_dir: Option<PathBuf>,
    /// XLA `DebugOptions` set on every compile of this client ([`Client::with_xla_options`]).
    pub(crate) xla_options: Arc<[(String, OverrideValue)]>,
}

pub(crate) struct ClientInner {
    pub(crate) api: Arc<Api>,
    pub(crate) raw: *mut ffi::PJRT_Client,
    pub(crate) raw_devices: Vec<*mut ffi::PJRT_Device>,
    pub(crate) devices: Vec<Device>,
    pub(crate) platform: String,
    /// Buffers made by this client and not yet dropped.
    pub(crate) live_buffers: AtomicUsize,
}

// SAFETY: PJRT clients and device handles may be used from any thread (the C API is
// thread-safe); the raw pointers are only passed back to the plugin.
unsafe impl Send for ClientInner {}
// SAFETY: as above; the only mutable state of our own is an atomic counter.
unsafe impl Sync for ClientInner {}

impl std::fmt::Debug for ClientInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("platform", &self.platform)
            .field("devices", &self.devices.len())
            .field("live_buffers", &self.live_buffers.load(Ordering::Relaxed))
            .finish()
    }
}

impl Drop for ClientInner {
    fn drop(&mut self) {
        if let Ok(f) = pjrt_fn!(self.api, PJRT_Client_Destroy) {
            let mut a = args::<ffi::PJRT_Client_Destroy_Args>();
            a.client = self.raw;
            // SAFETY: `raw` is a live client; every buffer and executable made from it holds an
            // `Arc` to this value, so none is alive now.
            let err = unsafe { f(&mut a) };
            // Drop cannot report; a failing destroy only leaks.
            let _ = self.api.check("PJRT_Client_Destroy", err);
        }
    }
}

impl Client {
    /// A client of `plugin` for `devices` devices, its create options chosen by platform, so
    /// one binary runs on any plugin:
    ///
    /// - a CPU plugin exposes exactly `devices` virtual devices (`cpu_device_count`, the one
    ///   option XLA's CPU plugins take and the others refuse by name);
    /// - the CUDA plugin sees only the first `devices` GPUs (`visible_devices`), so the others
    ///   are neither claimed nor preallocated; it is first created without preallocation to
    ///   count them, so too few is [`Error::DeviceCount`], not the plugin's own message;
    /// - another accelerator plugin (TPU, …) keeps its own defaults, and must have at least
    ///   `devices` devices ([`Error::DeviceCount`] says how many it has); meshes take the
    ///   first `devices` ([`Mesh::new`](crate::Mesh::new)).
    ///
    /// A plugin is known to be a CPU one by its library's name (XLA's `xla_cpu_pjrt.so`,
    /// `pjrt_c_api_cpu_plugin.so`), a CUDA one likewise (`xla_cuda_plugin.so`,
    /// `pjrt_c_api_gpu_plugin.so`); any other is first created with its defaults, and made
    /// again with the device count if it says its platform is `cpu`.
    pub fn for_devices(plugin: &Plugin, devices: usize) -> Result<Client> {
        Client::for_devices_with(plugin, devices, AcceleratorOptions::default())
    }

    /// [`Client::for_devices`] with memory options for an accelerator (the CUDA plugin's
    /// `memory_fraction` and `preallocate`; a CPU plugin has no such options and ignores
    /// them).
    pub fn for_devices_with(
        plugin: &Plugin,
        devices: usize,
        accelerator: AcceleratorOptions,
    ) -> Result<Client> {
        if devices == 0 {
            return Err(Error::DeviceCount {
                requested: 0,
                available: 0,
            });
        }
        if is_cpu_library(plugin.path()) {
            return Client::new(plugin, &ClientOptions::cpu(devices));
        }
        if is_cuda_library(plugin.path()) {
            let probe = Client::new(plugin, &ClientOptions::default().bool(PREALLOCATE, false))?;
            let available = probe.devices().len();
            drop(probe);
            if available < devices {
                return Err(Error::DeviceCount {
                    requested: devices,
                    available,
                });
            }
            return Client::new(plugin, &ClientOptions::cuda(devices, accelerator));
        }
        let client = Client::new(plugin, &ClientOptions::default())?;
        if client.platform() == "cpu" && client.devices().len() != devices {
            drop(client);
            return Client::new(plugin, &ClientOptions::cpu(devices));
        }
        let available = client.devices().len();
        if available < devices {
            return Err(Error::DeviceCount {
                requested: devices,
                available,
            });
        }
        Ok(client)
    }

    /// Creates a client of `plugin` with the given create options.
    pub fn new(plugin: &Plugin, options: &ClientOptions) -> Result<Client> {
        options.validate()?;
        let api = Arc::clone(&plugin.api);
        let (_names, named) = named_values(options)?;
        let create = pjrt_fn!(api, PJRT_Client_Create)?;
        let mut a = args::<ffi::PJRT_Client_Create_Args>();
        a.create_options = named.as_ptr();
        a.num_options = named.len();
        // SAFETY: `named`, the names and the string and list values it points to (owned by
        // `options`) outlive the call; no key-value callbacks are given (single process).
        let err = unsafe { create(&mut a) };
        api.check("PJRT_Client_Create", err)?;
        let raw = a.client;
        // From here on the client is owned, so an early return destroys it.
        let mut inner = ClientInner {
            api,
            raw,
            raw_devices: Vec::new(),
            devices: Vec::new(),
            platform: String::new(),
            live_buffers: AtomicUsize::new(0),
        };
        inner.platform = inner.platform_name()?;
        inner.raw_devices = inner.addressable_devices()?;
        inner.devices = inner
            .raw_devices
            .iter()
            .enumerate()
            .map(|(index, &d)| inner.describe(index, d))
            .collect::<Result<_>>()?;
        if inner.devices.is_empty() {
            return Err(Error::DeviceCount {
                requested: 1,
                available: 0,
            });
        }
        // A CPU plugin that silently gave another count than asked for (a width it reads
        // differently) would shift every later device index.
        if let Some(asked) = options.cpu_device_count()
            && inner.platform == "cpu"
            && usize::try_from(asked).ok() != Some(inner.devices.len())
        {
            return Err(Error::DeviceCount {
                requested: usize::try_from(asked).unwrap_or(0),
                available: inner.devices.len(),
            });
        }
        Ok(Client {
            inner: Arc::new(inner),
            cache_dir: None,
            xla_options: Arc::clone(&plugin.xla_options),
        })
    }

    /// The returned client (and the clones made from it) with the XLA `DebugOptions` fields
    /// `options` set on every compile, on top of the plugin's defaults and `XLA_FLAGS`; an
    /// earlier call's options are replaced.
    ///
    /// Each plugin in a process parses `XLA_FLAGS` itself, and a plugin aborts the process on
    /// a flag it does not know, so a flag that only one plugin has cannot go there while
    /// another plugin is loaded. Options given here reach only this client's compiles (a
    /// plugin that does not know one refuses the compile with an error), and they are part
    /// of the compile cache's key.
    ///
    /// They are defaults: a compile's own [`CompileOptions::with_override`] of the same field
    /// wins, and so do the workarounds the plugin needs (the runtime's `workarounds` module),
    /// so no client option undoes a workaround's fix.
    pub fn with_xla_options(mut self, options: Vec<(String, OverrideValue)>) -> Client {
        self.xla_options = Arc::from(options);
        self
    }

    /// The XLA options [`with_xla_options`](Self::with_xla_options) set.
    pub fn xla_options(&self) -> &[(String, OverrideValue)] {
        &self.xla_options
    }

    /// What identifies the plugin build and the devices behind this client, for cache keys:
    /// platform name and version, PJRT API version, the plugin's file (path, size,
    /// modification time) and the devices' ids and kinds.
    pub(crate) fn identity(&self) -> String {
        let api = &self.inner.api;
        let (major, minor) = api.version();
        let path = api.path();
        let file = std::fs::canonicalize(path)
            .and_then(|p| Ok((std::fs::metadata(&p)?, p)))
            .map(|(m, p)| {
                let modified = m
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_nanos());
                format!("{} {} bytes modified {modified}", p.display(), m.len())
            })
            .unwrap_or_else(|e| format!("{} ({e})", path.display()));
        let devices: Vec<String> = self
            .inner
            .devices
            .iter()
            .map(|d| format!("{}:{}", d.id, d.kind))
            .collect();
        format!(
            "platform {} {}\napi {major}.{minor}\nplugin {file}\ndevices {}",
            self.inner.platform,
            self.platform_version(),
            devices.join(",")
        )
    }

    /// The platform version the plugin reports (e.g. its XLA or libtpu build), or an empty
    /// string when it does not say.
    pub fn platform_version(&self) -> String {
        let api = &self.inner.api;
        let Ok(f) = pjrt_fn!(api, PJRT_Client_PlatformVersion) else {
            return String::new();
        };
        let mut a = args::<ffi::PJRT_Client_PlatformVersion_Args>();
        a.client = self.inner.raw;
        // SAFETY: `raw` is a live client.
        let err = unsafe { f(&mut a) };
        if api.check("PJRT_Client_PlatformVersion", err).is_err() {
            return String::new();
        }
        // SAFETY: the version string is owned by the client, alive for this call.
        unsafe { plugin_string(a.platform_version, a.platform_version_size) }
    }

    /// The PJRT C API version of the client's plugin, `(major, minor)`.
    pub fn api_version(&self) -> (i32, i32) {
        (self.inner.api.major, self.inner.api.minor)
    }

    /// The platform name the plugin reports (`cpu`, `tpu`, `cuda`).
    pub fn platform(&self) -> &str {
        &self.inner.platform
    }

    /// The devices this process can address, in the plugin's order.
    pub fn devices(&self) -> &[Device] {
        &self.inner.devices
    }

    /// Buffers created by this client (transfers and execution outputs) not yet dropped.
    pub fn live_buffers(&self) -> usize {
        self.inner.live_buffers.load(Ordering::SeqCst)
    }

    /// Copies `data` (dense, row-major) to `device` as an array of shape `dims`.
    pub fn buffer<T: Element>(&self, data: &[T], dims: &[i64], device: &Device) -> Result<Buffer> {
        let expected = element_count(dims)?;
        if data.len() != expected {
            return Err(Error::HostDataLength {
                dims: dims.to_vec(),
                expected,
                actual: data.len(),
            });
        }
        // `buffer_from_raw` relies on this: `data` holds exactly `expected` elements of
        // `T::DTYPE`.
        self.buffer_from_raw(data.as_ptr().cast(), T::DTYPE, dims, device)
    }

    /// Copies a dense host array of `dtype` (given as raw little-endian bytes) to `device`.
    pub fn buffer_from_bytes(
        &self,
        bytes: &[u8],
        dtype: DType,
        dims: &[i64],
        device: &Device,
    ) -> Result<Buffer> {
        let expected = element_count(dims)?;
        let expected_bytes = expected
            .checked_mul(dtype.size_in_bytes())
            .ok_or_else(|| Error::InvalidDims(dims.to_vec()))?;
        if bytes.len() != expected_bytes {
            return Err(Error::HostDataLength {
                dims: dims.to_vec(),
                expected,
                actual: bytes.len() / dtype.size_in_bytes(),
            });
        }
        self.buffer_from_raw(bytes.as_ptr().cast(), dtype, dims, device)
    }

    /// Shared tail of the transfers; `data` must hold the dense array `dims` of `dtype`.
    fn buffer_from_raw(
        &self,
        data: *const std::ffi::c_void,
        dtype: DType,
        dims: &[i64],
        device: &Device,
    ) -> Result<Buffer> {
        let raw_device = self.raw_device(device)?;
        let api = &self.inner.api;
        let f = pjrt_fn!(api, PJRT_Client_BufferFromHostBuffer)?;
        let mut a = args::<ffi::PJRT_Client_BufferFromHostBuffer_Args>();
        a.client = self.inner.raw;
        a.data = data;
        a.type_ = buffer_type(dtype);
        a.dims = dims.as_ptr();
        a.num_dims = dims.len();
        a.host_buffer_semantics = ffi::PJRT_HostBufferSemantics_kImmutableOnlyDuringCall;
        a.device = raw_device;
        // SAFETY: both callers checked that `data` holds `product(dims)` elements of `dtype`
        // in dense row-major order; it stays alive until the done event is awaited below, and
        // `dims` outlives the call.
        let err = unsafe { f(&mut a) };
        api.check("PJRT_Client_BufferFromHostBuffer", err)?;
        let buffer = Buffer::from_raw(&self.inner, a.buffer, TensorType::new(dtype, dims));
        api.await_event(a.done_with_host_buffer)?;
        Ok(buffer)
    }

    /// The bytes a program may allocate on the smallest of this client's devices, as the
    /// plugin reports them (`PJRT_Device_MemoryStats`'s `bytes_limit`): a GPU's share under
    /// its memory fraction, a TPU's HBM. `None` where the plugin reports no limit, as a CPU
    /// plugin does (its devices share the host's memory) or one without the call.
    pub fn device_memory_limit(&self) -> Option<u64> {
        let f = pjrt_fn!(self.inner.api, PJRT_Device_MemoryStats).ok()?;
        let mut smallest: Option<u64> = None;
        for &device in &self.inner.raw_devices {
            let mut a = args::<ffi::PJRT_Device_MemoryStats_Args>();
            a.device = device;
            // SAFETY: `device` comes from this live client's device list; the plugin writes
            // only the fields below `struct_size`.
            let err = unsafe { f(&mut a) };
            // A plugin that cannot say (unimplemented on CPU) has no limit to check against.
            self.inner.api.check("PJRT_Device_MemoryStats", err).ok()?;
            if !a.bytes_limit_is_set || a.bytes_limit <= 0 {
                return None;
            }
            let limit = a.bytes_limit as u64;
            smallest = Some(smallest.map_or(limit, |s| s.min(limit)));
        }
        smallest
    }

    pub(crate) fn raw_device(&self, device: &Device) -> Result<*mut ffi::PJRT_Device> {
        match self.inner.devices.get(device.index) {
            Some(d) if d == device => Ok(self.inner.raw_devices[device.index]),
            _ => Err(Error::DeviceCount {
                requested: device.index + 1,
                available: self.inner.devices.len(),
            }),
        }
    }
}

impl ClientInner {
    fn platform_name(&self) -> Result<String> {
        let f = pjrt_fn!(self.api, PJRT_Client_PlatformName)?;
        let mut a = args::<ffi::PJRT_Client_PlatformName_Args>();
        a.client = self.raw;
        // SAFETY: `raw` is a live client.
        let err = unsafe { f(&mut a) };
        self.api.check("PJRT_Client_PlatformName", err)?;
        // SAFETY: the name is owned by the client, alive for this call.
        Ok(unsafe { plugin_string(a.platform_name, a.platform_name_size) })
    }

    fn addressable_devices(&self) -> Result<Vec<*mut ffi::PJRT_Device>> {
        let f = pjrt_fn!(self.api, PJRT_Client_AddressableDevices)?;
        let mut a = args::<ffi::PJRT_Client_AddressableDevices_Args>();
        a.client = self.raw;
        // SAFETY: `raw` is a live client.
        let err = unsafe { f(&mut a) };
        self.api.check("PJRT_Client_AddressableDevices", err)?;
        // SAFETY: the array is owned by the client and lives as long as it.
        Ok(unsafe { plugin_slice(a.addressable_devices, a.num_addressable_devices) }.to_vec())
    }

    fn describe(&self, index: usize, device: *mut ffi::PJRT_Device) -> Result<Device> {
        let f = pjrt_fn!(self.api, PJRT_Device_GetDescription)?;
        let mut a = args::<ffi::PJRT_Device_GetDescription_Args>();
        a.device = device;
        // SAFETY: `device` comes from this live client's device list.
        let err = unsafe { f(&mut a) };
        self.api.check("PJRT_Device_GetDescription", err)?;
        // SAFETY: the description is owned by the live device.
        let (id, kind) = unsafe { id_and_kind(&self.api, a.device_description) }?;
        Ok(Device { index, id, kind })
    }
}

/// Elements of an array of shape `dims`, or an error for negative or overflowing dimensions.
pub(crate) fn element_count(dims: &[i64]) -> Result<usize> {
    dims.iter()
        .try_fold(1usize, |n, &d| {
            usize::try_from(d).ok().and_then(|d| n.checked_mul(d))
        })
        .ok_or_else(|| Error::InvalidDims(dims.to_vec()))
}

/// `options` as the plugin's named values, and the C strings of their names, which the
/// values point into: both, and `options` (which holds the string and list values), stay
/// alive across the call that reads them.
pub(super) fn named_values(
    options: &ClientOptions,
) -> Result<(Vec<CString>, Vec<ffi::PJRT_NamedValue>)> {
    let names: Vec<CString> = options
        .values
        .iter()
        .map(|(n, _)| CString::new(n.as_str()))
        .collect::<Result<_, _>>()
        .map_err(|_| Error::Program("client option names must not contain NUL".into()))?;
    let mut named = Vec::with_capacity(options.values.len());
    for ((name, value), cname) in options.values.iter().zip(&names) {
        let mut nv = args::<ffi::PJRT_NamedValue>();
        nv.name = cname.as_ptr();
        nv.name_size = name.len();
        nv.value_size = 1;
        match value {
            OptionValue::Int(v) => {
                nv.type_ = ffi::PJRT_NamedValue_kInt64;
                nv.value.int64_value = *v;
            }
            OptionValue::IntList(v) => {
                nv.type_ = ffi::PJRT_NamedValue_kInt64List;
                nv.value.int64_array_value = v.as_ptr();
                nv.value_size = v.len();
            }
            OptionValue::Float(v) => {
                nv.type_ = ffi::PJRT_NamedValue_kFloat;
                nv.value.float_value = *v;
            }
            OptionValue::Bool(v) => {
                nv.type_ = ffi::PJRT_NamedValue_kBool;
                nv.value.bool_value = *v;
            }
            OptionValue::Str(v) => {
                nv.type_ = ffi::PJRT_NamedValue_kString;
                nv.value.string_value = v.as_ptr().cast();
                nv.value_size = v.len();
            }
        }
        named.push(nv);
    }
    Ok((names, named))
}

/// A device description's id and kind.
///
/// # Safety
/// - `description` is a live device description of `api`'s plugin (a client's device's, or
///   a topology's).
pub(super) unsafe fn id_and_kind(
    api: &Api,
    description: *mut ffi::PJRT_DeviceDescription,
) -> Result<(i32, String)> {
    let f = pjrt_fn!(api, PJRT_DeviceDescription_Id)?;
    let mut a = args::<ffi::PJRT_DeviceDescription_Id_Args>();
    a.device_description = description;
    // SAFETY: the caller's description is live.
    let err = unsafe { f(&mut a) };
    api.check("PJRT_DeviceDescription_Id", err)?;
    let id = a.id;
    let f = pjrt_fn!(api, PJRT_DeviceDescription_Kind)?;
    let mut a = args::<ffi::PJRT_DeviceDescription_Kind_Args>();
    a.device_description = description;
    // SAFETY: as above.
    let err = unsafe { f(&mut a) };
    api.check("PJRT_DeviceDescription_Kind", err)?;
    // SAFETY: the kind string is owned by the description, alive for this call.
    let kind = unsafe { plugin_string(a.device_kind, a.device_kind_size) };
    Ok((id, kind))
}
