//! The training driver: compiles a model's fused step (gradients + Adam), initialises and
//! shards the weights, keeps weights and optimizer state on the devices, and runs steps.
//!
//! Nothing a caller passes can corrupt the state: inputs are checked against the model's
//! [`InputSpec`]s before they are uploaded, and a step whose loss or gradients are not
//! finite leaves weights and moments as they were, reported as [`NonFinitePolicy`] says.
//!
//! [`Trainer::step`] runs one step and waits for it. A loop that should keep the host off the
//! devices' critical path uploads the next batch and launches it before waiting for the
//! previous step ([`Trainer::upload`], [`Trainer::launch`], [`Trainer::wait`]; see
//! [`pending`]'s example).
//!
//! ```no_run
//! use stackscan::fsdp::{Adam, StackModel};
//! use stackscan::plan::PlanOptions;
//! use stackscan_runtime::train::{HostInput, Trainer};
//! use stackscan_runtime::{Client, ClientOptions, Mesh, Plugin, plugin};
//!
//! /// Trains `model` for one step on 4 CPU devices, `batch(d)` being device `d`'s inputs.
//! fn one_step(model: &StackModel, batch: impl Fn(usize) -> Vec<HostInput>) -> stackscan_runtime::Result<f32> {
//!     let plugin = Plugin::load(plugin::resolve("cpu")?)?;
//!     let client = Client::new(&plugin, &ClientOptions::cpu(4))?;
//!     let mesh = Mesh::new(&client, "fsdp", 4)?;
//!     let options = PlanOptions::prefetch_deferred();
//!     let mut trainer = Trainer::new(&client, &mesh, model, options, Adam::default(), 0)?;
//!     let inputs: Vec<Vec<HostInput>> = (0..4).map(batch).collect();
//!     Ok(trainer.step(&inputs)?.loss)
//! }
//! ```

mod checkpoint;
mod forward;
mod import;
mod input;
pub mod pending;

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use stackscan::DType;
use stackscan::auxiliary::AuxOutput;
use stackscan::fsdp::{
    Adam, Init, InputSpec, ParamSpec, StackModel, TrainingProgram, training_program,
};
use stackscan::plan::{Plan, PlanOptions};

use crate::error::{Error, Result};
use crate::mesh::Mesh;
use crate::pjrt::{Buffer, CacheOutcome, Client, CompiledMemoryStats, Executable};
use crate::shard::shard;
use forward::LogitsProgram;
use stackscan::rng::Rng;

pub use checkpoint::{Progress, check_checkpoint, stored_weights, weight_names};
pub use import::check_hf_import;
pub use input::HostInput;
pub use pending::{DeviceBatch, HostTimes, PendingStep, StepReport};

/// What [`Trainer::step`] does with a step whose loss or gradients are not all
/// finite. Under either policy the update is not applied: weights, moments and Adam's step
/// count stay as they were, and [`Trainer::skipped_steps`] counts the step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NonFinitePolicy {
    /// Return [`Error::NonFinite`]: a NaN usually means bad data or a diverging run, which the
    /// caller should see rather than train past.
    #[default]
    Error,
    /// Return a report with `skipped: true` and go on, as mixed-precision training does with
    /// the rare overflowing step.
    Skip,
}

/// A model being trained on a mesh.
#[derive(Debug)]
pub struct Trainer {
    client: Client,
    mesh: Mesh,
    /// The training step, compiled when first needed ([`Trainer::compile`]): at once for a
    /// trainer that trains, never for one that only evaluates.
    exe: Option<Executable>,
    /// The lowered step, until it is compiled.
    program: Option<stackscan::Program>,
    plan: Plan,
    inputs: Vec<InputSpec>,
    /// The step's auxiliary outputs, returned after the state
    /// ([`TrainStep::aux`](stackscan::fsdp::TrainStep::aux)).
    aux: Vec<AuxOutput>,
    /// Per device: weights…, first moments…, second moments…, Adam's next step count (an
    /// `f32[]`, 1-based, advanced on the devices by each applied update).
    state: Vec<Vec<Buffer>>,
    /// Per weight tensor, in state order: its checkpoint name, spec, layer count and
    /// per-device dims (the moments share the weights' layout).
    params: Vec<checkpoint::Slot>,
    weights: usize,
    /// Updates applied, among the steps waited for.
    steps: usize,
    skipped: usize,
    on_non_finite: NonFinitePolicy,
    compile_seconds: f64,
    /// Steps launched so far; the last one's end cell, for the next step's span.
    launched: u64,
    last_end: Option<Arc<OnceLock<Instant>>>,
    /// The forward-only loss program, compiled on the first [`Trainer::evaluate`].
    eval_exe: Option<Executable>,
    micro_batches: usize,
    /// The model and plan options, for the forward program [`Trainer::logits`] lowers.
    model: StackModel,
    options: PlanOptions,
    /// The forward program of the last logits head asked for, compiled.
    logits_exe: Option<LogitsProgram>,
}

