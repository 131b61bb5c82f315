//! Mixed precision: which element type a training step computes and reduces in, apart from
//! the type its weights are kept in.
//!
//! The policy follows FSDP2's `MixedPrecisionPolicy` and MaxText's `dtype`/`weight_dtype`:
//! the master weights and the optimizer's moments stay in their declared type (f32), sharded;
//! each weight slab is cast to the compute type *before* its all-gather, so a gather moves the
//! narrow type and the gathered buffer is half the size; layers run on activations of the
//! compute type; each weight gradient is cast to the reduce type before its reduce-scatter and
//! back to the weight's type after it. What must stay wide is kept wide where it is computed:
//! [`crate::nn`]'s norms, softmaxes, rotary embedding and cross-entropy compute a narrow input
//! in f32, and a model's router and recurrences do the same.
//!
//! Under [`Precision::F32`] no cast is emitted: the program is the one built before the policy
//! existed.
//!
//! ```
//! use stackscan::{DType, Precision};
//! let p: Precision = "bf16".parse()?;
//! assert_eq!((p.compute, p.reduce), (DType::BF16, DType::F32));
//! assert_eq!(p.to_string(), "bf16");
//! let q: Precision = "bf16-reduce-bf16".parse()?;
//! assert_eq!(q.reduce, DType::BF16);
//! assert_eq!(Precision::F32.to_string(), "f32");
//! # Ok::<(), stackscan::Error>(())
//! ```

use std::fmt;
use std::str::FromStr;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::types::TensorType;

/// The element types a training step computes and reduces gradients in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Precision {
    /// The type weights are gathered in and layers compute in.
    pub compute: DType,
    /// The type weight gradients are reduce-scattered in.
    pub reduce: DType,
}

impl Precision {
    /// Everything in f32: no casts.
    pub const F32: Precision = Precision {
        compute: DType::F32,
        reduce: DType::F32,
    };
    /// bf16 gathers and compute, f32 gradient reduction (the safe default of mixed precision:
    /// a sum over many devices keeps its low bits).
    pub const BF16: Precision = Precision {
        compute: DType::BF16,
        reduce: DType::F32,
    };
    /// bf16 gathers, compute and gradient reduction: half the reduce-scatter bytes too.
    pub const BF16_REDUCE_BF16: Precision = Precision {
        compute: DType::BF16,
        reduce: DType::BF16,
    };

    /// Every policy [`Precision::from_str`] reads, with its spelling.
    pub const NAMED: [(&'static str, Precision); 3] = [
        ("f32", Precision::F32),
        ("bf16", Precision::BF16),
        ("bf16-reduce-bf16", Precision::BF16_REDUCE_BF16),
    ];

    /// Whether the policy casts anything (a float type other than f32 somewhere).
    pub const fn is_mixed(self) -> bool {
        !matches!((self.compute, self.reduce), (DType::F32, DType::F32))
    }

    /// The type a value of type `dtype` is computed in: the compute type for an f32 value,
    /// `dtype` itself otherwise (integers, and a weight declared in another float type).
    pub fn compute_dtype(self, dtype: DType) -> DType {
        if dtype == DType::F32 {
            self.compute
        } else {
            dtype
        }
    }

    /// `ty` with its element type as computed.
    pub fn compute_type(self, ty: &TensorType) -> TensorType {
        TensorType::new(self.compute_dtype(ty.dtype), ty.dims.clone())
    }

    /// The type a gradient of a weight of type `dtype` is reduced in.
    pub fn reduce_dtype(self, dtype: DType) -> DType {
        if dtype == DType::F32 {
            self.reduce
        } else {
            dtype
        }
    }

    /// Whether both types are f32 or bf16 (`const`, so the stack macro checks it at compile
    /// time).
    pub const fn is_supported(self) -> bool {
        matches!(self.compute, DType::F32 | DType::BF16)
            && matches!(self.reduce, DType::F32 | DType::BF16)
    }

    /// Checks that both types are f32 or bf16, naming the one that is not.
    pub fn validate(self) -> Result<()> {
        for (what, t) in [("compute", self.compute), ("reduce", self.reduce)] {
            if !matches!(t, DType::F32 | DType::BF16) {
                return Err(Error::invalid(
                    "precision",
                    format!("the {what} type must be f32 or bf16, not {t}"),
                ));
            }
        }
        Ok(())
    }
}

/// `e`, raised tracing `what` (a layer, the part before or after the stack) under
/// `precision`, with what an element-type mismatch there means: the part receives its
/// activation and weights in the compute type, and combines them with something it made in
/// f32 itself.
pub(crate) fn traced_under(precision: Precision, what: &str, e: Error) -> Error {
    match e {
        Error::DTypeMismatch { .. } if precision.is_mixed() => Error::invalid(
            "precision",
            format!(
                "{what} under precision {precision}: {e}. It receives its activation and \
                 weights as {}: cast what it combines them with (`Tensor::convert`), or compute \
                 that part in f32 (`nn::at_least_f32`)",
                precision.compute
            ),
        ),
        other => other,
    }
}

impl Default for Precision {
    fn default() -> Self {
        Precision::F32
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match Precision::NAMED.iter().find(|(_, p)| p == self) {
            Some((name, _)) => f.write_str(name),
            None => write!(f, "{}-reduce-{}", self.compute, self.reduce),
        }
    }
}

impl FromStr for Precision {
    type Err = Error;

