//! A one-axis device mesh: which devices a program runs on and what its axis is called.
//!
//! FSDP shards weights and batch over one named axis; a program emitted for a mesh refers to
//! the axis by name (`sdy.mesh @mesh = <["fsdp"=4]>`) and the compile options place shard `i`
//! on `devices()[i]`.

use crate::compile_options::CompileOptions;
use crate::error::{Error, Result};
use crate::pjrt::{Client, Device};

/// How a multi-device program is written and compiled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgramForm {
    /// `mhlo.num_replicas = N`: every device runs the same program on its own arguments;
    /// collectives use replica groups.
    Replicas,
    /// `mhlo.num_partitions = N` with a Shardy mesh and `sdy.manual_computation`: the form JAX
    /// emits for `shard_map`, and what runs on TPU pods and across hosts.
    Partitions,
}

/// Devices along one named axis.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mesh {
    axis: String,
    devices: Vec<Device>,
}

impl Mesh {
    /// The first `size` devices of `client` along `axis`.
    pub fn new(client: &Client, axis: &str, size: usize) -> Result<Mesh> {
        let available = client.devices().len();
        if size == 0 || size > available {
            return Err(Error::DeviceCount {
                requested: size,
                available,
            });
        }
        Mesh::from_devices(axis, client.devices()[..size].to_vec())
    }

    /// A mesh over the given devices, in order.
    pub fn from_devices(axis: &str, devices: Vec<Device>) -> Result<Mesh> {
        if devices.is_empty() {
            return Err(Error::Mesh("a mesh needs at least one device".into()));
        }
        let valid_name = axis.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && axis.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid_name {
            return Err(Error::Mesh(format!(
                "axis name `{axis}` must start with a letter and hold only letters, digits and `_`"
            )));
        }
        for (i, d) in devices.iter().enumerate() {
            if devices[..i].iter().any(|e| e.id == d.id) {
                return Err(Error::Mesh(format!("device {} appears twice", d.id)));
            }
        }
        Ok(Mesh {
            axis: axis.to_owned(),
            devices,
        })
    }

    /// The axis name.
    pub fn axis(&self) -> &str {
        &self.axis
    }

    /// Devices along the axis, shard `i` on `devices()[i]`.
    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// Number of devices.
    pub fn size(&self) -> usize {
        self.devices.len()
    }

    /// Compile options that place a program of `form` on this mesh.
    pub fn compile_options(&self, form: ProgramForm) -> CompileOptions {
        let ids: Vec<i32> = self.devices.iter().map(|d| d.id).collect();
        match form {
            // A mesh's devices are distinct and at least one (checked when it was made).
            ProgramForm::Replicas => CompileOptions::replicas_on(&ids),
            ProgramForm::Partitions => CompileOptions::partitions_on(&ids),
        }
    }
}
