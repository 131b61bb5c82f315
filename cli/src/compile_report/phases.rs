//! XLA's compile time split by phase, read from the compiler's own log lines. XLA times every
//! HLO pass and its backend's whole compile, and logs each at verbose level 1 of the file that
//! times it; no API returns them. So `compile-report --phases` runs the report again in a
//! child process whose environment turns those lines on ([`LOG_ENV`]), and [`parse`] reads
//! them from its standard error.

use std::collections::BTreeMap;

use serde::Serialize;

/// The environment that makes the plugin log its timings: TSL's log threshold at INFO, and
/// verbose level 1 for the pass pipeline (each pass) and the CPU and GPU compilers (the
/// backend). The plugin reads both before it first logs, so they must be set before it loads.
pub const LOG_ENV: [(&str, &str); 2] = [
    ("TF_CPP_MIN_LOG_LEVEL", "0"),
    (
        "TF_CPP_VMODULE",
        "hlo_pass_pipeline=1,cpu_compiler=1,gpu_compiler=1",
    ),
];

/// Where XLA's compile time went.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Phases {
    /// Seconds in HLO passes (each pass once: a pipeline that is itself logged as a pass, such
    /// as `simplification` inside another, is not counted again).
    pub hlo_pass_seconds: f64,
    /// Seconds of the backend's compile: code generation and LLVM for every kernel (the CPU
    /// compiler's `Compiling [...] for CPU using JIT`, the GPU compiler's own timer).
    pub backend_seconds: f64,
    /// The slowest passes, slowest first, each with its total over every run of it.
    pub passes: Vec<(String, f64)>,
}

/// Reads XLA's timing lines from a log: `HLO pass: NAME time: … (N us)` for each pass run,
/// `Running HLO pass pipeline on module M: NAME` naming the pipelines, and the backend's
/// `Compiling [M] for … time: … (N us)`. `top` slowest passes are kept. `None` when the log
/// has no timing line at all (a plugin that logs none).
pub fn parse(log: &str, top: usize) -> Option<Phases> {
    let mut pipelines = std::collections::BTreeSet::new();
    let mut passes: BTreeMap<String, f64> = BTreeMap::new();
    let mut backend = 0.0;
    let mut found = false;
    for line in log.lines() {
        if let Some((_, name)) = line.split_once("Running HLO pass pipeline on module ") {
            if let Some((_, pipeline)) = name.split_once(": ") {
                pipelines.insert(pipeline.trim().to_owned());
            }
        } else if let Some((_, rest)) = line.split_once("HLO pass: ") {
            if let (Some((name, _)), Some(us)) = (rest.split_once(" time: "), micros(rest)) {
                *passes.entry(name.trim().to_owned()).or_insert(0.0) += us * 1e-6;
                found = true;
            }
        } else if line.contains("] Compiling [")
            && line.contains(" time: ")
            && let Some(us) = micros(line)
        {
            backend += us * 1e-6;
            found = true;
        }
    }
    if !found {
        return None;
    }
    passes.retain(|name, _| !pipelines.contains(name));
    let hlo_pass_seconds = passes.values().sum();
    let mut slowest: Vec<(String, f64)> = passes.into_iter().collect();
    slowest.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    slowest.truncate(top);
    Some(Phases {
        hlo_pass_seconds,
        backend_seconds: backend,
        passes: slowest,
    })
}

/// The `(N us)` of a timing line's first `time:`.
fn micros(line: &str) -> Option<f64> {
    let (_, after) = line.split_once(" time: ")?;
    let (_, inside) = after.split_once('(')?;
    let (n, _) = inside.split_once(" us)")?;
    n.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines as the CPU plugin writes them (trimmed of their timestamps' digits).
    const LOG: &str = "\
I0000 00:00:1.0 1 hlo_pass_pipeline.cc:298] Running HLO pass pipeline on module m: simplification
I0000 00:00:1.0 1 hlo_pass_pipeline.cc:171] HLO pass: algsimp time: 2.5 ms (2500 us) (cumulative: 2.5 ms, max: 2.5 ms, #called: 1)
I0000 00:00:1.0 1 hlo_pass_pipeline.cc:171] HLO pass: algsimp time: 1.5 ms (1500 us) (cumulative: 4 ms, max: 2.5 ms, #called: 2)
I0000 00:00:1.0 1 hlo_pass_pipeline.cc:171] HLO pass: simplification time: 4.2 ms (4200 us) (cumulative: 8.2 ms, max: 4.2 ms, #called: 3)
I0000 00:00:1.0 1 hlo_pass_pipeline.cc:171] HLO pass: fusion time: 10 ms (10000 us) (cumulative: 18.2 ms, max: 10 ms, #called: 4)
I0000 00:00:1.0 1 cpu_compiler.cc:2064] Compiling: m
I0000 00:00:1.0 1 cpu_compiler.cc:2067] Compiling [m] for CPU using JIT time: 27.6 s (27600000 us) (cumulative: 27.6 s, max: 27.6 s, #called: 1)
";

    #[test]
    fn passes_are_summed_once_and_the_backend_read() {
        let p = parse(LOG, 10).unwrap();
        // algsimp's two lines and fusion's one; the `simplification` pipeline's own line is
        // not counted on top of its passes.
        assert!((p.hlo_pass_seconds - 0.014).abs() < 1e-12, "{p:?}");
        assert!((p.backend_seconds - 27.6).abs() < 1e-9);
        assert_eq!(p.passes[0].0, "fusion");
        assert_eq!(p.passes.len(), 2);
        assert_eq!(parse(LOG, 1).unwrap().passes.len(), 1);
    }

    #[test]
    fn a_log_without_timings_is_none() {
        assert_eq!(parse("W0000 something else\n", 5), None);
        assert_eq!(micros("HLO pass: x time: 3 ms (abc us)"), None);
    }
}
