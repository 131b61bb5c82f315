//! The training driver: compiles a model's fused step (gradients + Adam), initialises and
//! shards the weights, keeps weights and optimizer state on the devices, and runs steps.
//!
//! Nothing a caller passes can corrupt the state: inputs are checked against the model's
//! [`InputSpec`]s before they are uploaded, and a step whose loss, gradients or update are not
//! finite leaves weights and moments as they were, reported as [`NonFinitePolicy`] says.
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
mod input;

use std::time::Instant;

use stackscan::fsdp::{Adam, Init, InputSpec, ParamSpec, StackModel, train_step, with_adam};
use stackscan::plan::{Plan, PlanOptions};
use stackscan::{Axis, DType};

use crate::error::{Error, Result};
use crate::mesh::Mesh;
use crate::pjrt::{Buffer, Client, CompiledMemoryStats, Executable};
use crate::rng::Rng;
use crate::shard::shard;

pub use checkpoint::{Progress, weight_names};
pub use input::HostInput;

/// What one step measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepReport {
    /// The global mean loss (NaN or infinite when the step was skipped).
    pub loss: f32,
    /// Wall time of the step, host transfers of the inputs and the loss included.
    pub seconds: f64,
    /// Whether the update was dropped because the loss, a gradient or the update was not
    /// finite (only under [`NonFinitePolicy::Skip`]; the other policy returns an error).
    pub skipped: bool,
}

/// What [`Trainer::step`] does with a step whose loss, gradients or update are not all
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
    exe: Executable,
    plan: Plan,
    inputs: Vec<InputSpec>,
    /// Per device: weights…, first moments…, second moments….
    state: Vec<Vec<Buffer>>,
    /// Per weight tensor, in state order: its checkpoint name, spec, layer count and
    /// per-device dims (the moments share the weights' layout).
    params: Vec<checkpoint::Slot>,
    weights: usize,
    steps: usize,
    skipped: usize,
    on_non_finite: NonFinitePolicy,
    compile_seconds: f64,
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
    /// The optimizer's hyper-parameters and the weights' element types are checked first, so
    /// a bad argument costs no lowering or compile.
    pub fn new(
        client: &Client,
        mesh: &Mesh,
        model: &StackModel,
        options: PlanOptions,
        adam: Adam,
        seed: u64,
    ) -> Result<Trainer> {
        adam.validate()?;
        let specs = model.weights();
        if let Some((bad, _)) = specs.iter().find(|(p, _)| p.dtype != DType::F32) {
            return Err(Error::WeightType {
                param: bad.name.clone(),
                dtype: bad.dtype,
            });
        }
        let n = mesh.size();
        let axis = Axis {
            name: mesh.axis().to_owned(),
            size: n,
        };
        let step = train_step(model, options, &axis)?;
        let program = with_adam(&step, adam)?;
        let started = Instant::now();
        let exe = client.compile_program(&program, mesh)?;
        let compile_seconds = started.elapsed().as_secs_f64();

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
        Ok(Trainer {
            client: client.clone(),
            mesh: mesh.clone(),
            exe,
            plan: step.plan,
            inputs: model.inputs.clone(),
            state,
            params: checkpoint::name_slots(model, params),
            weights: specs.len(),
            steps: 0,
            skipped: 0,
            on_non_finite: NonFinitePolicy::default(),
            compile_seconds,
        })
    }

    /// The same trainer with another policy for non-finite steps.
    pub fn on_non_finite(mut self, policy: NonFinitePolicy) -> Trainer {
        self.on_non_finite = policy;
        self
    }

    /// Runs one step on `inputs[d]`, device `d`'s share of every model input.
    ///
    /// Every input is checked against the model's [`InputSpec`] before anything is uploaded.
    /// A step whose loss, gradients or update are not all finite changes nothing and is
    /// handled by the [`NonFinitePolicy`].
    pub fn step(&mut self, inputs: &[Vec<HostInput>]) -> Result<StepReport> {
        let n = self.mesh.size();
        if inputs.len() != n {
            return Err(Error::DeviceLists {
                expected: n,
                actual: inputs.len(),
            });
        }
        for (d, device_inputs) in inputs.iter().enumerate() {
            if device_inputs.len() != self.inputs.len() {
                return Err(Error::ArgumentCount {
                    device: d,
                    expected: self.inputs.len(),
                    actual: device_inputs.len(),
                });
            }
            for (input, spec) in device_inputs.iter().zip(&self.inputs) {
                input.check(spec, d)?;
            }
        }
        let started = Instant::now();
        // Adam's 1-based step; counted only once an update has been applied, so a rejected or
        // skipped call does not shift the bias correction of every later update.
        let step = self.steps + 1;
        let mut uploaded: Vec<Vec<Buffer>> = Vec::with_capacity(n);
        for (d, device_inputs) in inputs.iter().enumerate() {
            let dev = &self.mesh.devices()[d];
            let mut bufs = Vec::with_capacity(device_inputs.len() + 1);
            for (input, spec) in device_inputs.iter().zip(&self.inputs) {
                bufs.push(match input {
                    HostInput::F32(v) => self.client.buffer(v, &spec.ty.dims, dev)?,
                    HostInput::I32(v) => self.client.buffer(v, &spec.ty.dims, dev)?,
                });
            }
            bufs.push(self.client.buffer(&[step as f32], &[], dev)?);
            uploaded.push(bufs);
        }
        let lists: Vec<Vec<&Buffer>> = (0..n)
            .map(|d| {
                let (inp, rest) = uploaded[d].split_at(self.inputs.len());
                inp.iter()
                    .chain(self.state[d].iter())
                    .chain(rest.iter())
                    .collect()
            })
            .collect();
        // Results per device: loss, applied, weights…, first moments…, second moments… (see
        // `with_adam`). When `applied` is 0 the state results equal the old state.
        let mut out = self.exe.execute(&lists)?;
        let loss = out[0][0].to_host::<f32>()?[0];
        let applied = out[0][1].to_host::<i32>()?[0] != 0;
        for (d, mut o) in out.drain(..).enumerate() {
            self.state[d] = o.split_off(2);
        }
        if !applied {
            self.skipped += 1;
            if self.on_non_finite == NonFinitePolicy::Error {
                return Err(Error::NonFinite { step, loss });
            }
        } else {
            self.steps = step;
        }
        Ok(StepReport {
            loss,
            seconds: started.elapsed().as_secs_f64(),
            skipped: !applied,
        })
    }

    /// Memory XLA planned per device for the step.
    pub fn memory_stats(&self) -> Result<CompiledMemoryStats> {
        self.exe.memory_stats()
    }

    /// Seconds the step took to emit and compile (nearly all of it in XLA).
    pub fn compile_seconds(&self) -> f64 {
        self.compile_seconds
    }

    /// The schedule the step was lowered from.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Updates applied so far (Adam's step count).
    pub fn steps(&self) -> usize {
        self.steps
    }

    /// Steps whose update was dropped because it was not finite, under either policy.
    pub fn skipped_steps(&self) -> usize {
        self.skipped
    }

    /// Weight tensors (outer, then stacked per kind), each with its Adam moments.
    pub fn num_weights(&self) -> usize {
        self.weights
    }
}
