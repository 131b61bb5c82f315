//! The counts a cost is made of, and how they add and scale: a loop's body times its trips,
//! a program's nodes summed.

use std::iter::Sum;
use std::ops::{Add, AddAssign, Mul};

use crate::dtype::DType;

/// A count per element type: FLOPs or bytes, split because hardware rates differ by type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PerDType([u64; DType::ALL.len()]);

impl PerDType {
    /// The count for `dtype`.
    pub fn get(&self, dtype: DType) -> u64 {
        self.0[slot(dtype)]
    }

    /// The count summed over element types.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// The nonzero counts, in [`DType::ALL`]'s order.
    pub fn iter(&self) -> impl Iterator<Item = (DType, u64)> + '_ {
        DType::ALL
            .into_iter()
            .map(|d| (d, self.get(d)))
            .filter(|&(_, n)| n != 0)
    }

    fn record(&mut self, dtype: DType, n: u64) {
        self.0[slot(dtype)] += n;
    }

    /// A count of `n` for `dtype` alone.
    pub fn one(dtype: DType, n: u64) -> Self {
        let mut p = PerDType::default();
        p.record(dtype, n);
        p
    }
}

/// Where `dtype` sits in [`DType::ALL`], the order [`PerDType`] stores counts in.
pub(super) const fn slot(dtype: DType) -> usize {
    match dtype {
        DType::F32 => 0,
        DType::BF16 => 1,
        DType::F64 => 2,
        DType::I32 => 3,
        DType::I64 => 4,
        DType::Bool => 5,
    }
}

impl Add for PerDType {
    type Output = PerDType;

    fn add(mut self, rhs: PerDType) -> PerDType {
        self += rhs;
        self
    }
}

impl AddAssign for PerDType {
    fn add_assign(&mut self, rhs: PerDType) {
        for (a, b) in self.0.iter_mut().zip(rhs.0) {
            *a += b;
        }
    }
}

impl Mul<u64> for PerDType {
    type Output = PerDType;

    /// The count of `trips` repetitions, saturating rather than wrapping on absurd sizes.
    fn mul(mut self, trips: u64) -> PerDType {
        for a in &mut self.0 {
            *a = a.saturating_mul(trips);
        }
        self
    }
}

/// Buckets of [`Cost::matrix_flops_by_side`]: sides 1, 2–3, 4–7, …, 2¹⁵ and above.
pub const SIDE_BUCKETS: usize = 16;

/// The bucket of a product whose smaller output side is `side`: `⌊log₂ side⌋`, the last bucket
/// holding every larger side (a zero side counts as one).
pub fn side_bucket(side: u64) -> usize {
    (side.max(1).ilog2() as usize).min(SIDE_BUCKETS - 1)
}

/// The kinds of collective, each with its own bytes-moved formula and, on a pod, possibly
/// its own lane (FSDP gathers on one core, token exchanges on another).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Collective {
    /// `all_gather`.
    AllGather,
    /// `reduce_scatter`.
    ReduceScatter,
    /// `all_reduce` (`psum`).
    AllReduce,
    /// `all_to_all`.
    AllToAll,
}

impl Collective {
    /// Every kind, in the order [`Cost`] stores them.
    pub const ALL: [Collective; 4] = [
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::AllReduce,
        Collective::AllToAll,
    ];
}

