//! A topology: the devices of a machine (a TPU slice, say) described by the plugin without a
//! client, and the client-less compile against it. This is how a program is compiled for a
//! pod that is not attached to this machine: the compiler is the one that will run it, the
//! devices are only described.

use std::ffi::CString;
use std::sync::Arc;

use super::api::Api;
use super::client::named_values;
use super::compile_options::CompileOptions;
use super::{Plugin, args, pjrt_fn, plugin_slice, plugin_string};
use crate::error::{Error, Result};
use crate::ffi;
use crate::pjrt::ClientOptions;

/// One attribute value the plugin reports for a device or a topology.
#[derive(Clone, Debug, PartialEq)]
pub enum AttributeValue {
    /// A string.
    Str(String),
    /// An integer.
    Int(i64),
    /// A list of integers (a device's `coords`).
    IntList(Vec<i64>),
    /// A float.
    Float(f32),
    /// A boolean.
    Bool(bool),
}

/// One device of a topology, as the plugin describes it.
#[derive(Clone, Debug, PartialEq)]
pub struct TopologyDevice {
    /// The device's global id, what a device assignment names.
    pub id: i32,
    /// The plugin's name for the device kind (`TPU7x`, `TPU v5`).
    pub kind: String,
    /// Every attribute the plugin reports, by name, in the plugin's order.
    pub attributes: Vec<(String, AttributeValue)>,
}

impl TopologyDevice {
    /// The attribute `name`.
    pub fn attribute(&self, name: &str) -> Option<&AttributeValue> {
        self.attributes
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v)
    }

    /// The chip's position in the slice (libtpu's `coords`: x, y, z).
    pub fn coords(&self) -> Option<&[i64]> {
        match self.attribute("coords")? {
            AttributeValue::IntList(v) => Some(v),
            _ => None,
        }
    }

    /// Which core of its chip the device is (libtpu's `core_on_chip`).
    pub fn core_on_chip(&self) -> Option<i64> {
        match self.attribute("core_on_chip")? {
            AttributeValue::Int(v) => Some(*v),
            _ => None,
        }
    }

    /// The memory one program may use on the device, bytes (libtpu's
    /// `device_memory_bytes_limit`).
    pub fn memory_bytes(&self) -> Option<i64> {
        match self.attribute("device_memory_bytes_limit")? {
            AttributeValue::Int(v) => Some(*v),
            _ => None,
        }
    }
}

/// A topology the plugin made from a name, and its devices.
pub struct Topology {
    api: Arc<Api>,
    raw: *mut ffi::PJRT_TopologyDescription,
    name: String,
    platform: String,
    platform_version: String,
    devices: Vec<TopologyDevice>,
    attributes: Vec<(String, AttributeValue)>,
}

// SAFETY: a topology description is immutable once created; PJRT allows its functions (and
// `PJRT_Compile` against it) from any thread.
unsafe impl Send for Topology {}
// SAFETY: as above; `&Topology` only reads.
unsafe impl Sync for Topology {}

impl std::fmt::Debug for Topology {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Topology")
            .field("name", &self.name)
            .field("platform", &self.platform)
            .field("devices", &self.devices.len())
            .finish()
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        if let Ok(f) = pjrt_fn!(self.api, PJRT_TopologyDescription_Destroy) {
            let mut a = args::<ffi::PJRT_TopologyDescription_Destroy_Args>();
            a.topology = self.raw;
            // SAFETY: the topology is ours and not used after this.
            let err = unsafe { f(&mut a) };
            let _ = self.api.check("PJRT_TopologyDescription_Destroy", err);
        }
    }
}

impl Topology {
    /// Asks `plugin` for the topology `name` (libtpu: `tpu7x:2x2x1`, `v5p:4x4x4`, `v6e:2x2`),
    /// with the plugin's create `options`. No device is opened and nothing is sent anywhere.
    pub fn create(plugin: &Plugin, name: &str, options: &ClientOptions) -> Result<Topology> {
        let api = Arc::clone(&plugin.api);
        let (_names, named) = named_values(options)?;
        let cname = CString::new(name).map_err(|_| Error::UnknownTopology {
            name: name.to_owned(),
            reason: "the name holds a NUL byte".to_owned(),
        })?;
        let f = pjrt_fn!(api, PJRT_TopologyDescription_Create)?;
        let mut a = args::<ffi::PJRT_TopologyDescription_Create_Args>();
        a.topology_name = cname.as_ptr();
        a.topology_name_size = name.len();
        a.create_options = named.as_ptr();
        a.num_options = named.len();
        // SAFETY: the name, the option values and their names outlive the call.
        let err = unsafe { f(&mut a) };
        match api.check("PJRT_TopologyDescription_Create", err) {
            Err(Error::Pjrt { message, .. }) => {
                return Err(Error::UnknownTopology {
                    name: name.to_owned(),
                    reason: message,
                });
            }
            other => other?,
        }
        if a.topology.is_null() {
            return Err(Error::UnknownTopology {
                name: name.to_owned(),
                reason: "the plugin returned no topology".to_owned(),
            });
        }
        // Owned from here on, so an early return destroys it.
        let mut topology = Topology {
            api,
            raw: a.topology,
            name: name.to_owned(),
            platform: String::new(),
            platform_version: String::new(),
            devices: Vec::new(),
            attributes: Vec::new(),
        };
        topology.platform = topology.platform_string(false)?;
        topology.platform_version = topology.platform_string(true)?;
        topology.devices = topology.read_devices()?;
        topology.attributes = topology.read_attributes()?;
        Ok(topology)
    }