    fn from_str(s: &str) -> Result<Precision> {
        Precision::NAMED
            .iter()
            .find(|(name, _)| *name == s)
            .map(|&(_, p)| p)
            .ok_or_else(|| {
                let names: Vec<&str> = Precision::NAMED.iter().map(|(n, _)| *n).collect();
                Error::invalid(
                    "precision",
                    format!(
                        "unknown precision `{s}`; expected one of {}",
                        names.join(", ")
                    ),
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_policy_reads_back_from_its_name() {
        for (name, p) in Precision::NAMED {
            assert_eq!(name.parse::<Precision>().unwrap(), p);
            assert_eq!(p.to_string(), name);
            p.validate().unwrap();
        }
        let err = "fp16".parse::<Precision>().unwrap_err().to_string();
        assert!(
            err.contains("`fp16`") && err.contains("bf16-reduce-bf16"),
            "{err}"
        );
    }

    /// The toy stack, its activation compared with the f32 target as it is (`widen`
    /// false: a mismatch under bf16) or widened first.
    fn toy(widen: bool) -> crate::fsdp::StackModel {
        crate::fsdp::toy::residual_tanh(if widen {
            crate::nn::at_least_f32
        } else {
            |h| Ok(h.clone())
        })
    }

    #[test]
    fn a_part_that_mixes_types_is_told_how_to_cast() {
        let axis = crate::Axis::new("fsdp", 2);
        let options = crate::plan::PlanOptions::prefetch().with_precision(Precision::BF16);
        let e = crate::fsdp::train_step(&toy(false), options, &axis)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("the part after the stack under precision bf16")
                && e.contains("nn::at_least_f32"),
            "{e}"
        );
        let step = crate::fsdp::train_step(&toy(true), options, &axis).unwrap();
        let text = step.program.emit().unwrap();
        assert!(
            text.contains("tensor<4x8xbf16>"),
            "the gathered weight is bf16"
        );
        // The same model in f32 raises nothing and casts nothing.
        let f32 =
            crate::fsdp::train_step(&toy(false), options.with_precision(Precision::F32), &axis)
                .unwrap();
        assert!(!f32.program.emit().unwrap().contains("bf16"));
    }

    #[test]
    fn only_f32_values_change_type() {
        let p = Precision::BF16;
        assert_eq!(p.compute_dtype(DType::F32), DType::BF16);
        assert_eq!(p.compute_dtype(DType::I32), DType::I32);
        assert_eq!(p.reduce_dtype(DType::F32), DType::F32);
        assert!(!Precision::F32.is_mixed() && p.is_mixed());
        let wide = Precision {
            compute: DType::F64,
            reduce: DType::F32,
        };
        assert!(wide.validate().unwrap_err().to_string().contains("f64"));
    }
}
