//! Whether a job's training step fits the memory it will run in, decided before anything
//! compiles: the per-device [`MemoryEstimate`] of the declared model under its plan against
//! the machine's free memory (a CPU plugin's devices are host memory) or an accelerator's
//! own, so a sequence far too long or a published size on a laptop is refused in a moment
//! rather than by the compiler or the kernel's out-of-memory killer.

use stackscan::cost::fusion::Rule;
use stackscan::cost::{MemoryEstimate, memory_estimate};
use stackscan::fsdp::StackModel;
use stackscan::plan::PlanOptions;
use stackscan::{Error, Result};

use crate::jobs::Job;

/// Where a job's devices keep their buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Devices {
    /// `n` devices of a CPU plugin: all of them in this machine's memory.
    Host(usize),
    /// `n` accelerators, each with its own memory; the host keeps one copy of the state.
    Accelerators(usize),
}

impl Devices {
    /// How many.
    pub fn count(self) -> usize {
        match self {
            Devices::Host(n) | Devices::Accelerators(n) => n,
        }
    }
}

impl Job {
    /// What one device holds running this job's step under `options`, its batch in
    /// `micro_batches` ([`estimate`]).
    pub fn memory_estimate(
        &self,
        devices: Devices,
        options: PlanOptions,
        micro_batches: usize,
    ) -> Result<MemoryEstimate> {
        estimate(&self.model, devices, options, micro_batches)
    }

    /// Refuses this job's step where it cannot fit this machine's memory ([`check`]).
    pub fn check_memory(
        &self,
        devices: Devices,
        options: PlanOptions,
        micro_batches: usize,
    ) -> Result<MemoryEstimate> {
        check(&self.model, devices, options, micro_batches)
    }
}

/// What one device holds running `model`'s step under `options`, its batch in
/// `micro_batches`: values materialised as the CPU compiler materialises them on `Host`
/// devices, as an accelerator's compiler does otherwise.
pub fn estimate(
    model: &StackModel,
    devices: Devices,
    options: PlanOptions,
    micro_batches: usize,
) -> Result<MemoryEstimate> {
    let rule = match devices {
        Devices::Host(_) => Rule::SingleConsumer,
        Devices::Accelerators(_) => Rule::Shared,
    };
    memory_estimate(model, devices.count(), options, micro_batches, rule)
}

/// Bytes the trainer keeps on the host beside an accelerator: every weight of `model` and its
/// two Adam moments, gathered for checkpoints and evaluation.
pub fn state_bytes(model: &StackModel) -> u64 {
    model
        .parameters()
        .iter()
        .map(|p| 3 * p.elements() as u64 * p.spec.dtype.size_in_bytes() as u64)
        .sum()
}

/// Refuses `model`'s step where it cannot fit the memory free on this machine
/// (`MemAvailable`, where the system reports it): on `Host` devices every device's estimate,
/// beside accelerators the state the host keeps. Returns the per-device estimate, for the
/// accelerator's own check once its client reports its memory ([`check_device_memory`]).
pub fn check(
    model: &StackModel,
    devices: Devices,
    options: PlanOptions,
    micro_batches: usize,
) -> Result<MemoryEstimate> {
    let estimate = estimate(model, devices, options, micro_batches)?;
    let Some(free) = available_host_memory() else {
        return Ok(estimate);
    };
    match devices {
        Devices::Host(n) => {
            let need = estimate.total().saturating_mul(n as u64);
            if need > free {
                return Err(too_big(format!(
                    "it needs about {} of host memory and {} are available: {} on each of \
                     {n} devices ({}); {}",
                    size(need),
                    size(free),
                    size(estimate.total()),
                    breakdown(&estimate),
                    remedies(false),
                )));
            }
        }
        Devices::Accelerators(_) => {
            let need = state_bytes(model);
            if need > free {
                return Err(too_big(format!(
                    "it needs {} of host memory for the weights and their Adam moments and \
                     {} are available; a smaller config (`--config tiny`) fits, `stackscan \
                     params` lists this one, and `--no-memory-check` tries anyway",
                    size(need),
                    size(free),
                )));
            }
        }
    }
    Ok(estimate)
}

/// Refuses `estimate` on an accelerator that has `available` bytes (what its client reports
/// it may allocate).
pub fn check_device_memory(estimate: &MemoryEstimate, available: u64) -> Result<()> {
    if estimate.total() <= available {
        return Ok(());
    }
    Err(too_big(format!(
        "it needs about {} on each device and the device has {} ({}); {}",
        size(estimate.total()),
        size(available),
        breakdown(estimate),
        remedies(true),
    )))
}

/// What a refusal of this module says, without the `memory` its error is tagged with.
pub fn reason(e: Error) -> String {
    match e {
        Error::InvalidOp {
            op: "memory",
            message,
        } => message,
        e => e.to_string(),
    }
}

fn too_big(message: String) -> Error {
    Error::InvalidOp {
        op: "memory",
        message,
    }
}

