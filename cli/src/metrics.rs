//! Per-step training metrics as JSON lines (`--metrics FILE`): one object per step, written
//! and flushed as the step ends, so a run that dies keeps the lines of the steps it finished
//! and `tail -f` follows a live one.
//!
//! ```text
//! {"step":1,"loss":6.3063,"seconds":0.51,"tokens":4096,"tokens_per_second":8031.4,"lr":0.01,"skipped":false,"data_position":4}
//! ```
//!
//! A model whose layers report auxiliary outputs adds one key per output
//! ([`StepReport::aux`](stackscan_runtime::train::StepReport)): an MoE model's
//! `"moe.dropped"` (fraction of routed assignments dropped for capacity), `"moe.imbalance"`
//! (busiest expert's load over the mean) and, with a balancing loss, `"moe.aux_loss"`.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One step's line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepMetrics {
    /// The step's number, from 1.
    pub step: usize,
    /// The global mean loss (`null` when not finite: JSON has no NaN).
    pub loss: Option<f32>,
    /// Wall time of the step.
    pub seconds: f64,
    /// Tokens trained on, all devices together.
    pub tokens: usize,
    /// `tokens / seconds`.
    pub tokens_per_second: f64,
    /// The learning rate.
    pub lr: f64,
    /// Whether the update was skipped as not finite.
    pub skipped: bool,
    /// The data position after the step (device batches consumed), what a checkpoint saved
    /// here would resume from.
    pub data_position: u64,
    /// The step's auxiliary outputs by name (none for most models).
    #[serde(flatten)]
    pub aux: BTreeMap<String, f32>,
}

/// An open metrics file.
#[derive(Debug)]
pub struct MetricsFile {
    path: PathBuf,
    out: BufWriter<File>,
}

impl MetricsFile {
    /// Creates (or truncates) `path`; with `append`, a resumed run adds to what is there.
    pub fn create(path: &Path, append: bool) -> std::io::Result<MetricsFile> {
        let file = OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(path)?;
        Ok(MetricsFile {
            path: path.to_path_buf(),
            out: BufWriter::new(file),
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes one line of any other kind (an evaluation's) and flushes it.
    pub fn write_value(&mut self, v: &serde_json::Value) -> std::io::Result<()> {
        serde_json::to_writer(&mut self.out, v)?;
        self.out.write_all(b"\n")?;
        self.out.flush()
    }

    /// Writes one line and flushes it.
    pub fn write(&mut self, m: &StepMetrics) -> std::io::Result<()> {
        serde_json::to_writer(&mut self.out, m)?;
        self.out.write_all(b"\n")?;
        self.out.flush()
    }
}

/// Reads a metrics file back, one [`StepMetrics`] per line.
pub fn read(path: &Path) -> Result<Vec<StepMetrics>, Box<dyn std::error::Error>> {
    let text = std::fs::read_to_string(path)?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).map_err(Into::into))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_and_a_nan_loss_is_null() {
        let dir = std::env::temp_dir().join(format!("stackscan-metrics-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("m.jsonl");
        let a = StepMetrics {
            step: 1,
            loss: Some(6.25),
            seconds: 0.5,
            tokens: 4096,
            tokens_per_second: 8192.0,
            lr: 1e-2,
            skipped: false,
            data_position: 4,
            aux: [("moe.dropped".to_owned(), 0.125)].into_iter().collect(),
        };
        let b = StepMetrics {
            step: 2,
            loss: None,
            skipped: true,
            aux: BTreeMap::new(),
            ..a.clone()
        };
        let mut f = MetricsFile::create(&path, false).expect("create");
        f.write(&a).expect("write");
        drop(f);
        let mut f = MetricsFile::create(&path, true).expect("append");
        f.write(&b).expect("write");
        drop(f);
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(
            text.lines()
                .nth(1)
                .expect("2 lines")
                .contains("\"loss\":null"),
            "{text}"
        );
        assert_eq!(read(&path).expect("parse"), [a, b]);
        std::fs::remove_dir_all(dir).expect("clean up");
    }
}
