//! The bench's memory check: its largest schedule against this machine's memory (or, once
//! the client starts, each device's), before anything loads.

use stackscan_models::registry::ModelConfig;

use super::{BenchArgs, BenchError, schedule_options};

/// Refuses, before the plugin loads, a bench whose largest schedule cannot fit this machine's
/// memory (`memory::check`); returns that schedule's estimate per device, for an
/// accelerator's own check once its client says what it has (none with `--no-memory-check`).
pub fn check_memory(
    args: &BenchArgs,
    c: &ModelConfig,
) -> Result<Option<stackscan::cost::MemoryEstimate>, BenchError> {
    if args.no_memory_check {
        return Ok(None);
    }
    let (model, declared) = c.build()?;
    let devices = crate::cli::args::devices_kind(&args.plugin, usize::from(args.devices));
    let mut largest: Option<stackscan::cost::MemoryEstimate> = None;
    for &schedule in &args.options {
        let options = schedule_options(args, declared.precision, schedule);
        let e = stackscan_models::memory::check(&model, devices, options, 1).map_err(|e| {
            BenchError::Config(format!(
                "cannot bench this model here (schedule `{}`): {}",
                format!("{schedule:?}").to_lowercase(),
                stackscan_models::memory::reason(e)
            ))
        })?;
        if largest.is_none_or(|l| e.total() > l.total()) {
            largest = Some(e);
        }
    }
    Ok(largest)
}
