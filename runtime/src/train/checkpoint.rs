//! Saving and restoring a [`Trainer`]'s state: every weight with its two Adam moments, in
//! natural (unsharded) layout so a checkpoint does not depend on the device count, plus Adam's
//! step and the caller's data position and RNG state.
//!
//! Tensors are named from the model: an outer parameter by its own name, a stacked one as
//! `{kind}.{param}` with shape `[layers, …]`; the moments are `adam.m.{name}` and
//! `adam.v.{name}`. A restore checks every tensor before it uploads any (its checksum when the
//! file is read, then its name and shape), so a bad file leaves the trainer as it was.

use std::path::Path;

use stackscan::fsdp::{ParamSpec, StackModel};

use super::Trainer;
use crate::checkpoint::{Checkpoint, Tensor};
use crate::error::{Error, Result};
use crate::shard::{shard, unshard};

/// Where the caller's data pipeline stands, saved and restored with the trainer's state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// The next batch (or token offset) the pipeline would read.
    pub data_position: u64,
    /// The pipeline's generator state ([`stackscan::rng::Rng::state`]).
    pub rng_state: u64,
}

/// One weight tensor's place in the trainer's state.
#[derive(Clone, Debug)]
pub(super) struct Slot {
    pub(super) name: String,
    pub(super) spec: ParamSpec,
    pub(super) layers: usize,
    /// Whether it is a stacked (per-layer) parameter, stored with a leading layer dimension.
    stacked: bool,
    /// Per-device dims of the weight and its moments.
    pub(super) dims: Vec<i64>,
}

impl Slot {
    pub(super) fn new(spec: &ParamSpec, layers: usize, dims: &[i64]) -> Slot {
        Slot {
            name: spec.name.clone(),
            spec: spec.clone(),
            layers,
            stacked: false,
            dims: dims.to_vec(),
        }
    }

    /// The full shape as stored: stacked parameters carry their layer dimension.
    pub(super) fn shape(&self) -> Vec<i64> {
        let mut shape = Vec::with_capacity(self.spec.shape.len() + 1);
        if self.stacked {
            shape.push(self.layers as i64);
        }
        shape.extend_from_slice(&self.spec.shape);
        shape
    }
}

/// The checkpoint names of `model`'s weights, in [`StackModel::weights`] order: the paths of
/// the parameter listing ([`StackModel::weight_names`]), one naming for both.
pub fn weight_names(model: &StackModel) -> Vec<String> {
    model.weight_names()
}

/// `slots` (in weights order) with their checkpoint names, the outer ones first.
pub(super) fn name_slots(model: &StackModel, mut slots: Vec<Slot>) -> Vec<Slot> {
    let outer = model.outer_params.len();
    for (j, (slot, name)) in slots.iter_mut().zip(weight_names(model)).enumerate() {
        slot.name = name;
        slot.stacked = j >= outer;
    }
    slots
}

/// `model`'s weights as a checkpoint holds them: each one's name and natural shape (stacked
/// ones with their layer dimension), in [`StackModel::weights`] order.
pub fn stored_weights(model: &StackModel) -> Vec<(String, Vec<i64>)> {
    let outer = model.outer_params.len();
    weight_names(model)
        .into_iter()
        .zip(model.weights())
        .enumerate()
        .map(|(j, (name, (spec, layers)))| {
            let mut shape = Vec::with_capacity(spec.shape.len() + 1);
            if j >= outer {
                shape.push(layers as i64);
            }
            shape.extend_from_slice(&spec.shape);
            (name, shape)
        })
        .collect()
}

/// Checks `ckpt` (read from `path`) against `model` as a restore would, with no trainer and
/// nothing compiled: its step, data position and RNG state, and every weight and both its
/// moments present with the model's shape. What a command runs before it compiles, so a
/// checkpoint of another model or size is refused at once.
pub fn check_checkpoint(ckpt: &Checkpoint, path: &Path, model: &StackModel) -> Result<()> {
    stored_step(ckpt, path)?;
    ckpt.metadata_u64(DATA_POSITION, path)?;
    ckpt.metadata_u64(RNG_STATE, path)?;
    let weights = stored_weights(model);
    for prefix in [""].iter().chain(MOMENTS.iter()) {
        for (name, shape) in &weights {
            ckpt.tensor(&format!("{prefix}{name}"), shape, path)?;
        }
    }
    Ok(())
}

