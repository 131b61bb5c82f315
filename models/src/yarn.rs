//! YaRN, the RoPE context extension DeepSeek-V3 is published with (`rope_scaling` of type
//! `yarn` in its `config.json`; Peng et al., "YaRN: Efficient Context Window Extension of
//! Large Language Models", 2023), as that model defines it.
//!
//! Feature pairs that turn many times over the original context keep their frequency
//! (extrapolation), those that turn less than once are divided by `factor` (interpolation),
//! and a linear ramp blends the pairs between. Attention logits are then scaled by the square
//! of `0.1 · mscale_all_dim · ln(factor) + 1`, and the rotations' cosines and sines by the
//! ratio of that magnitude for `mscale` and for `mscale_all_dim` (1 for DeepSeek-V3, whose two
//! are equal).
//!
//! ```
//! use stackscan_models::yarn::Yarn;
//!
//! let yarn = Yarn::deepseek3();
//! let inv = yarn.inv_freq(10_000.0, 64);
//! // The fastest pair keeps its frequency; the slowest is interpolated by the factor.
//! assert_eq!(inv[0], 1.0);
//! let plain = 10_000f64.powf(-62.0 / 64.0);
//! assert!((inv[31] - plain / 40.0).abs() < 1e-15);
//! ```

use serde::{Deserialize, Serialize};

/// YaRN's parameters, named as `rope_scaling` names them.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Yarn {
    /// Context extension factor (`factor`, 40 for DeepSeek-V3).
    pub factor: f64,
    /// The context the model was pre-trained at (`original_max_position_embeddings`).
    pub original_context: f64,
    /// Rotations over the original context above which a pair is not interpolated
    /// (`beta_fast`, 32).
    pub beta_fast: f64,
    /// Rotations below which a pair is fully interpolated (`beta_slow`, 1).
    pub beta_slow: f64,
    /// `mscale`: the rotations' magnitude numerator.
    pub mscale: f64,
    /// `mscale_all_dim`: the attention scale's magnitude (0: no attention scaling).
    pub mscale_all_dim: f64,
}

/// `0.1 · m · ln(factor) + 1`, or 1 for a factor of at most 1 (YaRN's `get_mscale`).
fn magnitude(factor: f64, m: f64) -> f64 {
    if factor <= 1.0 {
        1.0
    } else {
        0.1 * m * factor.ln() + 1.0
    }
}

impl Yarn {
    /// DeepSeek-V3's published `rope_scaling`.
    pub const fn deepseek3() -> Yarn {
        Yarn {
            factor: 40.0,
            original_context: 4096.0,
            beta_fast: 32.0,
            beta_slow: 1.0,
            mscale: 1.0,
            mscale_all_dim: 1.0,
        }
    }

