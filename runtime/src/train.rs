//! The training driver: compiles a model's fused step (gradients + Adam), initialises and
//! shards the weights, keeps weights and optimizer state on the devices, and runs steps.
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

use std::time::Instant;

use stackscan::fsdp::{Adam, Init, ParamSpec, StackModel, train_step, with_adam};
use stackscan::plan::{Plan, PlanOptions};
use stackscan::{Axis, DType};

use crate::error::{Error, Result};
use crate::mesh::Mesh;
use crate::pjrt::{Buffer, Client, CompiledMemoryStats, Executable};
use crate::shard::shard;

/// One device's value of one model input.
#[derive(Clone, Debug, PartialEq)]
pub enum HostInput {
    /// Floating-point values (sent as the input's element type; f32 here).
    F32(Vec<f32>),
    /// Integer values (token ids, labels).
    I32(Vec<i32>),
}

/// What one step measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepReport {
    /// The global mean loss.
    pub loss: f32,
    /// Wall time of the step, host transfers of the inputs and the loss included.
    pub seconds: f64,
}

/// A model being trained on a mesh.
#[derive(Debug)]
pub struct Trainer {
    client: Client,
    mesh: Mesh,
    exe: Executable,
    plan: Plan,
    input_dims: Vec<Vec<i64>>,
    /// Per device: weights…, first moments…, second moments….
    state: Vec<Vec<Buffer>>,
    weights: usize,
    steps: usize,
    compile_seconds: f64,
}

/// A deterministic generator (SplitMix64) for initialisation.
struct SplitMix(u64);

impl SplitMix {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// Standard normal (Box–Muller).
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
}

fn init_values(spec: &ParamSpec, count: usize, rng: &mut SplitMix) -> Vec<f32> {
    match spec.init {
        Init::Normal(std) => (0..count).map(|_| (rng.normal() * std) as f32).collect(),
        Init::Ones => vec![1.0; count],
        Init::Zeros => vec![0.0; count],
    }
}

impl Trainer {
    /// Lowers, compiles and initialises `model` on `mesh` (weights from `seed`).
    pub fn new(
        client: &Client,
        mesh: &Mesh,
        model: &StackModel,
        options: PlanOptions,
        adam: Adam,
        seed: u64,
    ) -> Result<Trainer> {
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

        let specs = model.weights();
        if let Some((bad, _)) = specs.iter().find(|(p, _)| p.dtype != DType::F32) {
            return Err(Error::Program(format!(
                "parameter `{}` is {}; the trainer keeps f32 weights",
                bad.name, bad.dtype
            )));
        }
        let mut rng = SplitMix(seed);
        let mut state: Vec<Vec<Buffer>> = (0..n).map(|_| Vec::new()).collect();
        let mut moments: Vec<Vec<f32>> = Vec::new();
        let types = program.main().param_types();
        let first_weight = step.inputs;
        for (j, (spec, layers)) in specs.iter().enumerate() {
            let count = layers * spec.shape.iter().product::<i64>() as usize;
            let full = init_values(spec, count, &mut rng);
            let dims = &types[first_weight + j].dims;
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
            input_dims: types[..first_weight]
                .iter()
                .map(|t| t.dims.clone())
                .collect(),
            state,
            weights: specs.len(),
            steps: 0,
            compile_seconds,
        })
    }

    /// Runs one step on `inputs[d]`, device `d`'s share of every model input.
    pub fn step(&mut self, inputs: &[Vec<HostInput>]) -> Result<StepReport> {
        let n = self.mesh.size();
        if inputs.len() != n {
            return Err(Error::DeviceLists {
                expected: n,
                actual: inputs.len(),
            });
        }
        let started = Instant::now();
        // Adam's 1-based step; counted only once the step has run, so a rejected call does
        // not shift the bias correction of every later update.
        let step = self.steps + 1;
        let mut uploaded: Vec<Vec<Buffer>> = Vec::with_capacity(n);
        for (d, device_inputs) in inputs.iter().enumerate() {
            let dev = &self.mesh.devices()[d];
            if device_inputs.len() != self.input_dims.len() {
                return Err(Error::ArgumentCount {
                    device: d,
                    expected: self.input_dims.len(),
                    actual: device_inputs.len(),
                });
            }
            let mut bufs = Vec::new();
            for (input, dims) in device_inputs.iter().zip(&self.input_dims) {
                bufs.push(match input {
                    HostInput::F32(v) => self.client.buffer(v, dims, dev)?,
                    HostInput::I32(v) => self.client.buffer(v, dims, dev)?,
                });
            }
            bufs.push(self.client.buffer(&[step as f32], &[], dev)?);
            uploaded.push(bufs);
        }
        let lists: Vec<Vec<&Buffer>> = (0..n)
            .map(|d| {
                let (inp, rest) = uploaded[d].split_at(self.input_dims.len());
                inp.iter()
                    .chain(self.state[d].iter())
                    .chain(rest.iter())
                    .collect()
            })
            .collect();
        let mut out = self.exe.execute(&lists)?;
        let loss = out[0][0].to_host::<f32>()?[0];
        for (d, mut o) in out.drain(..).enumerate() {
            self.state[d] = o.split_off(1);
        }
        self.steps = step;
        Ok(StepReport {
            loss,
            seconds: started.elapsed().as_secs_f64(),
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

    /// Weight tensors (outer, then stacked per kind), each with its Adam moments.
    pub fn num_weights(&self) -> usize {
        self.weights
    }
}
