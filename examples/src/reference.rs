//! The reference's published configurations, predicted at full size from the plans we
//! compile, next to the published figures: DeepSeek-V3 FSDP-only, DeepSeek-V3 with EP = 4,
//! Qwen3.5-35B-A3B (nested scan), all on TPU7x, and an earlier DeepSeek-V3 run on 64 chips
//! with full remat.
//!
//! The reference states the model and the schedule of each table, not the chips, batch or
//! sequence; ours are stated in [`Scenario`] and [`ASSUMPTIONS`](crate::timeline::ASSUMPTIONS)
//! and printed with the table, so a mismatch can be traced to an assumption. Every scenario
//! runs through [`timeline::run`](crate::timeline::run), the same path as the command line.

use std::fmt::Write as _;
use std::path::Path;

use stackscan::Result;

use crate::timeline::{Summary, TimelineArgs, run};

/// What the reference published for a configuration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Published {
    /// Step-time change with prefetch (and deferred reduce-scatter) on, percent.
    pub change_percent: f64,
    /// Step time off and on, ms, where published.
    pub step_ms: Option<(f64, f64)>,
    /// Forward per layer off and on, ms, where published.
    pub forward_layer_ms: Option<(f64, f64)>,
    /// Backward per layer off and on, ms, where published.
    pub backward_layer_ms: Option<(f64, f64)>,
}

/// One configuration to predict.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scenario {
    /// What the reference calls it.
    pub name: &'static str,
    /// Directory name for its timelines.
    pub slug: &'static str,
    /// `--model`.
    pub model: &'static str,
    /// Chips (our assumption where the reference gives none).
    pub chips: usize,
    /// Expert-parallel degree.
    pub ep: Option<usize>,
    /// The published figures.
    pub published: Published,
}

/// The four configurations. The first three are the reference's TPU7x tables, which do not
/// give the chip count: 64 is assumed, as for the fourth (the change moves by 0.1 points from
/// 64 to 256 chips for DeepSeek-V3, since each chip gathers `(n−1)/n` of a layer either way).
pub const SCENARIOS: [Scenario; 4] = [
    Scenario {
        name: "DeepSeek-V3, FSDP only",
        slug: "deepseek-v3-fsdp",
        model: "deepseek-v3",
        chips: 64,
        ep: None,
        published: Published {
            change_percent: -34.2,
            step_ms: None,
            forward_layer_ms: None,
            backward_layer_ms: None,
        },
    },
    Scenario {
        name: "DeepSeek-V3, EP = 4",
        slug: "deepseek-v3-ep4",
        model: "deepseek-v3",
        chips: 64,
        ep: Some(4),
        published: Published {
            change_percent: -38.1,
            step_ms: None,
            forward_layer_ms: None,
            backward_layer_ms: None,
        },
    },
    Scenario {
        name: "Qwen3.5-35B-A3B, nested scan",
        slug: "qwen3.5-35b-a3b",
        model: "qwen3.5-35b-a3b",
        chips: 64,
        ep: None,
        published: Published {
            change_percent: -25.1,
            step_ms: None,
            forward_layer_ms: None,
            backward_layer_ms: None,
        },
    },
    Scenario {
        name: "DeepSeek-V3, 64 chips, full remat",
        slug: "deepseek-v3-64-remat",
        model: "deepseek-v3",
        chips: 64,
        ep: None,
        published: Published {
            change_percent: (4832.0 / 5222.0 - 1.0) * 100.0,
            step_ms: Some((5222.0, 4832.0)),
            forward_layer_ms: Some((92.0, 79.0)),
            backward_layer_ms: Some((277.0, 240.0)),
        },
    },
];

/// A scenario's prediction.
#[derive(Clone, Debug)]
pub struct Row {
    /// The scenario.
    pub scenario: Scenario,
    /// Sequences per chip.
    pub batch: usize,
    /// The prediction.
    pub summary: Summary,
    /// Layers in the stack.
    pub layers: usize,
}

impl Row {
    /// Step time off and on, ms.
    pub fn step_ms(&self) -> (f64, f64) {
        (
            self.summary.off.step_seconds() * 1e3,
            self.summary.on.step_seconds() * 1e3,
        )
    }

    /// Step-time change, percent.
    pub fn change_percent(&self) -> f64 {
        let (off, on) = self.step_ms();
        (on / off - 1.0) * 100.0
    }

    /// Mean forward and backward per layer, off and on, ms.
    pub fn per_layer_ms(&self) -> ((f64, f64), (f64, f64)) {
        let per = |s: f64| s * 1e3 / self.layers.max(1) as f64;
        let (off, on) = (&self.summary.off, &self.summary.on);
        (
            (per(off.forward.total), per(on.forward.total)),
            (per(off.backward.total), per(on.backward.total)),
        )
    }
}

/// Predicts every scenario on `hardware` at `batch` sequences per chip (default: one of 4096
/// tokens), writing each one's timelines under `out/<slug>/`.
pub fn predict_all(hardware: &str, batch: Option<usize>, out: &Path) -> Result<Vec<Row>> {
    SCENARIOS
        .iter()
        .map(|s| {
            let args = TimelineArgs {
                model: s.model.into(),
                config: None,
                hardware: hardware.into(),
                chips: s.chips,
                ep: s.ep,
                batch,
                out: out.join(s.slug),
                reference: false,
            };
            let summary = run(&args)?;
            let layers = summary.off.forward.steps.len();
            Ok(Row {
                scenario: *s,
                batch: batch.unwrap_or(1),
                summary,
                layers,
            })
        })
        .collect()
}

/// The rows as a Markdown table, published figures beside ours.
pub fn table(rows: &[Row]) -> String {
    let mut s = String::from(
        "| configuration | chips | EP | batch × seq per chip | predicted off → on (ms) | \
         predicted change | published | gap (points) |\n|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let (off, on) = r.step_ms();
        let p = r.scenario.published;
        let published = match p.step_ms {
            Some((a, b)) => format!("{a:.0} → {b:.0} ms, {:+.1} %", p.change_percent),
            None => format!("{:+.1} %", p.change_percent),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} × 4096 | {off:.0} → {on:.0} | {:+.1} % | {published} | {:+.1} |",
            r.scenario.name,
            r.scenario.chips,
            r.scenario.ep.unwrap_or(1),
            r.batch,
            r.change_percent(),
            r.change_percent() - p.change_percent,
        );
        if let (Some(f), Some(b)) = (p.forward_layer_ms, p.backward_layer_ms) {
            let ((fo, fn_), (bo, bn)) = r.per_layer_ms();
            let _ = writeln!(
                s,
                "| ↳ per layer (mean of {}) | | | | forward {fo:.1} → {fn_:.1}, backward {bo:.1} → \
                 {bn:.1} | | forward {:.0} → {:.0}, backward {:.0} → {:.0} | |",
                r.layers, f.0, f.1, b.0, b.1
            );
        }
    }
    s
}
