//! Hardware profiles as data: the rates the simulator divides a layer's cost by, read from
//! TOML (`cli/hardware/*.toml`, each public figure cited beside it) so a profile is
//! changed or added without touching code.

use std::path::Path;

use serde::Deserialize;
use stackscan::cost::{Collective, Cost, LayerCost};
use stackscan::sim::{KindTimes, SimOptions};
use stackscan::{DType, Error, Precision, Result};

/// One chip's rates.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hardware {
    /// Display name.
    pub name: String,
    /// Peak bf16 matrix-product rate, TFLOP/s.
    pub matrix_tflops_bf16: f64,
    /// Peak f32 matrix-product rate, TFLOP/s.
    pub matrix_tflops_f32: f64,
    /// Elementwise and reduction rate, TFLOP/s.
    pub vector_tflops: f64,
    /// Memory bandwidth, GB/s.
    pub memory_gb_per_s: f64,
    /// What one collective on the FSDP lane sends per second, GB/s.
    pub fsdp_lane_gb_per_s: f64,
    /// What one collective on the second lane sends per second, GB/s.
    pub second_lane_gb_per_s: f64,
    /// Fixed start-up cost of a collective, µs.
    pub collective_latency_us: f64,
    /// The fraction of the matrix peak that large products reach.
    pub matrix_efficiency: f64,
    /// Whether the computing cores run the collectives themselves (a CPU, where they are
    /// copies), so nothing overlaps them; absent means false (a chip with collective cores).
    #[serde(default)]
    pub collectives_on_compute: bool,
    /// Whether training runs in f32 as the models declare it (a CPU); absent means false:
    /// mixed-precision bf16, the reference's training. The precision a prediction prices
    /// when none is asked for ([`Hardware::training_precision`]); the program priced is the
    /// one built under it, with its own element types.
    #[serde(default)]
    pub trains_in_f32: bool,
    /// Fixed cost of launching one kernel (a fusion or a product), µs; absent means zero
    /// (accelerators queue kernels ahead of the host). Large on a CPU, where each launch
    /// dispatches to a thread pool.
    #[serde(default)]
    pub kernel_overhead_us: f64,
    /// Whether the compiler copies the buffers a loop carries into the next trip rather than
    /// passing them on in place; absent means false. XLA's CPU compiler does (the tiny
    /// Llama's optimized HLO holds a `copy` of each carried gathered weight, and of each
    /// carried pending gradient, in its prefetching loops, forward and backward), so on a CPU
    /// prefetch costs one copy of a layer's weights per step, and deferral one more of its
    /// gradient, at `memory_gb_per_s`.
    #[serde(default)]
    pub copies_loop_carries: bool,
    /// Devices (meshes' units) one chip presents; absent means one. TPU7x presents its two
    /// TensorCore dies as two devices, each with half the chip's HBM, links and compute, so
    /// a mesh over N chips has 2N devices ([`Hardware::per_device`]).
    #[serde(default = "one")]
    pub devices_per_chip: usize,
    /// Whether the compiler fuses a producer only into its one reader and never into a
    /// reduction, so values two fusions read and reductions' inputs go through memory
    /// ([`stackscan::cost::fusion::Rule::SingleConsumer`]); absent means false (the
    /// accelerator compilers' multi-output and input fusion). XLA's CPU compiler does: its
    /// optimized HLO of the Adam update writes out both moments, the new weights and each
    /// finiteness mask, several times the bytes one fused pass would move.
    #[serde(default)]
    pub single_consumer_fusion: bool,
    /// Measured matrix-product rates by the product's smaller output side `min(M, N)`,
    /// `[side, TFLOP/s]` with sides increasing; absent means every product runs at the peak.
    /// On a CPU a product of 128 rows reaches clearly less than a 512-square one's rate (its
    /// blocked kernel's panels are short, its threads' shares small; `calibrate` measures the
    /// table, `cli/hardware/cpu-example.toml` holds one), and a transformer layer's forward at
    /// a small batch is made of such products. Each product is priced at the rate interpolated
    /// in log₂ side at the lower edge of its side's bucket ([`stackscan::cost::side_bucket`]),
    /// relative to `matrix_tflops_f32`, clamped to the table's ends.
    #[serde(default)]
    pub matrix_side_tflops: Vec<[f64; 2]>,
}

