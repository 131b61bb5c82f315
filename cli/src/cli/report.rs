//! What `train` writes when the run is over: step times, compiled memory in binary units, the
//! loss and each auxiliary output's summary, and the optional loss-fell verdict.

use std::io::Write;

use stackscan_runtime::train::Trainer;

use super::CliError;

/// Writes step times, memory and the loss summary.
pub(super) fn summarise(
    trainer: &Trainer,
    losses: &[(usize, f32)],
    times: &[f64],
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let steady = &times[1.min(times.len().saturating_sub(1))..];
    let mean = steady.iter().sum::<f64>() / steady.len().max(1) as f64;
    let s = trainer.memory_stats()?;
    writeln!(out, "mean step time (after the first): {mean:.3} s")?;
    writeln!(
        out,
        "compiled memory per device: arguments {}, outputs {}, alias {}, temp {}, generated code {}; held {}",
        bytes(s.arguments),
        bytes(s.outputs),
        bytes(s.alias),
        bytes(s.temp),
        bytes(s.generated_code),
        bytes(s.footprint())
    )?;
    if let (Some(first), Some(last)) = (losses.first(), losses.last()) {
        writeln!(out, "loss {:.4} -> {:.4}", first.1, last.1)?;
    }
    if losses.len() >= 2 {
        let (early, late) = thirds(losses);
        let third = (losses.len() / 3).max(1);
        writeln!(
            out,
            "mean loss of the first {third} steps {early:.4}, of the last {third} {late:.4}"
        )?;
    }
    Ok(())
}

/// Each auxiliary output's first value and its mean over the last third of the run:
/// `moe.dropped 0.4312 -> mean of the last 6 steps 0.0123`.
pub(super) fn summarise_aux(
    aux: &[Vec<(String, f32)>],
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let Some(first) = aux.first() else {
        return Ok(());
    };
    let third = (aux.len() / 3).max(1);
    for (j, (name, value)) in first.iter().enumerate() {
        let late = &aux[aux.len() - third..];
        let mean = late
            .iter()
            .filter_map(|a| a.get(j))
            .map(|p| p.1)
            .sum::<f32>()
            / third as f32;
        writeln!(
            out,
            "{name} {value:.4} -> mean of the last {third} steps {mean:.4}"
        )?;
    }
    Ok(())
}

/// The mean loss of the first and of the last third of the run.
fn thirds(losses: &[(usize, f32)]) -> (f32, f32) {
    let third = (losses.len() / 3).max(1);
    let mean = |l: &[(usize, f32)]| l.iter().map(|p| p.1).sum::<f32>() / l.len() as f32;
    (
        mean(&losses[..third]),
        mean(&losses[losses.len() - third..]),
    )
}

/// Each step sees a new batch, so single losses are noisy; whether the model learned is
/// judged on the mean of the first and the last third of the run. One step has nothing to
/// compare with: it trained if it ran.
pub(super) fn learned(losses: &[(usize, f32)]) -> Result<(), CliError> {
    if losses.len() < 2 {
        return Ok(());
    }
    let (early, late) = thirds(losses);
    if late < early {
        Ok(())
    } else {
        Err(CliError::failed(
            "the mean loss of the last third of the steps did not fall below that of the first",
        ))
    }
}

/// `n` bytes in binary units, three significant figures: bytes below a KiB, else the
/// largest unit that keeps the figure at or above one.
pub fn bytes(n: i64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n.unsigned_abs() < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v.abs() >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    let digits = if v.abs() >= 100.0 {
        0
    } else if v.abs() >= 10.0 {
        1
    } else {
        2
    };
    format!("{v:.digits$} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::bytes;

    #[test]
    fn sizes_read_in_binary_units() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1024), "1.00 KiB");
        assert_eq!(bytes(8_716_740), "8.31 MiB");
        assert_eq!(bytes(14_580_152), "13.9 MiB");
        assert_eq!(bytes(3 << 30), "3.00 GiB");
        assert_eq!(bytes(700 << 20), "700 MiB");
    }
}
