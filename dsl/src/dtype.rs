//! Element types shared by the graph builder, the emitter and the runtime's transfers.
//!
//! One enum so that a tensor's type means the same thing in emitted StableHLO (`f32`) and in a
//! device buffer (PJRT's `F32`): the runtime maps it to the plugin's buffer type, the emitter to
//! the MLIR spelling.
//!
//! ```
//! use stackscan::DType;
//! assert_eq!(DType::Bool.mlir_name(), "i1");
//! ```

use std::fmt;
use std::str::FromStr;

/// The element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DType {
    /// IEEE 754 binary32.
    F32,
    /// bfloat16: binary32's exponent with a 7-bit mantissa.
    BF16,
    /// IEEE 754 binary64, for finite-difference references.
    F64,
    /// Signed 32-bit integer (token ids, indices).
    I32,
    /// Signed 64-bit integer.
    I64,
    /// Boolean (`pred` in XLA, `i1` in MLIR).
    Bool,
}

impl DType {
    /// Every element type, in a fixed order.
    pub const ALL: [DType; 6] = [
        DType::F32,
        DType::BF16,
        DType::F64,
        DType::I32,
        DType::I64,
        DType::Bool,
    ];

    /// Bytes one element occupies in a dense host or device array.
    pub const fn size_in_bytes(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::BF16 => 2,
            DType::F64 | DType::I64 => 8,
            DType::Bool => 1,
        }
    }

    /// The spelling of this type in MLIR tensor types (`tensor<4x8xf32>`).
    pub const fn mlir_name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::BF16 => "bf16",
            DType::F64 => "f64",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::Bool => "i1",
        }
    }

    /// Whether values of this type are floating point (and so differentiable).
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::BF16 | DType::F64)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.mlir_name())
    }
}

/// A string that names no [`DType`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown element type `{0}`; expected one of `f32`, `bf16`, `f64`, `i32`, `i64`, `i1`")]
pub struct UnknownDType(pub String);

impl FromStr for DType {
    type Err = UnknownDType;

    /// Parses the MLIR spelling (`f32`, `bf16`, `f64`, `i32`, `i64`, `i1`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DType::ALL
            .into_iter()
            .find(|d| d.mlir_name() == s)
            .ok_or_else(|| UnknownDType(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mlir_names_round_trip() {
        for d in DType::ALL {
            assert_eq!(d.mlir_name().parse::<DType>(), Ok(d));
        }
    }

    #[test]
    fn unknown_name_lists_choices() {
        let err = "f16".parse::<DType>().unwrap_err().to_string();
        assert!(err.contains("`f16`") && err.contains("`bf16`"), "{err}");
    }
}