fn one() -> usize {
    1
}

/// The profiles kept in the repository, by the name `--hardware` takes.
pub const BUILT_IN: [(&str, &str); 3] = [
    ("tpu7x", include_str!("../hardware/tpu7x.toml")),
    ("tpu-v5p", include_str!("../hardware/tpu-v5p.toml")),
    ("h200", include_str!("../hardware/h200.toml")),
];

impl Hardware {
    /// Parses a profile; every rate must be positive and finite, the efficiency in (0, 1].
    pub fn from_toml(text: &str) -> Result<Hardware> {
        let h: Hardware = toml::from_str(text)
            .map_err(|e| invalid("hardware", format!("not a hardware profile: {e}")))?;
        let rates = [
            ("matrix_tflops_bf16", h.matrix_tflops_bf16),
            ("matrix_tflops_f32", h.matrix_tflops_f32),
            ("vector_tflops", h.vector_tflops),
            ("memory_gb_per_s", h.memory_gb_per_s),
            ("fsdp_lane_gb_per_s", h.fsdp_lane_gb_per_s),
            ("second_lane_gb_per_s", h.second_lane_gb_per_s),
        ];
        if let Some((field, v)) = rates.iter().find(|(_, v)| !(v.is_finite() && *v > 0.0)) {
            return Err(invalid(
                "hardware",
                format!("profile `{}`: `{field}` = {v} must be positive", h.name),
            ));
        }
        for (field, v) in [
            ("collective_latency_us", h.collective_latency_us),
            ("kernel_overhead_us", h.kernel_overhead_us),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(invalid(
                    "hardware",
                    format!("profile `{}`: `{field}` must be ≥ 0", h.name),
                ));
            }
        }
        if h.devices_per_chip == 0 {
            return Err(invalid(
                "hardware",
                format!(
                    "profile `{}`: `devices_per_chip` must be at least 1",
                    h.name
                ),
            ));
        }
        let sides_ok = h
            .matrix_side_tflops
            .iter()
            .all(|&[side, r]| side >= 1.0 && side.is_finite() && r > 0.0 && r.is_finite())
            && h.matrix_side_tflops.windows(2).all(|w| w[0][0] < w[1][0]);
        if !sides_ok {
            return Err(invalid(
                "hardware",
                format!(
                    "profile `{}`: `matrix_side_tflops` must list `[side, TFLOP/s]` pairs with \
                     sides ≥ 1 increasing and rates positive",
                    h.name
                ),
            ));
        }
        if !(h.matrix_efficiency > 0.0 && h.matrix_efficiency <= 1.0) {
            return Err(invalid(
                "hardware",
                format!(
                    "profile `{}`: `matrix_efficiency` must be in (0, 1]",
                    h.name
                ),
            ));
        }
        Ok(h)
    }

    /// A built-in profile by name, or a TOML file by path.
    pub fn load(name_or_path: &str) -> Result<Hardware> {
        if let Some((_, text)) = BUILT_IN.iter().find(|(n, _)| *n == name_or_path) {
            return Hardware::from_toml(text);
        }
        let text = std::fs::read_to_string(Path::new(name_or_path)).map_err(|e| {
            let names: Vec<&str> = BUILT_IN.iter().map(|(n, _)| *n).collect();
            invalid(
                "hardware",
                format!(
                    "`{name_or_path}` is neither a built-in profile ({}) nor a readable file: {e}",
                    names.join(", ")
                ),
            )
        })?;
        Hardware::from_toml(&text)
    }

    /// One device's share of the chip: every rate divided by [`Hardware::devices_per_chip`]
    /// (each die has its own compute, HBM stacks and share of the links); latencies and
    /// efficiencies unchanged. The profile itself when a chip is one device.
    pub fn per_device(&self) -> Hardware {
        let n = self.devices_per_chip.max(1) as f64;
        Hardware {
            name: if self.devices_per_chip > 1 {
                format!(
                    "{} (one of {} devices a chip)",
                    self.name, self.devices_per_chip
                )
            } else {
                self.name.clone()
            },
            matrix_tflops_bf16: self.matrix_tflops_bf16 / n,
            matrix_tflops_f32: self.matrix_tflops_f32 / n,
            vector_tflops: self.vector_tflops / n,
            memory_gb_per_s: self.memory_gb_per_s / n,
            fsdp_lane_gb_per_s: self.fsdp_lane_gb_per_s / n,
            second_lane_gb_per_s: self.second_lane_gb_per_s / n,
            matrix_side_tflops: self
                .matrix_side_tflops
                .iter()
                .map(|&[side, rate]| [side, rate / n])
                .collect(),
            devices_per_chip: 1,
            ..self.clone()
        }
    }

    /// Seconds to run `c` on the compute core, from the traffic after fusion
    /// ([`stackscan::cost::fusion`]): the matrix products at the larger of their FLOP time
    /// (efficient peak for their element type) and their operands' and results' traffic time,
    /// a roofline over the layer's products taken together; then everything else at the
    /// larger of its FLOP time and its fused traffic time, each at the rate and width of the
    /// element type the program uses. Each kernel launched adds `kernel_overhead_us`.
    /// Traffic and kernels are counted under the fusion rule the profile's compiler follows
    /// ([`Hardware::single_consumer_fusion`]).
    pub fn compute_seconds(&self, c: &Cost) -> f64 {
        let tera = 1e12 * self.matrix_efficiency;
        let (bf16, f32) = (
            c.matrix_flops.get(DType::BF16) as f64,
            c.matrix_flops.get(DType::F32) as f64,
        );
        let other = c.matrix_flops.total() as f64 - bf16 - f32;
        let matrix = bf16 / (self.matrix_tflops_bf16 * tera)
            + (f32 + other) / (self.matrix_tflops_f32 * tera);
        let matrix = matrix * self.small_product_slowdown(c);
        let bandwidth = self.memory_gb_per_s * 1e9;
        let dot_traffic = c.dot_bytes.total() as f64 / bandwidth;
        let (hbm, kernels) = if self.single_consumer_fusion {
            (c.single_consumer_hbm_bytes, c.single_consumer_kernels)
        } else {
            (c.hbm_bytes, c.kernels)
        };
        let memory = hbm.total() as f64 / bandwidth;
        let vector = c.vector_flops.total() as f64 / (self.vector_tflops * 1e12);
        matrix.max(dot_traffic)
            + memory.max(vector)
            + kernels as f64 * self.kernel_overhead_us * 1e-6
    }

    /// How much longer `c`'s products take than at the peak rate: their FLOPs weighted by
    /// the peak over each one's rate at its smaller output side ([`Hardware::matrix_side_tflops`]);
    /// 1 without a table or without products.
    pub fn small_product_slowdown(&self, c: &Cost) -> f64 {
        let total: f64 = c.matrix_flops_by_side.iter().map(|&f| f as f64).sum();
        if self.matrix_side_tflops.is_empty() || total == 0.0 {
            return 1.0;
        }
        let weighted: f64 = c
            .matrix_flops_by_side
            .iter()
            .enumerate()
            .filter(|&(_, &f)| f > 0)
            .map(|(b, &f)| f as f64 * self.matrix_tflops_f32 / self.side_tflops((b as f64).exp2()))
            .sum();
        weighted / total
    }

    /// The product rate at smaller output side `side`, TFLOP/s: the table interpolated linearly in
    /// log₂ side, its end values beyond its ends. Call only with a nonempty table.
    fn side_tflops(&self, side: f64) -> f64 {
        let t = &self.matrix_side_tflops;
        let (first, last) = (t[0], t[t.len() - 1]);
        if side <= first[0] {
            return first[1];
        }
        if side >= last[0] {
            return last[1];
        }
        let hi = t.iter().position(|p| p[0] >= side).unwrap_or(t.len() - 1);
        let ([s0, r0], [s1, r1]) = (t[hi - 1], t[hi]);
        let x = (side.log2() - s0.log2()) / (s1.log2() - s0.log2());
        r0 + x * (r1 - r0)
    }

    /// Seconds to copy a loop-carried buffer of `bytes` into the next trip (read once, written
    /// once, at the memory bandwidth, which counts both), or zero where the compiler passes
    /// carries in place ([`Hardware::copies_loop_carries`]).
    pub fn carry_copy_seconds(&self, bytes: f64) -> f64 {
        if self.copies_loop_carries {
            2.0 * bytes / (self.memory_gb_per_s * 1e9)
        } else {
            0.0
        }
    }

    /// The lanes the simulator places collectives on.
    pub fn sim_options(&self) -> SimOptions {
        if self.collectives_on_compute {
            SimOptions::serial()
        } else {
            SimOptions::default()
        }
    }

    /// Seconds for one collective moving `bytes` per device on a lane of `gb_per_s`.
    pub fn collective_seconds(&self, bytes: f64, gb_per_s: f64) -> f64 {
        if bytes == 0.0 {
            return 0.0;
        }
        self.collective_latency_us * 1e-6 + bytes / (gb_per_s * 1e9)
    }

    /// Seconds for `count` token all_to_alls sending `bytes` in all, on the second lane.
    fn exchanges_seconds(&self, bytes: f64, count: u64) -> f64 {
        if count == 0 {
            return 0.0;
        }
        count as f64 * self.collective_latency_us * 1e-6 + bytes / (self.second_lane_gb_per_s * 1e9)
    }

    /// One layer's times: forward, backward (recompute + VJP, with the all-reduce of any
    /// replicated gradients and any collective inside the layer counted on the compute lane,
    /// since the plan does not schedule them), its weights' gather on the FSDP lane and its
    /// gradients' reduce-scatter.
    pub fn kind_times(&self, layer: &LayerCost) -> KindTimes {
        let inner = |c: &Cost| {
            Collective::ALL
                .iter()
                .map(|&k| {
                    let b = c.collective(k).total() as f64;
                    self.collective_seconds(b, self.second_lane_gb_per_s)
                })
                .sum::<f64>()
        };
        let all_reduce =
            self.collective_seconds(layer.all_reduce_bytes as f64, self.second_lane_gb_per_s);
        KindTimes {
            forward: self.compute_seconds(&layer.forward) + inner(&layer.forward),
            backward: self.compute_seconds(&layer.backward) + inner(&layer.backward) + all_reduce,
            gather: self.collective_seconds(layer.gathered_bytes as f64, self.fsdp_lane_gb_per_s),
            reduce_scatter: self
                .collective_seconds(layer.reduce_scatter_bytes as f64, self.second_lane_gb_per_s),
            exchange_forward: self.exchanges_seconds(
                layer.exchange.forward_bytes as f64,
                layer.exchange.forward_count,
            ),
            exchange_backward: self.exchanges_seconds(
                layer.exchange.backward_bytes as f64,
                layer.exchange.backward_count,
            ),
            carry_copy: self.carry_copy_seconds(layer.weight_bytes as f64),
        }
    }

    /// The precision a prediction on this hardware prices when none is asked for: f32 where
    /// the profile trains as declared (a CPU), bf16 mixed precision otherwise.
    pub fn training_precision(&self) -> Precision {
        if self.trains_in_f32 {
            Precision::F32
        } else {
            Precision::BF16
        }
    }
}