    /// The name it was made from.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The platform (`tpu`).
    pub fn platform(&self) -> &str {
        &self.platform
    }

    /// The plugin's version string for the platform.
    pub fn platform_version(&self) -> &str {
        &self.platform_version
    }

    /// Every device, in the plugin's order.
    pub fn devices(&self) -> &[TopologyDevice] {
        &self.devices
    }

    /// The topology's own attributes (libtpu: `wrap`, `twist`, `device_memory_bytes_limit`).
    pub fn attributes(&self) -> &[(String, AttributeValue)] {
        &self.attributes
    }

    /// Compiles the StableHLO text `program` for this topology's devices with `options`
    /// (whose device assignment names ids of [`devices`](Self::devices)), without a client:
    /// the result can be inspected and serialized, not run here.
    pub fn compile(&self, program: &str, options: &CompileOptions) -> Result<TopologyExecutable> {
        let options_bytes = options.encode();
        let mut code = program.as_bytes().to_vec();
        let p = super::mlir_program(&mut code);
        let f = pjrt_fn!(self.api, PJRT_Compile)?;
        let mut a = args::<ffi::PJRT_Compile_Args>();
        a.topology = self.raw;
        a.program = &p;
        a.compile_options = options_bytes.as_ptr().cast();
        a.compile_options_size = options_bytes.len();
        // SAFETY: the topology is live; the program, its code and format and the serialized
        // options outlive the call; no client is given (null), which the API allows.
        let err = unsafe { f(&mut a) };
        self.api.check("PJRT_Compile", err)?;
        if a.executable.is_null() {
            return Err(Error::Program(
                "the plugin returned a null executable".into(),
            ));
        }
        Ok(TopologyExecutable {
            api: Arc::clone(&self.api),
            raw: a.executable,
        })
    }

    fn platform_string(&self, version: bool) -> Result<String> {
        if version {
            let f = pjrt_fn!(self.api, PJRT_TopologyDescription_PlatformVersion)?;
            let mut a = args::<ffi::PJRT_TopologyDescription_PlatformVersion_Args>();
            a.topology = self.raw;
            // SAFETY: the topology is live.
            let err = unsafe { f(&mut a) };
            self.api
                .check("PJRT_TopologyDescription_PlatformVersion", err)?;
            // SAFETY: the string is owned by the topology, alive for this call.
            Ok(unsafe { plugin_string(a.platform_version, a.platform_version_size) })
        } else {
            let f = pjrt_fn!(self.api, PJRT_TopologyDescription_PlatformName)?;
            let mut a = args::<ffi::PJRT_TopologyDescription_PlatformName_Args>();
            a.topology = self.raw;
            // SAFETY: the topology is live.
            let err = unsafe { f(&mut a) };
            self.api
                .check("PJRT_TopologyDescription_PlatformName", err)?;
            // SAFETY: the string is owned by the topology, alive for this call.
            Ok(unsafe { plugin_string(a.platform_name, a.platform_name_size) })
        }
    }

    fn read_devices(&self) -> Result<Vec<TopologyDevice>> {
        let f = pjrt_fn!(self.api, PJRT_TopologyDescription_GetDeviceDescriptions)?;
        let mut a = args::<ffi::PJRT_TopologyDescription_GetDeviceDescriptions_Args>();
        a.topology = self.raw;
        // SAFETY: the topology is live.
        let err = unsafe { f(&mut a) };
        self.api
            .check("PJRT_TopologyDescription_GetDeviceDescriptions", err)?;
        // SAFETY: the array has `num_descriptions` entries owned by the topology.
        let descriptions = unsafe { plugin_slice(a.descriptions, a.num_descriptions) }.to_vec();
        descriptions.into_iter().map(|d| self.describe(d)).collect()
    }