    /// Checks the values a computation relies on; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        let positive = [
            ("factor", self.factor),
            ("original_max_position_embeddings", self.original_context),
            ("beta_fast", self.beta_fast),
            ("beta_slow", self.beta_slow),
        ];
        if let Some((field, v)) = positive.iter().find(|(_, v)| !(v.is_finite() && *v > 0.0)) {
            return Err(format!(
                "`rope_scaling.{field}` must be a finite number above 0, got {v}"
            ));
        }
        if self.beta_fast <= self.beta_slow {
            return Err(format!(
                "`rope_scaling.beta_fast` ({}) must exceed `beta_slow` ({})",
                self.beta_fast, self.beta_slow
            ));
        }
        for (field, v) in [
            ("mscale", self.mscale),
            ("mscale_all_dim", self.mscale_all_dim),
        ] {
            if !v.is_finite() {
                return Err(format!("`rope_scaling.{field}` must be finite, got {v}"));
            }
        }
        Ok(())
    }

    /// The pair index (fractional) whose wavelength turns `rotations` times over the
    /// original context, for `rotary_dim` features rotating with base `theta`.
    fn pair_turning(&self, rotations: f64, theta: f64, rotary_dim: usize) -> f64 {
        let d = rotary_dim as f64;
        d * (self.original_context / (rotations * 2.0 * std::f64::consts::PI)).ln()
            / (2.0 * theta.ln())
    }

    /// The frequency of each of the `rotary_dim / 2` feature pairs.
    pub fn inv_freq(&self, theta: f64, rotary_dim: usize) -> Vec<f64> {
        let half = rotary_dim / 2;
        let last = rotary_dim.saturating_sub(1) as f64;
        let low = self
            .pair_turning(self.beta_fast, theta, rotary_dim)
            .floor()
            .max(0.0);
        let high = self
            .pair_turning(self.beta_slow, theta, rotary_dim)
            .ceil()
            .min(last);
        // A ramp of zero width would divide by zero; YaRN widens it by a thousandth.
        let width = if high == low { 0.001 } else { high - low };
        (0..half)
            .map(|i| {
                let extrapolated = theta.powf(-2.0 * i as f64 / rotary_dim as f64);
                let interpolated = extrapolated / self.factor;
                let ramp = ((i as f64 - low) / width).clamp(0.0, 1.0);
                let keep = 1.0 - ramp;
                interpolated * (1.0 - keep) + extrapolated * keep
            })
            .collect()
    }

    /// The factor on the rotations' cosines and sines.
    pub fn rotation_magnitude(&self) -> f64 {
        magnitude(self.factor, self.mscale) / magnitude(self.factor, self.mscale_all_dim)
    }

    /// The factor on the attention softmax scale (`1/√head` becomes this times it).
    pub fn attention_factor(&self) -> f64 {
        if self.mscale_all_dim == 0.0 {
            1.0
        } else {
            magnitude(self.factor, self.mscale_all_dim).powi(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DeepSeek-V3's values worked by hand from the published formulas: over the original
    /// 4096 positions, pair i of 32 (base 10⁴, 64 rotary features) turns 32 times at
    /// i = 64·ln(4096 / (64π)) / (2 ln 10⁴) = 10.47 and once at 64·ln(4096 / 2π) / (2 ln 10⁴)
    /// = 22.51, so pairs 0–10 keep their frequency, 23–31 are divided by 40, and the ramp
    /// runs from 10 to 23.
    #[test]
    fn deepseek3_frequencies_and_scales_match_hand_worked_values() {
        let y = Yarn::deepseek3();
        let inv = y.inv_freq(10_000.0, 64);
        assert_eq!(inv.len(), 32);
        let plain = |i: usize| 10_000f64.powf(-2.0 * i as f64 / 64.0);
        for (i, f) in inv.iter().enumerate() {
            let ramp = ((i as f64 - 10.0) / 13.0).clamp(0.0, 1.0);
            let want = plain(i) * (1.0 - ramp) + plain(i) / 40.0 * ramp;
            assert!(
                (f - want).abs() <= 1e-15 * plain(i),
                "pair {i}: {f} vs {want}"
            );
        }
        assert_eq!(inv[10], plain(10));
        assert!((inv[23] - plain(23) / 40.0).abs() < 1e-18);
        // mscale = 0.1 · ln 40 + 1 = 1.368888; the attention factor is its square.
        assert!((y.attention_factor() - 1.368_887_945_f64.powi(2)).abs() < 1e-8);
        assert_eq!(y.rotation_magnitude(), 1.0);
    }

    #[test]
    fn a_factor_of_one_is_plain_rope() {
        let y = Yarn {
            factor: 1.0,
            ..Yarn::deepseek3()
        };
        let inv = y.inv_freq(10_000.0, 16);
        for (i, f) in inv.iter().enumerate() {
            assert_eq!(*f, 10_000f64.powf(-2.0 * i as f64 / 16.0));
        }
        assert_eq!((y.attention_factor(), y.rotation_magnitude()), (1.0, 1.0));
    }

    #[test]
    fn bad_values_name_their_field() {
        let bad = Yarn {
            factor: -1.0,
            ..Yarn::deepseek3()
        };
        assert!(
            bad.validate()
                .unwrap_err()
                .contains("`rope_scaling.factor`")
        );
        let crossed = Yarn {
            beta_fast: 1.0,
            beta_slow: 32.0,
            ..Yarn::deepseek3()
        };
        assert!(crossed.validate().unwrap_err().contains("beta_fast"));
    }
}