fn init_values(spec: &ParamSpec, count: usize, rng: &mut Rng) -> Vec<f32> {
    match spec.init {
        Init::Normal(std) => (0..count).map(|_| (rng.normal() * std) as f32).collect(),
        Init::Ones => vec![1.0; count],
        Init::Zeros => vec![0.0; count],
    }
}

impl Trainer {
    /// The declared model `M` (`#[derive(Model)]`) for `cfg`, trained with the options of its
    /// stack's `#[layer_stack]` attribute: [`stack_model`](stackscan::model::stack_model),
    /// then [`Trainer::new`]. Callers that override options build the model themselves.
    pub fn declared<M: stackscan::model::ModelForward>(
        client: &Client,
        mesh: &Mesh,
        cfg: &M::Config,
        adam: Adam,
        seed: u64,
    ) -> Result<Trainer> {
        let (model, options) = stackscan::model::stack_model::<M>(cfg)?;
        Trainer::new(client, mesh, &model, options, adam, seed)
    }

    /// Lowers, compiles and initialises `model` on `mesh` (weights from `seed`).
    ///
    /// What `options` leave to the backend is chosen for `client`'s plugin first
    /// ([`backend::plan_options`](crate::backend::plan_options): a prefetch issue point of
    /// `Auto` becomes a concrete one), so [`Trainer::plan`]'s options may differ from
    /// `options` there.
    ///
    /// The weights' element types and then the optimizer's hyper-parameters
    /// ([`training_program`] checks them before it lowers) are checked first, so a bad
    /// argument costs no lowering or compile.
    pub fn new(
        client: &Client,
        mesh: &Mesh,
        model: &StackModel,
        options: PlanOptions,
        adam: Adam,
        seed: u64,
    ) -> Result<Trainer> {
        Trainer::accumulating(client, mesh, model, options, adam, seed, 1)
    }

    /// [`Trainer::new`] with gradient accumulation: each step runs `micro_batches`
    /// micro-batches of the model's batch and applies one update with their mean gradient
    /// ([`accumulate`](stackscan::fsdp::accumulate)), so its inputs (and
    /// [`evaluate`](Self::evaluate)'s) are `micro_batches` times the model's per-device batch,
    /// micro-batch after micro-batch. Activation memory stays that of one micro-batch.
    pub fn accumulating(
        client: &Client,
        mesh: &Mesh,
        model: &StackModel,
        options: PlanOptions,
        adam: Adam,
        seed: u64,
        micro_batches: usize,
    ) -> Result<Trainer> {
        let mut trainer =
            Trainer::uncompiled(client, mesh, model, options, adam, seed, micro_batches)?;
        trainer.compile()?;
        Ok(trainer)
    }

    /// A trainer of `model` on `mesh` that evaluates and gives logits without compiling the
    /// training step ([`Trainer::evaluate`] and [`Trainer::logits`] compile their own forward
    /// programs): what `eval` runs. Its weights start from seed 0 until a checkpoint or a
    /// Hugging Face directory replaces them; a first [`Trainer::step`] would compile the step.
    pub fn for_evaluation(
        client: &Client,
        mesh: &Mesh,
        model: &StackModel,
        options: PlanOptions,
    ) -> Result<Trainer> {
        Trainer::uncompiled(client, mesh, model, options, Adam::default(), 0, 1)
    }