/// A profile error.
fn invalid(op: &'static str, message: impl Into<String>) -> Error {
    Error::InvalidOp {
        op,
        message: message.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stackscan::cost::PerDType;

    #[test]
    fn built_in_profiles_parse() {
        for (name, text) in BUILT_IN {
            let h = Hardware::from_toml(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(h.matrix_tflops_bf16 >= h.matrix_tflops_f32, "{name}");
            assert_eq!(Hardware::load(name).unwrap(), h);
        }
        assert_eq!(Hardware::load("tpu-v5p").unwrap().matrix_tflops_bf16, 459.0);
    }

    #[test]
    fn bad_profiles_name_the_field() {
        let text = BUILT_IN[0]
            .1
            .replace("memory_gb_per_s = 7370.0", "memory_gb_per_s = 0.0");
        let e = Hardware::from_toml(&text).unwrap_err().to_string();
        assert!(e.contains("`memory_gb_per_s`"), "{e}");
        let e = Hardware::from_toml("name = 3").unwrap_err().to_string();
        assert!(e.contains("not a hardware profile"), "{e}");
        let e = Hardware::load("no-such-chip").unwrap_err().to_string();
        assert!(e.contains("tpu7x, tpu-v5p, h200"), "{e}");
    }

    #[test]
    fn a_tpu7x_device_is_half_a_chip() {
        let chip = Hardware::load("tpu7x").unwrap();
        assert_eq!(chip.devices_per_chip, 2);
        let d = chip.per_device();
        assert_eq!(d.devices_per_chip, 1);
        assert_eq!(d.matrix_tflops_bf16, chip.matrix_tflops_bf16 / 2.0);
        assert_eq!(d.memory_gb_per_s, 3685.0);
        assert_eq!(d.fsdp_lane_gb_per_s, chip.fsdp_lane_gb_per_s / 2.0);
        assert_eq!(d.collective_latency_us, chip.collective_latency_us);
        // A one-device chip is its own device.
        let v5p = Hardware::load("tpu-v5p").unwrap();
        assert_eq!(v5p.per_device(), v5p);
        let text = BUILT_IN[0]
            .1
            .replace("devices_per_chip = 2", "devices_per_chip = 0");
        let e = Hardware::from_toml(&text).unwrap_err().to_string();
        assert!(e.contains("`devices_per_chip`"), "{e}");
    }

    #[test]
    fn collective_time_is_latency_plus_bytes_over_bandwidth() {
        let h = Hardware::load("tpu-v5p").unwrap();
        let layer = LayerCost {
            kind: "L".into(),
            forward: Cost::default(),
            backward: Cost::default(),
            weight_bytes: 0,
            gathered_bytes: 600_000_000,
            reduce_scatter_bytes: 0,
            all_reduce_bytes: 0,
            exchange: Default::default(),
        };
        let t = h.kind_times(&layer);
        // In seconds: 600e6 bytes over the lane's 600e9 a second, plus the 10e-6 latency.
        assert!((t.gather - 1.010e-3).abs() < 1e-12, "{}", t.gather);
        assert_eq!((t.reduce_scatter, t.forward), (0.0, 0.0));
    }

    #[test]
    fn the_measured_cpu_example_parses_as_a_serial_f32_profile() {
        let h = Hardware::from_toml(include_str!("../hardware/cpu-example.toml")).unwrap();
        assert!(h.collectives_on_compute && h.trains_in_f32 && h.kernel_overhead_us > 0.0);
        assert!(h.copies_loop_carries && h.single_consumer_fusion);
        // A copy reads and writes its bytes: as many as `memory_gb_per_s` moves in one second
        // take two, one each way.
        assert_eq!(h.memory_gb_per_s, 8.525);
        assert!((h.carry_copy_seconds(8.525e9) - 2.0).abs() < 1e-12);
        // The measured product rates by rows, 128 rows below the 512-square peak.
        assert_eq!(h.matrix_side_tflops.len(), 5);
        assert!(h.matrix_side_tflops[2][1] < h.matrix_tflops_f32);
        assert_eq!(h.sim_options(), SimOptions::serial());
        // The accelerators overlap and train in bf16.
        let t = Hardware::load("tpu7x").unwrap();
        assert!(!t.collectives_on_compute && !t.trains_in_f32 && t.kernel_overhead_us == 0.0);
        assert!(!t.copies_loop_carries);
        assert_eq!(t.carry_copy_seconds(1e9), 0.0);
    }

    #[test]
    fn products_take_the_larger_of_flops_and_traffic_and_the_rest_their_fused_traffic() {
        let h = Hardware::load("tpu7x").unwrap();
        let mut c = Cost::default();
        // In seconds: 0.99201e12 FLOPs at 2307e12 · 0.43 a second take 1e-3; so do 7.37e9
        // bytes at the memory's 7.37e12 a second.
        c.matrix_flops = PerDType::one(DType::BF16, 992_010_000_000);
        c.dot_bytes = PerDType::one(DType::BF16, 3_685_000_000);
        c.hbm_bytes = PerDType::one(DType::BF16, 7_370_000_000);
        // In milliseconds: max(1, 0.5) + max(1, vector 0) = 2.
        assert!((h.compute_seconds(&c) - 2e-3).abs() < 1e-12);
        // Memory-bound products: 4 × the traffic doubles their time; in milliseconds, 2 + 1.
        c.dot_bytes = PerDType::one(DType::BF16, 14_740_000_000);
        assert!((h.compute_seconds(&c) - 3e-3).abs() < 1e-12);
        // The unfused counts are not what is priced.
        c.bytes_read = PerDType::one(DType::BF16, u64::MAX / 4);
        assert!((h.compute_seconds(&c) - 3e-3).abs() < 1e-12);
    }

    #[test]
    fn products_are_priced_at_the_rate_of_their_side() {
        let text = BUILT_IN[0].1.replace(
            "matrix_efficiency",
            "matrix_side_tflops = [[128.0, 0.02], [512.0, 0.04]]\nmatrix_efficiency",
        );
        let mut h = Hardware::from_toml(&text).unwrap();
        h.matrix_tflops_f32 = 0.04;
        let mut c = Cost::default();
        // Side 128 runs at half the peak; 512 at the peak: (2 + 1) / 2.
        c.matrix_flops_by_side[7] = 1_000_000_000;
        c.matrix_flops_by_side[9] = 1_000_000_000;
        assert!((h.small_product_slowdown(&c) - 1.5).abs() < 1e-12);
        // Side 256 is halfway in log₂ side: 0.03, so 0.04 / 0.03.
        let mut c = Cost::default();
        c.matrix_flops_by_side[8] = 5;
        assert!((h.small_product_slowdown(&c) - 4.0 / 3.0).abs() < 1e-12);
        // Below the table, its first rate.
        c.matrix_flops_by_side[8] = 0;
        c.matrix_flops_by_side[3] = 5;
        assert!((h.small_product_slowdown(&c) - 2.0).abs() < 1e-12);
        // Without a table or without products, no slowdown.
        assert_eq!(h.small_product_slowdown(&Cost::default()), 1.0);
        assert_eq!(
            Hardware::load("tpu7x").unwrap().small_product_slowdown(&c),
            1.0
        );
        // A table out of order is named.
        let bad = BUILT_IN[0].1.replace(
            "matrix_efficiency",
            "matrix_side_tflops = [[512.0, 0.04], [128.0, 0.02]]\nmatrix_efficiency",
        );
        let e = Hardware::from_toml(&bad).unwrap_err().to_string();
        assert!(e.contains("`matrix_side_tflops`"), "{e}");
    }

    #[test]
    fn a_single_consumer_profile_prices_the_single_consumer_traffic() {
        let mut h = Hardware::from_toml(include_str!("../hardware/cpu-example.toml")).unwrap();
        h.kernel_overhead_us = 0.0;
        let mut c = Cost::default();
        c.hbm_bytes = PerDType::one(DType::F32, 1_000_000_000);
        c.single_consumer_hbm_bytes = PerDType::one(DType::F32, 3_000_000_000);
        let bw = h.memory_gb_per_s * 1e9;
        assert!((h.compute_seconds(&c) - 3e9 / bw).abs() < 1e-9);
        h.single_consumer_fusion = false;
        assert!((h.compute_seconds(&c) - 1e9 / bw).abs() < 1e-9);
    }
}
