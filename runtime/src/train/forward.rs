//! The trainer's forward programs: held-out loss ([`Trainer::evaluate`]) and a head's output
//! such as logits ([`Trainer::logits`]), each compiled on its first call, with no backward
//! pass or optimizer.

use std::time::Instant;

use stackscan::fsdp::forward_loss_on;

use super::{DeviceBatch, HostInput, Trainer};
use crate::error::{Error, Result};
use crate::pjrt::{Buffer, Executable};

/// A compiled forward program and the head it ends in.
pub(super) struct LogitsProgram {
    head: stackscan::fsdp::PostFn,
    exe: Executable,
}

impl std::fmt::Debug for LogitsProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogitsProgram").finish_non_exhaustive()
    }
}

impl Trainer {
    /// The loss of the current weights on `inputs` (device `d`'s share of every model input
    /// at `inputs[d]`, as a step takes them), with nothing updated: held-out evaluation. It
    /// is the loss a step on these inputs would report (the model's own, the layers' loss
    /// terms apart), from a forward-only program ([`forward_loss_on`]: no backward, no
    /// optimizer) compiled on the first call, run once per micro-batch. Steps still in flight
    /// finish first (their results are the weights read).
    pub fn evaluate(&mut self, inputs: &[Vec<HostInput>]) -> Result<f32> {
        self.check_inputs(&self.inputs, inputs)?;
        if self.eval_exe.is_none() {
            let program = forward_loss_on(&self.model, self.options, self.mesh.layout())?;
            let started = Instant::now();
            self.eval_exe = Some(self.client.compile_program(&program, &self.mesh)?);
            self.compile_seconds += started.elapsed().as_secs_f64();
        }
        let k = self.micro_batches;
        let mut total = 0.0f64;
        for part in 0..k {
            let micro: Vec<Vec<HostInput>> = inputs
                .iter()
                .map(|device| device.iter().map(|x| x.part(part, k)).collect())
                .collect();
            let batch = self.upload_as(&self.model.inputs, &micro)?;
            let Some(exe) = &self.eval_exe else {
                return Err(Error::Program(
                    "the evaluation program did not compile".into(),
                ));
            };
            for device in exe.execute(&self.with_weights(&batch))? {
                let loss = device
                    .first()
                    .ok_or_else(|| Error::Program("the evaluation returned no loss".into()))?
                    .to_host::<f32>()?;
                total += loss.iter().map(|&l| f64::from(l)).sum::<f64>();
            }
        }
        Ok((total / (k * self.mesh.size()) as f64) as f32)
    }

    /// What `head` (a model's [`logits_head`](stackscan::model::logits_head)) makes of the
    /// current weights on `inputs` (device `d`'s rows at `inputs[d]`, one micro-batch: the
    /// model's own batch), per device: the forward pass as the training step runs it, on the
    /// mesh, without a loss or a backward pass. For a language model, logits `[rows, seq,
    /// vocab]` row-major. The forward program is lowered and compiled on the first call with
    /// a head, and kept for the next calls with the same one.
    pub fn logits(
        &mut self,
        head: &stackscan::fsdp::PostFn,
        inputs: &[Vec<HostInput>],
    ) -> Result<Vec<Vec<f32>>> {
        let batch = self.upload_as(&self.model.inputs, inputs)?;
        let fresh = !matches!(&self.logits_exe, Some(p) if std::rc::Rc::ptr_eq(&p.head, head));
        if fresh {
            let program = stackscan::fsdp::forward_step_on(
                &self.model,
                self.options,
                self.mesh.layout(),
                head,
            )?;
            let started = Instant::now();
            let exe = self.client.compile_program(&program, &self.mesh)?;
            self.compile_seconds += started.elapsed().as_secs_f64();
            self.logits_exe = Some(LogitsProgram {
                head: head.clone(),
                exe,
            });
        }
        let Some(LogitsProgram { exe, .. }) = &self.logits_exe else {
            return Err(Error::Program("the forward program did not compile".into()));
        };
        exe.execute(&self.with_weights(&batch))?
            .iter()
            .map(|device| {
                device
                    .first()
                    .ok_or_else(|| Error::Program("the forward program returned nothing".into()))?
                    .to_host::<f32>()
            })
            .collect()
    }

    /// Each device's arguments of a forward program: `batch`'s inputs, then the weights.
    fn with_weights<'a>(&'a self, batch: &'a DeviceBatch) -> Vec<Vec<&'a Buffer>> {
        batch
            .buffers
            .iter()
            .zip(&self.state)
            .map(|(inp, state)| inp.iter().chain(&state[..self.weights]).collect())
            .collect()
    }
}