    /// [`Trainer::accumulating`] with the step lowered but not compiled.
    fn uncompiled(
        client: &Client,
        mesh: &Mesh,
        model: &StackModel,
        options: PlanOptions,
        adam: Adam,
        seed: u64,
        micro_batches: usize,
    ) -> Result<Trainer> {
        let specs = model.weights();
        if let Some((bad, _)) = specs.iter().find(|(p, _)| p.dtype != DType::F32) {
            return Err(Error::WeightType {
                param: bad.name.clone(),
                dtype: bad.dtype,
            });
        }
        let n = mesh.size();
        let options = crate::backend::plan_options(client, options);
        let TrainingProgram {
            update: program,
            step,
            aux,
        } = training_program(model, options, mesh.layout(), adam, micro_batches)?;

        let mut rng = Rng::new(seed);
        let mut state: Vec<Vec<Buffer>> = (0..n).map(|_| Vec::new()).collect();
        let mut moments: Vec<Vec<f32>> = Vec::new();
        let mut params = Vec::with_capacity(specs.len());
        let types = program.main().param_types();
        let first_weight = step.inputs;
        for (j, (spec, layers)) in specs.iter().enumerate() {
            let count = layers * spec.shape.iter().product::<i64>() as usize;
            let full = init_values(spec, count, &mut rng);
            let dims = &types[first_weight + j].dims;
            params.push(checkpoint::Slot::new(spec, *layers, dims));
            for (d, slab) in shard(spec, *layers, &full, n)?.into_iter().enumerate() {
                state[d].push(client.buffer(&slab, dims, &mesh.devices()[d])?);
            }
            moments.push(vec![
                0.0;
                count / if spec.shard_dim.is_some() { n } else { 1 }
            ]);
        }
        for _ in 0..2 {
            for (j, zeros) in moments.iter().enumerate() {
                let dims = &types[first_weight + j].dims;
                for (d, dev) in mesh.devices().iter().enumerate() {
                    state[d].push(client.buffer(zeros, dims, dev)?);
                }
            }
        }
        for (d, dev) in mesh.devices().iter().enumerate() {
            state[d].push(client.buffer(&[1.0f32], &[], dev)?);
        }
        Ok(Trainer {
            client: client.clone(),
            mesh: mesh.clone(),
            exe: None,
            program: Some(program),
            plan: step.plan,
            inputs: model
                .inputs
                .iter()
                .map(|i| i.clone().micro_batches(micro_batches))
                .collect(),
            aux,
            state,
            params: checkpoint::name_slots(model, params),
            weights: specs.len(),
            steps: 0,
            skipped: 0,
            on_non_finite: NonFinitePolicy::default(),
            compile_seconds: 0.0,
            launched: 0,
            last_end: None,
            eval_exe: None,
            micro_batches,
            model: model.clone(),
            options,
            logits_exe: None,
        })
    }

    /// Compiles the training step if it is not yet (or loads it from the client's compile
    /// cache); [`Trainer::new`] does at once, a trainer [`for_evaluation`](Self::for_evaluation)
    /// on its first step.
    pub fn compile(&mut self) -> Result<()> {
        if self.exe.is_none() {
            let Some(program) = self.program.take() else {
                return Err(Error::Program("the training step was not lowered".into()));
            };
            let started = Instant::now();
            self.exe = Some(self.client.compile_program(&program, &self.mesh)?);
            self.compile_seconds += started.elapsed().as_secs_f64();
        }
        Ok(())
    }

    /// Devices of the trainer's mesh (the per-device input lists a step takes).
    pub fn devices(&self) -> usize {
        self.mesh.size()
    }

    /// Micro-batches a step runs ([`Trainer::accumulating`]; 1 without accumulation).
    pub fn micro_batches(&self) -> usize {
        self.micro_batches
    }

    /// The same trainer with another policy for non-finite steps.
    pub fn on_non_finite(mut self, policy: NonFinitePolicy) -> Trainer {
        self.on_non_finite = policy;
        self
    }

    /// Runs one step on `inputs[d]`, device `d`'s share of every model input, and waits for
    /// it: [`upload`](Self::upload), [`launch`](Self::launch), [`wait`](Self::wait).
    ///
    /// Every input is checked against the model's [`InputSpec`] before anything is uploaded.
    /// A step whose loss or gradients are not all finite changes nothing and is
    /// handled by the [`NonFinitePolicy`].
    pub fn step(&mut self, inputs: &[Vec<HostInput>]) -> Result<StepReport> {
        let batch = self.upload(inputs)?;
        let pending = self.launch(batch)?;
        self.wait(pending)
    }

