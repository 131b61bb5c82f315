//! The named values a client is created with, and which plugin gets which: the CPU plugins'
//! device count, the CUDA plugin's visible devices and memory options. Split from the parent
//! only to keep files short.

use crate::error::{Error, Result};

/// The CPU plugins' option for the number of virtual devices.
const CPU_DEVICE_COUNT: &str = "cpu_device_count";

/// Whether `path` names an XLA CUDA plugin (`xla_cuda_plugin.so`, `pjrt_c_api_gpu_plugin.so`).
pub(super) fn is_cuda_library(path: &std::path::Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.contains("cuda") || n.contains("gpu"))
}

/// The CUDA plugin's create options stackscan sets.
const VISIBLE_DEVICES: &str = "visible_devices";
pub(super) const MEMORY_FRACTION: &str = "memory_fraction";
pub(super) const PREALLOCATE: &str = "preallocate";

/// Whether the library at `path` is one of XLA's CPU plugins, by its file name.
pub(super) fn is_cpu_library(path: &std::path::Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.contains("cpu") && !n.contains("gpu"))
}

/// The most virtual CPU devices a client may ask for. Each is a thread pool and a device
/// buffer space of the plugin's; far beyond this the plugin runs out of threads or memory
/// before it can report why.
pub const MAX_CPU_DEVICES: i64 = 4096;

/// Options passed to `PJRT_Client_Create` as named values.
#[derive(Clone, Debug, Default)]
pub struct ClientOptions {
    pub(super) values: Vec<(String, OptionValue)>,
}

#[derive(Clone, Debug)]
pub(super) enum OptionValue {
    Int(i64),
    IntList(Vec<i64>),
    Float(f32),
    Bool(bool),
    Str(String),
}

/// What an accelerator client may be told beyond its device count: how much of each device's
/// memory it takes up front. `None` leaves the plugin's default (the CUDA plugin preallocates
/// 75 % of every visible GPU, the default JAX's published "GPU memory allocation" page states).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AcceleratorOptions {
    /// The share of each device's memory the allocator may use, in (0, 1]
    /// (`memory_fraction`).
    pub memory_fraction: Option<f32>,
    /// Whether that share is allocated when the client starts (`preallocate`).
    pub preallocate: Option<bool>,
}

impl ClientOptions {
    /// Options for XLA's CPU plugins exposing `devices` virtual devices (`cpu_device_count`).
    pub fn cpu(devices: usize) -> Self {
        ClientOptions::default().int(CPU_DEVICE_COUNT, i64::try_from(devices).unwrap_or(i64::MAX))
    }

    /// Options for XLA's CUDA plugin: only the first `devices` GPUs visible
    /// (`visible_devices`, so the others are neither claimed nor preallocated), and the
    /// memory options given.
    pub fn cuda(devices: usize, accelerator: AcceleratorOptions) -> Self {
        let ids = (0..i64::try_from(devices).unwrap_or(i64::MAX)).collect();
        ClientOptions::default()
            .int_list(VISIBLE_DEVICES, ids)
            .with_memory(accelerator)
    }

    /// These options with `accelerator`'s memory options added.
    fn with_memory(mut self, accelerator: AcceleratorOptions) -> Self {
        if let Some(f) = accelerator.memory_fraction {
            self = self.float(MEMORY_FRACTION, f);
        }
        if let Some(p) = accelerator.preallocate {
            self = self.bool(PREALLOCATE, p);
        }
        self
    }

    /// Rejects values known to crash or cripple a plugin before they reach it: newer CPU
    /// plugins abort the process on a negative `cpu_device_count`, and both read it as a
    /// 32-bit count, so 2^31 gives a client with no devices and 2^32 + 2 one with two.
    pub(super) fn validate(&self) -> Result<()> {
        for (name, value) in &self.values {
            if name == MEMORY_FRACTION
                && !matches!(value, OptionValue::Float(f) if *f > 0.0 && *f <= 1.0)
            {
                return Err(Error::InvalidOption {
                    name: name.clone(),
                    reason: format!("expected a share of memory in (0, 1], got {value:?}"),
                });
            }
            if name == CPU_DEVICE_COUNT
                && !matches!(value, OptionValue::Int(n) if (1..=MAX_CPU_DEVICES).contains(n))
            {
                return Err(Error::InvalidOption {
                    name: name.clone(),
                    reason: format!(
                        "expected an integer from 1 to {MAX_CPU_DEVICES}, got {value:?}"
                    ),
                });
            }
        }
        Ok(())
    }

    /// The device count asked for with `cpu_device_count`, if any (the last one given wins,
    /// as in the plugin).
    pub(super) fn cpu_device_count(&self) -> Option<i64> {
        self.values
            .iter()
            .rev()
            .find_map(|(name, value)| match value {
                OptionValue::Int(n) if name == CPU_DEVICE_COUNT => Some(*n),
                _ => None,
            })
    }

    /// Adds an integer option.
    pub fn int(mut self, name: &str, value: i64) -> Self {
        self.values.push((name.to_owned(), OptionValue::Int(value)));
        self
    }

    /// Adds a list-of-integers option.
    pub fn int_list(mut self, name: &str, value: Vec<i64>) -> Self {
        self.values
            .push((name.to_owned(), OptionValue::IntList(value)));
        self
    }

    /// Adds a floating-point option.
    pub fn float(mut self, name: &str, value: f32) -> Self {
        self.values
            .push((name.to_owned(), OptionValue::Float(value)));
        self
    }

    /// Adds a boolean option.
    pub fn bool(mut self, name: &str, value: bool) -> Self {
        self.values
            .push((name.to_owned(), OptionValue::Bool(value)));
        self
    }

    /// Adds a string option.
    pub fn string(mut self, name: &str, value: &str) -> Self {
        self.values
            .push((name.to_owned(), OptionValue::Str(value.to_owned())));
        self
    }
}
