//! A device mesh: which devices a program runs on and what its axes are called.
//!
//! FSDP shards weights and batch over one named axis; expert parallelism adds a second
//! (`fsdp × expert`). A program emitted for a mesh refers to the axes by name
//! (`sdy.mesh @mesh = <["fsdp"=2, "expert"=4]>`) and the compile options place shard `i` on
//! `devices()[i]`.

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

/// Devices laid out on named axes (one for FSDP; `fsdp × expert` for expert parallelism).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mesh {
    layout: stackscan::Mesh,
    /// The compound name of all axes (the one axis's name on a one-axis mesh).
    all: String,
    devices: Vec<Device>,
}

impl Mesh {
    /// The first `size` devices of `client` along `axis`.
    pub fn new(client: &Client, axis: &str, size: usize) -> Result<Mesh> {
        Mesh::grid(client, &[(axis, size)])
    }

    /// The first devices of `client` on the axes `(name, size)`, major first: device `i` sits
    /// at the row-major coordinates of `i`, as the programs' `sdy.mesh` orders them.
    pub fn grid(client: &Client, axes: &[(&str, usize)]) -> Result<Mesh> {
        let size: usize = axes.iter().map(|&(_, n)| n).product();
        let available = client.devices().len();
        if size == 0 || size > available {
            return Err(Error::DeviceCount {
                requested: size,
                available,
            });
        }
        Mesh::from_devices_on(axes, client.devices()[..size].to_vec())
    }

    /// The first devices of `client` laid out as `layout`, the mesh a program was written for.
    pub fn for_layout(client: &Client, layout: &stackscan::Mesh) -> Result<Mesh> {
        let axes: Vec<(&str, usize)> = layout
            .axes()
            .iter()
            .map(|a| (a.name.as_str(), a.size))
            .collect();
        Mesh::grid(client, &axes)
    }

    /// A one-axis mesh over the given devices, in order.
    pub fn from_devices(axis: &str, devices: Vec<Device>) -> Result<Mesh> {
        if devices.is_empty() {
            return Err(Error::Mesh("a mesh needs at least one device".into()));
        }
        let n = devices.len();
        Mesh::from_devices_on(&[(axis, n)], devices)
    }

    /// A mesh on `axes` over the given devices, in device order.
    pub fn from_devices_on(axes: &[(&str, usize)], devices: Vec<Device>) -> Result<Mesh> {
        if devices.is_empty() {
            return Err(Error::Mesh("a mesh needs at least one device".into()));
        }
        let layout = stackscan::Mesh::new(axes).map_err(|e| Error::Mesh(mesh_message(&e)))?;
        if layout.size() != devices.len() {
            return Err(Error::Mesh(format!(
                "the mesh {} needs {} devices, {} given",
                layout.describe(),
                layout.size(),
                devices.len()
            )));
        }
        for (i, d) in devices.iter().enumerate() {
            if devices[..i].iter().any(|e| e.id == d.id) {
                return Err(Error::Mesh(format!("device {} appears twice", d.id)));
            }
        }
        Ok(Mesh {
            all: layout.all().name,
            layout,
            devices,
        })
    }

    /// The axis name on a one-axis mesh; on another the compound of all (`fsdp,expert`).
    pub fn axis(&self) -> &str {
        &self.all
    }

    /// The named axes, as programs for this mesh are written against.
    pub fn layout(&self) -> &stackscan::Mesh {
        &self.layout
    }

    /// Devices in device order, shard `i` on `devices()[i]`.
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

/// The message of a mesh-layout error, without the `mesh` op name the DSL gives it.
fn mesh_message(e: &stackscan::Error) -> String {
    match e {
        stackscan::Error::InvalidOp { message, .. } => message.clone(),
        other => other.to_string(),
    }
}