    /// Checks `inputs` (device `d`'s share of every model input at `inputs[d]`) against the
    /// model's [`InputSpec`]s and copies them to the devices, for a later
    /// [`launch`](Self::launch). Nothing of the trainer changes, so this can run while a
    /// launched step is still on the devices.
    pub fn upload(&self, inputs: &[Vec<HostInput>]) -> Result<DeviceBatch> {
        self.upload_as(&self.inputs, inputs)
    }

    /// Checks `inputs` (one list per device) against `specs`: the device count, each list's
    /// length, and every input's type, length and values.
    fn check_inputs(&self, specs: &[InputSpec], inputs: &[Vec<HostInput>]) -> Result<()> {
        let n = self.mesh.size();
        if inputs.len() != n {
            return Err(Error::DeviceLists {
                expected: n,
                actual: inputs.len(),
            });
        }
        for (d, device_inputs) in inputs.iter().enumerate() {
            if device_inputs.len() != specs.len() {
                return Err(Error::ArgumentCount {
                    device: d,
                    expected: specs.len(),
                    actual: device_inputs.len(),
                });
            }
            for (input, spec) in device_inputs.iter().zip(specs) {
                input.check(spec, d)?;
            }
        }
        Ok(())
    }

    /// [`upload`](Self::upload) checked against `specs`.
    fn upload_as(&self, specs: &[InputSpec], inputs: &[Vec<HostInput>]) -> Result<DeviceBatch> {
        let started = Instant::now();
        self.check_inputs(specs, inputs)?;
        let mut buffers: Vec<Vec<Buffer>> = Vec::with_capacity(inputs.len());
        for (device_inputs, dev) in inputs.iter().zip(self.mesh.devices()) {
            let mut bufs = Vec::with_capacity(device_inputs.len());
            for (input, spec) in device_inputs.iter().zip(specs) {
                bufs.push(match input {
                    HostInput::F32(v) => self.client.buffer(v, &spec.ty.dims, dev)?,
                    HostInput::I32(v) => self.client.buffer(v, &spec.ty.dims, dev)?,
                });
            }
            buffers.push(bufs);
        }
        Ok(DeviceBatch {
            buffers,
            started,
            upload_seconds: started.elapsed().as_secs_f64(),
        })
    }

    /// Queues one step on `batch` and returns without waiting for it. The trainer's state is
    /// the step's result from now on, so the next step can be launched at once (the plugin
    /// runs it after this one); [`wait`](Self::wait) gives the loss and applies the
    /// [`NonFinitePolicy`].
    pub fn launch(&mut self, batch: DeviceBatch) -> Result<PendingStep> {
        self.compile()?;
        let began = Instant::now();
        let inputs = self.inputs.len();
        if batch.buffers.len() != self.mesh.size()
            || batch.buffers.iter().any(|b| b.len() != inputs)
        {
            // A batch of another trainer: its lists do not fit this program.
            return Err(Error::DeviceLists {
                expected: self.mesh.size(),
                actual: batch.buffers.len(),
            });
        }
        let lists: Vec<Vec<&Buffer>> = batch
            .buffers
            .iter()
            .zip(&self.state)
            .map(|(inp, state)| inp.iter().chain(state.iter()).collect())
            .collect();
        // Results per device: loss, applied, weights…, first moments…, second moments…, next
        // step count, auxiliary outputs… (see `with_adam`). When `applied` is 0 the state results equal the old
        // state: the choice between old and new is made on the devices, because the step
        // donates the state (its buffers hold the results once it has run), so there is no old
        // state left to keep on the host's side. Should the run itself fail, the state is gone
        // with it, and every later step or save says so (`Error::Donated`).
        let Some(exe) = &self.exe else {
            return Err(Error::Program("the training step did not compile".into()));
        };
        let launched = exe.launch(&lists)?;
        drop(lists);
        let mut flags = Vec::with_capacity(launched.outputs.len());
        let mut kept = batch.buffers;
        let state_len = 3 * self.weights + 1;
        for (d, mut out) in launched.outputs.into_iter().enumerate() {
            let aux = out.split_off((2 + state_len).min(out.len()));
            kept.push(std::mem::replace(&mut self.state[d], out.split_off(2)));
            out.extend(aux);
            flags.push(out);
        }
        self.launched += 1;
        let end = Arc::new(OnceLock::new());
        let previous_end = self.last_end.replace(Arc::clone(&end));
        Ok(PendingStep {
            sequence: self.launched,
            flags,
            kept,
            completion: launched.completion,
            started: batch.started,
            queued: launched.queued,
            upload_seconds: batch.upload_seconds,
            launch_seconds: began.elapsed().as_secs_f64(),
            previous_end,
            end,
        })
    }

