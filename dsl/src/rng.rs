//! The one pseudo-random generator of stackscan: weight initialisation, synthetic batches and
//! the tests' random inputs all draw from it.
//!
//! It is SplitMix64 (Steele, Lea and Flood, 2014), written here rather than taken from `rand`:
//! a seed must give the same weights on every platform and in every release, because checkpoints,
//! benchmarks and tests are compared across runs, and `rand` does not promise a stable stream
//! for its standard generator across versions. Its quality is ample for initialisation and test
//! data; it is not a cryptographic generator.
//!
//! ```
//! use stackscan::rng::Rng;
//!
//! let mut a = Rng::new(7);
//! let mut b = Rng::new(7);
//! assert_eq!(a.next_u64(), b.next_u64());
//! let x = a.uniform(-1.0, 1.0, 3);
//! assert!(x.iter().all(|v| (-1.0..1.0).contains(v)));
//! assert!(b.normal().is_finite());
//! ```

/// `2^-53`: the spacing of the 53-bit values a draw maps to in `[0, 1)`.
const UNIT: f64 = 1.0 / (1u64 << 53) as f64;

/// A SplitMix64 generator: the same seed gives the same sequence everywhere.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rng(u64);

impl Rng {
    /// A generator started at `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The whole state: `Rng::new(rng.state())` continues exactly where `rng` is, which is
    /// how a checkpoint stores a data pipeline's generator.
    pub fn state(&self) -> u64 {
        self.0
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`, on a grid of `2^-53`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * UNIT
    }

    /// `n` values uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f64, hi: f64, n: usize) -> Vec<f64> {
        (0..n).map(|_| lo + (hi - lo) * self.next_f64()).collect()
    }

    /// Standard normal (Box–Muller, one value per pair of draws).
    pub fn normal(&mut self) -> f64 {
        let (u, v) = (self.open_unit(), self.open_unit());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }

    /// Uniform in the open interval `(0, 1)`: the grid of [`Rng::next_f64`] shifted by half a
    /// step, so Box–Muller's logarithm never sees 0.
    fn open_unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) * UNIT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stream is pinned: initial weights, and so every seeded run, depend on it.
    #[test]
    fn the_stream_is_splitmix64() {
        let mut r = Rng::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        let mut r = Rng::new(1234567);
        assert_eq!(r.next_u64(), 6_457_827_717_110_365_317);
    }

    #[test]
    fn draws_stay_in_their_intervals() {
        let mut r = Rng::new(3);
        for _ in 0..1000 {
            let u = r.next_f64();
            assert!((0.0..1.0).contains(&u));
            let o = r.open_unit();
            assert!(o > 0.0 && o < 1.0);
        }
        assert!(
            r.uniform(2.0, 3.0, 100)
                .iter()
                .all(|v| (2.0..3.0).contains(v))
        );
    }
}
