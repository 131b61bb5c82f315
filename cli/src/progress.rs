//! The training progress display: an indicatif bar (step, loss, tokens/s, step time, ETA) when
//! stderr is a terminal, one plain line per step when it is not (a log file, CI), nothing with
//! `--quiet`. Log lines printed meanwhile go through [`suspended`], so they appear above the
//! bar instead of tearing it.

use std::io::Write;
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The bar being drawn, if any, for [`suspended`].
static ACTIVE: Mutex<Option<ProgressBar>> = Mutex::new(None);

/// Runs `f` (which writes to stderr) with the active progress bar, if any, cleared and redrawn
/// after.
pub fn suspended<R>(f: impl FnOnce() -> R) -> R {
    let bar = ACTIVE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    match bar {
        Some(bar) => bar.suspend(f),
        None => f(),
    }
}

/// How progress is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Display {
    /// A redrawn bar (stderr is a terminal).
    Bar,
    /// One line per step.
    Lines,
    /// Nothing.
    Off,
}

impl Display {
    /// The display for stderr: a bar on a terminal, lines otherwise, nothing when `quiet`.
    pub fn for_stderr(quiet: bool) -> Display {
        if quiet {
            Display::Off
        } else if stackscan_runtime::xla_log::stderr_is_terminal() {
            Display::Bar
        } else {
            Display::Lines
        }
    }
}

/// One finished step, as the display shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct StepShown {
    /// The step's number, from 1.
    pub step: usize,
    /// Its loss.
    pub loss: f32,
    /// Its wall time.
    pub seconds: f64,
    /// Tokens it trained on, all devices together.
    pub tokens: usize,
    /// Its auxiliary outputs by name (an MoE model's dropped fraction and imbalance).
    pub aux: Vec<(String, f32)>,
}

/// Progress of a training run of `total` steps.
#[derive(Debug)]
pub struct TrainProgress {
    display: Display,
    bar: Option<ProgressBar>,
    total: usize,
    /// Steps shown and their summed time, for the ETA of the plain lines.
    shown: usize,
    seconds: f64,
}

/// The bar's layout: position, loss and throughput in the message, indicatif's ETA, and the
/// bar last, taking what the terminal's width leaves (so the line never wraps).
const TEMPLATE: &str = "{spinner} step {pos}/{len} {msg} | eta {eta} [{wide_bar}]";

impl TrainProgress {
    /// A display of steps `first..=total` (`first` > 1 when resuming).
    pub fn new(display: Display, first: usize, total: usize) -> TrainProgress {
        let bar = (display == Display::Bar).then(|| {
            let bar =
                ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template(TEMPLATE)
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> ");
            bar.set_style(style);
            bar.set_position(first.saturating_sub(1) as u64);
            bar.reset_eta();
            bar.set_message(format!("waiting for step {first}"));
            bar.enable_steady_tick(Duration::from_millis(200));
            *ACTIVE
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(bar.clone());
            bar
        });
        TrainProgress {
            display,
            bar,
            total,
            shown: 0,
            seconds: 0.0,
        }
    }

    /// Shows a finished step; plain lines go to `lines`.
    pub fn step(&mut self, s: StepShown, lines: &mut dyn Write) -> std::io::Result<()> {
        self.shown += 1;
        self.seconds += s.seconds;
        let rate = s.tokens as f64 / s.seconds.max(1e-9);
        let mut msg = format!("loss {:.4}", s.loss);
        for (name, value) in &s.aux {
            msg.push_str(&format!(" | {name} {}", short(*value)));
        }
        msg.push_str(&format!(
            " | {} tok/s | {:.3} s/step",
            thousands(rate),
            s.seconds
        ));
        match (&self.bar, self.display) {
            (Some(bar), _) => {
                bar.set_message(msg);
                bar.set_position(s.step as u64);
            }
            (None, Display::Lines) => {
                let left = self.total.saturating_sub(s.step) as f64;
                let eta = left * self.seconds / self.shown as f64;
                writeln!(
                    lines,
                    "step {}/{}  {msg}  eta {eta:.0} s",
                    s.step, self.total
                )?;
            }
            (None, _) => {}
        }
        Ok(())
    }

    /// Ends the display (the bar stays on screen with its last values).
    pub fn finish(self) {
        if let Some(bar) = &self.bar {
            bar.finish();
        }
        *ACTIVE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    }
}

impl Drop for TrainProgress {
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            // A run that failed mid-way: leave the bar where it stopped, then the error.
            bar.abandon();
            *ACTIVE
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
        }
    }
}

/// `12345.6` as `12,346`.
fn thousands(x: f64) -> String {
    let digits = format!("{:.0}", x.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A value in four decimals, or in three significant figures when that would show none of
/// it (a learning rate of `1.000e-4`).
fn short(v: f32) -> String {
    if v != 0.0 && v.abs() < 0.01 {
        format!("{v:.3e}")
    } else {
        format!("{v:.4}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_lines_show_step_loss_rate_and_eta() {
        let mut p = TrainProgress::new(Display::Lines, 1, 4);
        let mut out = Vec::new();
        for (step, seconds) in [(1, 2.0), (2, 1.0)] {
            let s = StepShown {
                step,
                loss: 6.5,
                seconds,
                tokens: 4096,
                aux: vec![("moe.dropped".into(), 0.25)],
            };
            p.step(s, &mut out).expect("write");
        }
        p.finish();
        let text = String::from_utf8(out).expect("utf-8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "step 1/4  loss 6.5000 | moe.dropped 0.2500 | 2,048 tok/s | 2.000 s/step  eta 6 s",
                // Two steps left at the mean of the two step times so far.
                "step 2/4  loss 6.5000 | moe.dropped 0.2500 | 4,096 tok/s | 1.000 s/step  eta 3 s",
            ]
        );
    }

    #[test]
    fn off_shows_nothing() {
        let mut p = TrainProgress::new(Display::Off, 1, 2);
        let mut out = Vec::new();
        let s = StepShown {
            step: 1,
            loss: 1.0,
            seconds: 1.0,
            tokens: 1,
            aux: Vec::new(),
        };
        p.step(s, &mut out).expect("write");
        assert!(out.is_empty());
    }

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0.4), "0");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(1234567.0), "1,234,567");
    }
}