/// The parts of `e` that hold anything, largest first.
pub fn breakdown(e: &MemoryEstimate) -> String {
    let mut parts: Vec<_> = e.parts().into_iter().filter(|&(_, b)| b > 0).collect();
    parts.sort_by_key(|&(_, b)| std::cmp::Reverse(b));
    let parts: Vec<String> = parts
        .into_iter()
        .map(|(what, b)| format!("{} {what}", size(b)))
        .collect();
    parts.join(", ")
}

/// The flags that shrink a step, as a refusal names them.
fn remedies(more_devices_help: bool) -> String {
    format!(
        "a smaller `--batch` (with `--accumulate K` for K times it a step), a smaller `--seq`, \
         `--precision bf16`{} or a smaller config fits, and `--no-memory-check` tries anyway",
        if more_devices_help {
            ", more `--devices`"
        } else {
            ""
        }
    )
}

/// `bytes` in GB, or in MB below one GB.
pub fn size(bytes: u64) -> String {
    if bytes >= 1_000_000_000 {
        format!("{:.1} GB", bytes as f64 / 1e9)
    } else {
        format!("{:.1} MB", bytes as f64 / 1e6)
    }
}

/// `MemAvailable` of `/proc/meminfo` in bytes; `None` where there is no such file.
fn available_host_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// What generation holds on its one device for `rows` sequences of up to `capacity`
/// positions: every weight whole (f32) and every layer's state (key/value caches, recurrent
/// states), the state once (each call donates it to its result).
pub fn generation_bytes(model: &stackscan::decode::DecodeModel, rows: i64, capacity: i64) -> u64 {
    let bytes = |t: &stackscan::TensorType| {
        t.dims.iter().product::<i64>().max(0) as u64 * t.dtype.size_in_bytes() as u64
    };
    let weights: u64 = model.weight_types().iter().map(bytes).sum();
    let state: u64 = model.state_types(rows, capacity).iter().map(bytes).sum();
    weights + state
}

/// Refuses generation of `rows` sequences of up to `capacity` positions where it cannot fit:
/// the device's `limit` (an accelerator's, as its client reports it) or, without one, the
/// memory free on this machine. Returns the bytes it needs.
pub fn check_generation(
    model: &stackscan::decode::DecodeModel,
    rows: i64,
    capacity: i64,
    limit: Option<u64>,
) -> Result<u64> {
    let need = generation_bytes(model, rows, capacity);
    let (free, what) = match limit {
        Some(l) => (Some(l), "the device has"),
        None => (available_host_memory(), "are available on this machine"),
    };
    match free {
        Some(free) if need > free => Err(too_big(format!(
            "generating {rows} sequences of up to {capacity} positions needs about {} (the \
             weights whole and every layer's state) and {} {what}; fewer prompts, a smaller \
             `--max-new-tokens` or a smaller model fits, and `--no-memory-check` tries anyway",
            size(need),
            size(free),
        ))),
        _ => Ok(need),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Generation holds every weight (f32) and each layer's keys and values, counted by hand
    /// for the tiny Llama; a device too small is refused with the rows and positions.
    #[test]
    fn generation_counts_the_weights_and_each_layers_cache() {
        let c = crate::llama::LlamaConfig::tiny();
        let name: crate::registry::ModelName = "llama".parse().unwrap_or_else(|e| panic!("{e}"));
        let model = name
            .load("tiny")
            .and_then(|m| m.decode_model())
            .unwrap_or_else(|e| panic!("{e}"));
        let params: u64 = model
            .model()
            .weights()
            .iter()
            .map(|(p, layers)| *layers as u64 * p.shape.iter().product::<i64>() as u64)
            .sum();
        let (rows, capacity) = (3, 100);
        let cache = c.layers as u64 * 2 * (rows * capacity * c.kv_heads * c.head_dim) as u64;
        assert_eq!(
            generation_bytes(&model, rows, capacity),
            4 * (params + cache)
        );
        let e = check_generation(&model, rows, capacity, Some(1000)).unwrap_err();
        assert!(reason(e).contains("generating 3 sequences of up to 100 positions"));
        assert!(check_generation(&model, rows, capacity, Some(u64::MAX)).is_ok());
    }

    #[test]
    fn sizes_read_in_the_larger_unit_that_is_at_least_one() {
        assert_eq!(size(999_949_999), "999.9 MB");
        assert_eq!(size(1_250_000_000), "1.2 GB");
        assert_eq!(size(0), "0.0 MB");
    }

    #[test]
    fn a_step_over_the_device_names_its_parts_and_the_flags() {
        let e = MemoryEstimate {
            weights: 2_000_000_000,
            saved: 5_000_000_000,
            ..MemoryEstimate::default()
        };
        let err = check_device_memory(&e, 4_000_000_000)
            .unwrap_err()
            .to_string();
        assert!(err.contains("7.0 GB on each device"), "{err}");
        assert!(err.contains("the device has 4.0 GB"), "{err}");
        assert!(
            err.contains("5.0 GB saved layer inputs, 2.0 GB weights"),
            "{err}"
        );
        assert!(
            err.contains("`--seq`") && err.contains("more `--devices`"),
            "{err}"
        );
        assert!(check_device_memory(&e, 7_000_000_000).is_ok());
    }
}
