//! Starting a [`Trainer`] from a Hugging Face checkpoint, and writing its weights back as one.

use std::path::Path;

use super::Trainer;
use crate::error::{Error, Result};
use stackscan::hf_map::HfMap;

use crate::hf::{self, ExportDType, WeightFiles};
use crate::shard::{shard, unshard};

/// Checks the Hugging Face model directory `dir` against `map` and `map` against the model's
/// `weights` (names and natural shapes, [`stored_weights`](super::stored_weights)), reading
/// headers only: every linked tensor present with its shape and a float dtype, every tensor
/// there linked or skipped. What a command runs before it compiles, so a checkpoint of
/// another model or size is refused at once; [`Trainer::import_hf`] runs it too.
pub fn check_hf_import(
    map: &HfMap,
    dir: &Path,
    weights: &[(String, Vec<i64>)],
) -> Result<WeightFiles> {
    let files = WeightFiles::open(dir)?;
    if map.weights.len() != weights.len() {
        return Err(Error::HfWeights {
            dir: dir.to_owned(),
            tensor: None,
            reason: format!(
                "the map links {} weights, the model has {}",
                map.weights.len(),
                weights.len()
            ),
        });
    }
    for (w, (name, shape)) in map.weights.iter().zip(weights) {
        if &w.name != name || &w.shape != shape {
            return Err(Error::HfWeights {
                dir: dir.to_owned(),
                tensor: None,
                reason: format!(
                    "the map's weight `{}` {:?} is not the model's `{name}` {shape:?}",
                    w.name, w.shape
                ),
            });
        }
    }
    hf::check(map, &files)?;
    Ok(files)
}

impl Trainer {
    /// Replaces the weights with those of the Hugging Face model directory `dir` as `map`
    /// links them, and starts the optimizer afresh (zero moments, step 0): fine-tuning from a
    /// published checkpoint.
    ///
    /// Everything the files' headers can say is checked first ([`hf::check`]), and the
    /// map against this trainer's weights (names and shapes), so a mismatch changes nothing.
    /// Then one weight at a time is converted to `f32` on the host, sharded and uploaded:
    /// the host holds one weight, never the whole checkpoint, and no device holds more than
    /// its shards.
    pub fn import_hf(&mut self, map: &HfMap, dir: &Path) -> Result<()> {
        let weights: Vec<(String, Vec<i64>)> = self
            .params
            .iter()
            .map(|slot| (slot.name.clone(), slot.shape()))
            .collect();
        let files = check_hf_import(map, dir, &weights)?;
        let n = self.mesh.size();
        let mut weights: Vec<Vec<_>> = (0..n).map(|_| Vec::with_capacity(self.weights)).collect();
        for (j, slot) in self.params.iter().enumerate() {
            let t = hf::import(map, &files, j)?;
            for (d, slab) in shard(&slot.spec, slot.layers, &t.data, n)?
                .into_iter()
                .enumerate()
            {
                weights[d].push(
                    self.client
                        .buffer(&slab, &slot.dims, &self.mesh.devices()[d])?,
                );
            }
        }
        let mut state: Vec<Vec<_>> = (0..n)
            .map(|_| Vec::with_capacity(3 * self.weights + 1))
            .collect();
        for (d, (dev, new)) in self.mesh.devices().iter().zip(weights).enumerate() {
            state[d].extend(new);
            for _ in 0..2 {
                for slot in &self.params {
                    let count = slot.dims.iter().product::<i64>() as usize;
                    state[d].push(self.client.buffer(&vec![0.0f32; count], &slot.dims, dev)?);
                }
            }
            state[d].push(self.client.buffer(&[1.0f32], &[], dev)?);
        }
        self.state = state;
        self.steps = 0;
        self.skipped = 0;
        Ok(())
    }

    /// Writes the weights to `dir/model.safetensors` under their Hugging Face names and
    /// layouts as `map` links them (in `dtype`), atomically; the caller writes the
    /// `config.json` beside it. An export imports back bit-identically in f32.
    pub fn export_hf(&self, map: &HfMap, dir: &Path, dtype: ExportDType) -> Result<()> {
        self.export_hf_sharded(map, dir, dtype, None)
    }

    /// [`Trainer::export_hf`] in files of at most `max_shard_bytes` with their index, as
    /// `transformers` shards a large model ([`hf::export_to`]): each weight is read from the
    /// devices when the first tensor that needs it is written and dropped after the last, so
    /// the host holds about one weight, never the model.
    pub fn export_hf_sharded(
        &self,
        map: &HfMap,
        dir: &Path,
        dtype: ExportDType,
        max_shard_bytes: Option<u64>,
    ) -> Result<()> {
        if map.weights.len() != self.params.len() {
            return Err(Error::Program(format!(
                "the map links {} weights, the trainer has {}",
                map.weights.len(),
                self.params.len()
            )));
        }
        hf::export_to(dir, map, dtype, max_shard_bytes, |j| {
            let slot = &self.params[j];
            if map.weights[j].name != slot.name {
                return Err(Error::Program(format!(
                    "the map's weight {j} is `{}`, the trainer's `{}`",
                    map.weights[j].name, slot.name
                )));
            }
            let slabs = self
                .state
                .iter()
                .map(|dev| dev[j].to_host::<f32>())
                .collect::<Result<Vec<_>>>()?;
            unshard(&slot.spec, slot.layers, &slabs)
        })
        .map(|_| ())
    }
}