    /// Waits for a launched step, reads its loss and `applied` flag, counts it and applies the
    /// [`NonFinitePolicy`]. Steps may be waited for in any order, but a step's span (see
    /// [`StepReport`]) starts at its predecessor's end only once that one has been waited for.
    pub fn wait(&mut self, mut pending: PendingStep) -> Result<StepReport> {
        let completed = pending.completion.wait()?;
        let read_from = Instant::now();
        let (Some(loss), Some(applied)) = (
            pending.flags.first().and_then(|f| f.first()),
            pending.flags.first().and_then(|f| f.get(1)),
        ) else {
            return Err(Error::Program(
                "the training step returned no loss or `applied` flag".into(),
            ));
        };
        let loss = loss.to_host::<f32>()?[0];
        let applied = applied.to_host::<i32>()?[0] != 0;
        let aux = self
            .aux
            .iter()
            .zip(pending.flags[0].iter().skip(2))
            .map(|(output, value)| Ok((output.name.clone(), value.to_host::<f32>()?[0])))
            .collect::<Result<Vec<_>>>()?;
        let read_to = Instant::now();
        // The step is done: its batch and the state it replaced can go without blocking.
        drop(std::mem::take(&mut pending.kept));
        // With a later step already queued the devices are busy while this one is read back,
        // so the step ends at its completion; otherwise the read-back is on the path too.
        let end = if self.launched > pending.sequence {
            completed
        } else {
            read_to
        };
        let _ = pending.end.set(end);
        let previous_end = pending.previous_end.as_ref().and_then(|e| e.get().copied());
        let (seconds, device_seconds) = pending::span(
            pending.started,
            previous_end,
            pending.queued,
            completed,
            end,
        );
        let report = StepReport {
            loss,
            seconds,
            device_seconds,
            host: HostTimes {
                upload: pending.upload_seconds,
                launch: pending.launch_seconds,
                read: (read_to - read_from).as_secs_f64(),
            },
            skipped: !applied,
            aux,
        };
        if applied {
            self.steps += 1;
            return Ok(report);
        }
        self.skipped += 1;
        match self.on_non_finite {
            NonFinitePolicy::Error => Err(Error::NonFinite {
                step: self.steps + 1,
                loss,
            }),
            NonFinitePolicy::Skip => Ok(report),
        }
    }

    /// Memory XLA planned per device for the step; an error for a trainer that has not
    /// compiled it ([`Trainer::for_evaluation`]).
    pub fn memory_stats(&self) -> Result<CompiledMemoryStats> {
        match &self.exe {
            Some(exe) => exe.memory_stats(),
            None => Err(Error::Program(
                "the training step is not compiled: this trainer only evaluated".into(),
            )),
        }
    }

    /// Seconds the programs compiled so far took to compile (nearly all of it in XLA), or to
    /// load from the client's compile cache: the step's, and the evaluation's and logits'
    /// once they ran.
    pub fn compile_seconds(&self) -> f64 {
        self.compile_seconds
    }

    /// Whether the step was compiled or loaded from the client's compile cache; for a
    /// trainer that only evaluated, the evaluation program's ([`CacheOutcome::Off`] before it
    /// ran).
    pub fn cache_outcome(&self) -> &CacheOutcome {
        static NOTHING: CacheOutcome = CacheOutcome::Off;
        self.exe
            .as_ref()
            .or(self.eval_exe.as_ref())
            .map_or(&NOTHING, Executable::cache_outcome)
    }

    /// The schedule the step was lowered from.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Updates applied so far (Adam's step count), among the steps waited for: a step that
    /// was launched and not yet [waited for](Self::wait) is not counted (on the devices it is,
    /// and a checkpoint saves the devices' count).
    pub fn steps(&self) -> usize {
        self.steps
    }

    /// Steps whose update was dropped because it was not finite, under either policy, among
    /// the steps waited for.
    pub fn skipped_steps(&self) -> usize {
        self.skipped
    }

    /// Weight tensors (outer, then stacked per kind), each with its Adam moments.
    pub fn num_weights(&self) -> usize {
        self.weights
    }
}