/// Adam's step of `ckpt`: a count the devices' `f32` holds exactly (below 2^24).
fn stored_step(ckpt: &Checkpoint, path: &Path) -> Result<usize> {
    let steps = ckpt.metadata_u64(STEP, path)?;
    usize::try_from(steps)
        .ok()
        .filter(|&s| s < (1 << 24) - 1)
        .ok_or_else(|| Error::CheckpointCorrupt {
            path: path.to_owned(),
            reason: format!("step {steps} is out of range"),
        })
}

const STEP: &str = "step";
const DATA_POSITION: &str = "data_position";
const RNG_STATE: &str = "rng_state";
const MOMENTS: [&str; 2] = ["adam.m.", "adam.v."];

impl Trainer {
    /// The state as a checkpoint: weights, moments, Adam's step and `progress`.
    pub fn checkpoint(&self, progress: Progress) -> Result<Checkpoint> {
        let mut tensors = Vec::with_capacity(3 * self.weights);
        for (m, prefix) in [""].iter().chain(MOMENTS.iter()).enumerate() {
            for (j, slot) in self.params.iter().enumerate() {
                let slabs = self
                    .state
                    .iter()
                    .map(|dev| dev[m * self.weights + j].to_host::<f32>())
                    .collect::<Result<Vec<_>>>()?;
                tensors.push(Tensor {
                    name: format!("{prefix}{}", slot.name),
                    shape: slot.shape(),
                    data: unshard(&slot.spec, slot.layers, &slabs)?,
                });
            }
        }
        let metadata = [
            (STEP, self.device_steps()?),
            (DATA_POSITION, progress.data_position),
            (RNG_STATE, progress.rng_state),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_string()))
        .collect();
        Ok(Checkpoint { tensors, metadata })
    }

    /// Adam's step count as the devices hold it: every launched step included, waited for
    /// or not (the state read waits until the last of them is done).
    fn device_steps(&self) -> Result<u64> {
        let counter = self
            .state
            .first()
            .and_then(|dev| dev.get(3 * self.weights))
            .ok_or_else(|| Error::Program("the trainer holds no step count".into()))?;
        let next = counter.to_host::<f32>()?[0];
        // The count is a whole number below 2^24 (f32 counts exactly up to there).
        Ok((next as u64).saturating_sub(1))
    }

    /// Writes the state to `path` atomically (see [`crate::checkpoint::write_atomic`]).
    pub fn save(&self, path: &Path, progress: Progress) -> Result<()> {
        self.checkpoint(progress)?.write(path)
    }

    /// Loads the state from `ckpt` (read from `path`, named in errors) and returns the data
    /// pipeline's progress. Every tensor is checked before any is uploaded: on an error the
    /// trainer is unchanged.
    pub fn restore(&mut self, ckpt: &Checkpoint, path: &Path) -> Result<Progress> {
        let n = self.mesh.size();
        let steps = stored_step(ckpt, path)?;
        let progress = Progress {
            data_position: ckpt.metadata_u64(DATA_POSITION, path)?,
            rng_state: ckpt.metadata_u64(RNG_STATE, path)?,
        };
        let mut host: Vec<Vec<Vec<f32>>> = Vec::with_capacity(3 * self.weights);
        for prefix in [""].iter().chain(MOMENTS.iter()) {
            for slot in &self.params {
                let name = format!("{prefix}{}", slot.name);
                let t = ckpt.tensor(&name, &slot.shape(), path)?;
                host.push(shard(&slot.spec, slot.layers, &t.data, n)?);
            }
        }
        let mut state: Vec<Vec<_>> = (0..n).map(|_| Vec::with_capacity(host.len())).collect();
        for (i, slabs) in host.iter().enumerate() {
            let dims = &self.params[i % self.weights].dims;
            for (d, slab) in slabs.iter().enumerate() {
                state[d].push(self.client.buffer(slab, dims, &self.mesh.devices()[d])?);
            }
        }
        let next = [(steps + 1) as f32];
        for (d, dev) in self.mesh.devices().iter().enumerate() {
            state[d].push(self.client.buffer(&next, &[], dev)?);
        }
        self.state = state;
        self.steps = steps;
        Ok(progress)
    }

    /// Reads the checkpoint at `path`, every tensor checked against its checksum
    /// ([`Checkpoint::read`]), and restores it ([`Trainer::restore`]).
    pub fn load(&mut self, path: &Path) -> Result<Progress> {
        let ckpt = Checkpoint::read(path)?;
        self.restore(&ckpt, path)
    }
}
