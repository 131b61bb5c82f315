//! What an op's type rule sees ([`Operands`]) and the checks the families' rules share: the
//! operand count, an axis in range, matching types, float and integer operands. Each check
//! returns an [`Error`] naming the op and the offending types.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::types::TensorType;

/// One application of an op to typed operands, as its type rule sees it.
pub(crate) struct Operands<'a> {
    /// The op's name, for errors.
    pub(crate) op: &'static str,
    /// Operand types, in order.
    pub(crate) args: &'a [TensorType],
    target: Option<&'a TensorType>,
}

impl<'a> Operands<'a> {
    /// `args` as operands of the op named `op`, which asks for a result type `target` where
    /// its result type is not a function of its operands.
    pub(crate) fn new(
        op: &'static str,
        args: &'a [TensorType],
        target: Option<&'a TensorType>,
    ) -> Self {
        Operands { op, args, target }
    }

    /// The operand types, if there are exactly `N`.
    pub(crate) fn exactly<const N: usize>(&self) -> Result<&'a [TensorType; N]> {
        <&[TensorType; N]>::try_from(self.args).map_err(|_| {
            Error::invalid(
                self.op,
                format!("expected {N} operands, got {}", self.args.len()),
            )
        })
    }

    /// The result type the caller asked for.
    pub(crate) fn target(&self) -> Result<TensorType> {
        self.target
            .cloned()
            .ok_or_else(|| Error::invalid(self.op, "needs a result type"))
    }
}

/// `a, b, c`, for messages.
pub(crate) fn list_types(ts: &[TensorType]) -> String {
    ts.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) fn check_axis(op: &'static str, axis: usize, t: &TensorType) -> Result<()> {
    if axis < t.rank() {
        Ok(())
    } else {
        Err(Error::AxisOutOfRange {
            op,
            axis: axis as i64,
            operand: t.clone(),
        })
    }
}

pub(crate) fn same_type(op: &'static str, a: &TensorType, b: &TensorType) -> Result<()> {
    if a.dtype != b.dtype {
        return Err(Error::DTypeMismatch {
            op,
            lhs: a.dtype,
            rhs: b.dtype,
        });
    }
    same_dims(op, a, b)
}

pub(crate) fn same_dims(op: &'static str, a: &TensorType, b: &TensorType) -> Result<()> {
    if a.dims != b.dims {
        return Err(Error::ShapeMismatch {
            op,
            lhs: a.clone(),
            rhs: b.clone(),
        });
    }
    Ok(())
}

pub(crate) fn float(op: &'static str, t: &TensorType) -> Result<()> {
    if t.dtype.is_float() {
        Ok(())
    } else {
        Err(Error::UnsupportedDType {
            op,
            expected: "a floating-point",
            actual: t.clone(),
        })
    }
}

pub(crate) fn int(op: &'static str, t: &TensorType) -> Result<()> {
    if matches!(t.dtype, DType::I32 | DType::I64) {
        Ok(())
    } else {
        Err(Error::UnsupportedDType {
            op,
            expected: "an integer index",
            actual: t.clone(),
        })
    }
}

pub(crate) fn scalar_indices(op: &'static str, idx: &[TensorType]) -> Result<()> {
    match idx.iter().find(|t| **t != TensorType::scalar(DType::I32)) {
        None => Ok(()),
        Some(t) => Err(Error::UnsupportedDType {
            op,
            expected: "an i32[] start index",
            actual: t.clone(),
        }),
    }
}