/// What running a function once costs; see the [module docs](crate::cost) for each convention.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cost {
    /// FLOPs of `dot_general` and `triangular_solve`, by the left operand's element type.
    pub matrix_flops: PerDType,
    /// [`Cost::matrix_flops`] over all element types, by the product's smaller output side
    /// (`min(M, N)`, batch and contraction left out; a triangular solve's `n`) in
    /// [`side_bucket`]'s buckets: a CPU runs a product of 128 rows well below the rate of a
    /// 512-square one, so a profile may price each bucket at its own measured rate.
    pub matrix_flops_by_side: [u64; SIDE_BUCKETS],
    /// FLOPs of elementwise ops and reductions.
    pub vector_flops: PerDType,
    /// Bytes read by memory-bound ops.
    pub bytes_read: PerDType,
    /// Bytes written by memory-bound ops.
    pub bytes_written: PerDType,
    /// HBM traffic after fusion, matrix products left out: what crosses a fusion boundary
    /// (see [`fusion`](super::fusion) for the rule).
    pub hbm_bytes: PerDType,
    /// HBM traffic of matrix products after fusion: their operands read and results written.
    pub dot_bytes: PerDType,
    /// Kernels launched after fusion (see [`fusion`](super::fusion)).
    pub kernels: u64,
    /// [`Cost::hbm_bytes`] under the single-consumer fusion rule of XLA's CPU compiler
    /// ([`fusion::Rule::SingleConsumer`](super::fusion::Rule::SingleConsumer)): values read
    /// by two fusions, and the inputs of reductions, are written out and read back.
    pub single_consumer_hbm_bytes: PerDType,
    /// [`Cost::kernels`] under the single-consumer fusion rule.
    pub single_consumer_kernels: u64,
    /// Bytes each device sends, per kind of collective in [`Collective::ALL`]'s order.
    pub(super) collective_bytes: [PerDType; Collective::ALL.len()],
    /// `while` loops run whose bodies are not counted, their trip count being unknown.
    pub unknown_trip_loops: u64,
}

impl Cost {
    /// Bytes each device sends through collectives of `kind`.
    pub fn collective(&self, kind: Collective) -> PerDType {
        self.collective_bytes[kind as usize]
    }

    /// All FLOPs, matrix and vector, over all element types.
    pub fn flops(&self) -> u64 {
        self.matrix_flops.total() + self.vector_flops.total()
    }

    pub(super) fn collective_only(kind: Collective, bytes: PerDType) -> Cost {
        let mut c = Cost::default();
        c.collective_bytes[kind as usize] = bytes;
        c
    }
}

impl Add for Cost {
    type Output = Cost;

    fn add(mut self, rhs: Cost) -> Cost {
        self += rhs;
        self
    }
}

impl AddAssign for Cost {
    fn add_assign(&mut self, rhs: Cost) {
        self.matrix_flops += rhs.matrix_flops;
        for (a, b) in self
            .matrix_flops_by_side
            .iter_mut()
            .zip(rhs.matrix_flops_by_side)
        {
            *a = a.saturating_add(b);
        }
        self.vector_flops += rhs.vector_flops;
        self.bytes_read += rhs.bytes_read;
        self.bytes_written += rhs.bytes_written;
        self.hbm_bytes += rhs.hbm_bytes;
        self.dot_bytes += rhs.dot_bytes;
        self.kernels += rhs.kernels;
        self.single_consumer_hbm_bytes += rhs.single_consumer_hbm_bytes;
        self.single_consumer_kernels += rhs.single_consumer_kernels;
        for (a, b) in self.collective_bytes.iter_mut().zip(rhs.collective_bytes) {
            *a += b;
        }
        self.unknown_trip_loops += rhs.unknown_trip_loops;
    }
}

impl Sum for Cost {
    fn sum<I: Iterator<Item = Cost>>(iter: I) -> Cost {
        iter.fold(Cost::default(), Add::add)
    }
}

impl Mul<u64> for Cost {
    type Output = Cost;

    /// The cost of `trips` runs. Uncounted loops scale too: each run leaves them out again.
    fn mul(self, trips: u64) -> Cost {
        Cost {
            matrix_flops: self.matrix_flops * trips,
            matrix_flops_by_side: self.matrix_flops_by_side.map(|f| f.saturating_mul(trips)),
            vector_flops: self.vector_flops * trips,
            bytes_read: self.bytes_read * trips,
            bytes_written: self.bytes_written * trips,
            hbm_bytes: self.hbm_bytes * trips,
            dot_bytes: self.dot_bytes * trips,
            kernels: self.kernels.saturating_mul(trips),
            single_consumer_hbm_bytes: self.single_consumer_hbm_bytes * trips,
            single_consumer_kernels: self.single_consumer_kernels.saturating_mul(trips),
            collective_bytes: self.collective_bytes.map(|p| p * trips),
            unknown_trip_loops: self.unknown_trip_loops.saturating_mul(trips),
        }
    }
}