    fn describe(&self, description: *mut ffi::PJRT_DeviceDescription) -> Result<TopologyDevice> {
        // SAFETY: the description is owned by the live topology.
        let (id, kind) = unsafe { super::client::id_and_kind(&self.api, description) }?;

        let f = pjrt_fn!(self.api, PJRT_DeviceDescription_Attributes)?;
        let mut a = args::<ffi::PJRT_DeviceDescription_Attributes_Args>();
        a.device_description = description;
        // SAFETY: as above.
        let err = unsafe { f(&mut a) };
        self.api.check("PJRT_DeviceDescription_Attributes", err)?;
        // SAFETY: the attributes are owned by the description, alive for this call.
        let attributes = unsafe { read_named_values(a.attributes, a.num_attributes) };
        Ok(TopologyDevice {
            id,
            kind,
            attributes,
        })
    }

    fn read_attributes(&self) -> Result<Vec<(String, AttributeValue)>> {
        let f = pjrt_fn!(self.api, PJRT_TopologyDescription_Attributes)?;
        let mut a = args::<ffi::PJRT_TopologyDescription_Attributes_Args>();
        a.topology = self.raw;
        // SAFETY: the topology is live.
        let err = unsafe { f(&mut a) };
        self.api.check("PJRT_TopologyDescription_Attributes", err)?;
        // SAFETY: the attributes are owned by the topology, alive for this call.
        Ok(unsafe { read_named_values(a.attributes, a.num_attributes) })
    }
}

/// Copies a named-value array the plugin owns.
///
/// # Safety
/// - `ptr` is null, or points to `len` initialised named values whose names, strings and
///   lists stay valid for the duration of the call.
unsafe fn read_named_values(
    ptr: *const ffi::PJRT_NamedValue,
    len: usize,
) -> Vec<(String, AttributeValue)> {
    // SAFETY: guaranteed by the caller.
    let values = unsafe { plugin_slice(ptr, len) };
    values
        .iter()
        .filter_map(|v| {
            // SAFETY: the name is `name_size` bytes the plugin owns (the caller's guarantee).
            let name = unsafe { plugin_string(v.name, v.name_size) };
            // SAFETY: `type_` says which member of the union the plugin wrote; string and
            // list members point to `value_size` elements it owns.
            let value = unsafe {
                match v.type_ {
                    ffi::PJRT_NamedValue_kString => {
                        AttributeValue::Str(plugin_string(v.value.string_value, v.value_size))
                    }
                    ffi::PJRT_NamedValue_kInt64 => AttributeValue::Int(v.value.int64_value),
                    ffi::PJRT_NamedValue_kInt64List => AttributeValue::IntList(
                        plugin_slice(v.value.int64_array_value, v.value_size).to_vec(),
                    ),
                    ffi::PJRT_NamedValue_kFloat => AttributeValue::Float(v.value.float_value),
                    ffi::PJRT_NamedValue_kBool => AttributeValue::Bool(v.value.bool_value),
                    // A kind this binding does not know: left out rather than misread.
                    _ => return None,
                }
            };
            Some((name, value))
        })
        .collect()
}

/// A program compiled for a [`Topology`]: not loaded on any device, but it says what it
/// would take (memory), what the compiler made of it (the optimized program) and can be
/// written out (serialized) for a machine that has the devices.
pub struct TopologyExecutable {
    api: Arc<Api>,
    raw: *mut ffi::PJRT_Executable,
}

// SAFETY: an unloaded executable is immutable; PJRT allows its functions from any thread.
unsafe impl Send for TopologyExecutable {}
// SAFETY: as above; `&TopologyExecutable` only reads.
unsafe impl Sync for TopologyExecutable {}

impl std::fmt::Debug for TopologyExecutable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopologyExecutable").finish_non_exhaustive()
    }
}

impl Drop for TopologyExecutable {
    fn drop(&mut self) {
        if let Ok(f) = pjrt_fn!(self.api, PJRT_Executable_Destroy) {
            let mut a = args::<ffi::PJRT_Executable_Destroy_Args>();
            a.executable = self.raw;
            // SAFETY: the executable is ours (from `PJRT_Compile`) and not used after this.
            let err = unsafe { f(&mut a) };
            let _ = self.api.check("PJRT_Executable_Destroy", err);
        }
    }
}

impl TopologyExecutable {
    /// The memory the compiler planned for one device.
    pub fn memory_stats(&self) -> Result<super::CompiledMemoryStats> {
        // SAFETY: `self.raw` is live while `self` is.
        unsafe { super::executable::memory_stats(&self.api, self.raw) }
    }

    /// The program after the compiler's passes, with its format (see
    /// [`crate::hlo::OptimizedModule`]).
    pub fn optimized_program(&self) -> Result<(String, Vec<u8>)> {
        // SAFETY: `self.raw` is live while `self` is.
        unsafe { super::executable::optimized_program(&self.api, self.raw) }
    }

    /// The plugin's serialized executable, which a client of the same plugin build on the
    /// topology's devices loads without compiling.
    pub fn serialize(&self) -> Result<Vec<u8>> {
        // SAFETY: `self.raw` is live while `self` is.
        unsafe { super::executable::serialize(&self.api, self.raw) }
    }
}
