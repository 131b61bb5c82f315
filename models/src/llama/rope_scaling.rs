//! Llama 3's RoPE scaling (`rope_scaling` of type `llama3` in the `config.json` of Llama 3.1,
//! 3.2 and 3.3), as that model defines it: feature pairs whose wavelength is short against
//! the original context keep their frequency, those whose wavelength is long against it are
//! divided by `factor`, and the pairs between are blended by a linear ramp in the number of
//! turns they make over the original context. Attention itself is unchanged.
//!
//! ```
//! use stackscan_models::llama::Llama3RopeScaling;
//!
//! let s = Llama3RopeScaling::llama3_1();
//! let inv = s.inv_freq(500_000.0, 128);
//! assert_eq!(inv[0], 1.0); // the fastest pair keeps its frequency
//! let plain = 500_000f64.powf(-126.0 / 128.0);
//! assert!((inv[63] - plain / 8.0).abs() < 1e-18); // the slowest is divided by the factor
//! ```

use serde::{Deserialize, Serialize};

/// Llama 3's `rope_scaling`, its fields named as the `config.json` names them.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Llama3RopeScaling {
    /// How much longer the context is than the original (8 for Llama 3.1).
    pub factor: f64,
    /// Pairs turning fewer times than this over the original context are divided by
    /// `factor` (1 for Llama 3.1).
    pub low_freq_factor: f64,
    /// Pairs turning more times than this keep their frequency (4 for Llama 3.1).
    pub high_freq_factor: f64,
    /// The context the model was pre-trained at (8192 for Llama 3.1).
    pub original_max_position_embeddings: f64,
}

impl Llama3RopeScaling {
    /// Llama 3.1's published `rope_scaling` (also Llama 3.2's and 3.3's, with their factors).
    pub const fn llama3_1() -> Llama3RopeScaling {
        Llama3RopeScaling {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192.0,
        }
    }

    /// Checks the values the frequencies rely on; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        for (name, v) in [
            ("factor", self.factor),
            ("low_freq_factor", self.low_freq_factor),
            (
                "original_max_position_embeddings",
                self.original_max_position_embeddings,
            ),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("`rope_scaling.{name}` must be positive, got {v}"));
            }
        }
        if !(self.high_freq_factor.is_finite() && self.high_freq_factor > self.low_freq_factor) {
            return Err(format!(
                "`rope_scaling.high_freq_factor` ({}) must be above `low_freq_factor` ({})",
                self.high_freq_factor, self.low_freq_factor
            ));
        }
        Ok(())
    }

    /// The frequency of each of the `rotary_dim / 2` feature pairs rotating with base `theta`.
    pub fn inv_freq(&self, theta: f64, rotary_dim: usize) -> Vec<f64> {
        let original = self.original_max_position_embeddings;
        let (low, high) = (self.low_freq_factor, self.high_freq_factor);
        // The wavelengths beyond which a pair is interpolated, and below which it is kept.
        let (long, short) = (original / low, original / high);
        (0..rotary_dim / 2)
            .map(|i| {
                let freq = theta.powf(-2.0 * i as f64 / rotary_dim as f64);
                let wavelength = 2.0 * std::f64::consts::PI / freq;
                if wavelength < short {
                    freq
                } else if wavelength > long {
                    freq / self.factor
                } else {
                    let turns = original / wavelength;
                    let smooth = (turns - low) / (high - low);
                    (1.0 - smooth) * freq / self.factor + smooth * freq
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Llama 3.1's frequencies at its head size, against values computed apart from this
    /// code (Python, from the published definition): kept, blended and divided pairs.
    #[test]
    fn llama3_1_frequencies_are_the_published_ones() {
        let inv = Llama3RopeScaling::llama3_1().inv_freq(500_000.0, 128);
        assert_eq!(inv.len(), 64);
        for (i, want) in [
            (0, 1.0),
            (20, 0.016560440080994446),
            (29, 0.002166570763503359),
            (32, 0.0005248461609929547),
            (34, 0.0001785078127679964),
            (40, 3.428102195952591e-05),
            (63, 3.068925988914511e-07),
        ] {
            assert!(
                (inv[i] - want).abs() <= 1e-12 * want,
                "pair {i}: {} against {want}",
                inv[i]
            );
        }
    }

    /// A Llama with the scaling computes another step than without it, and one without it
    /// the step it always did (the f32 digests in `cli/tests/precision.rs` hold that).
    #[test]
    fn the_scaling_changes_the_llamas_step() {
        use crate::llama::LlamaConfig;
        use crate::registry::Architecture;
        let step = |c: &LlamaConfig| {
            let (m, options) = Architecture::build(c).unwrap();
            stackscan::fsdp::train_step(&m, options, &stackscan::Axis::new("fsdp", 1))
                .unwrap()
                .program
                .emit()
                .unwrap()
        };
        let plain = LlamaConfig::tiny();
        let scaled = LlamaConfig {
            rope_scaling: Some(Llama3RopeScaling {
                original_max_position_embeddings: 16.0,
                ..Llama3RopeScaling::llama3_1()
            }),
            ..plain
        };
        assert_ne!(step(&plain), step(&scaled));
        let bad = LlamaConfig {
            rope_scaling: Some(Llama3RopeScaling {
                factor: 0.0,
                ..Llama3RopeScaling::llama3_1()
            }),
            ..plain
        };
        let e = Architecture::build(&bad).unwrap_err().to_string();
        assert!(e.contains("`rope_scaling.factor` must be positive"), "{e}");
    }

    #[test]
    fn a_ramp_of_no_width_is_refused_naming_the_field() {
        let bad = Llama3RopeScaling {
            high_freq_factor: 1.0,
            ..Llama3RopeScaling::llama3_1()
        };
        assert!(bad.validate().unwrap_err().contains("high_freq_factor"));
        assert!(Llama3RopeScaling::llama3_1().validate().is_ok());
    }
}
