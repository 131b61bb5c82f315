//! The one error type of the DSL: every variant names the op at fault.

use crate::dtype::DType;

use crate::types::TensorType;

/// Result alias of the DSL.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A graph-building, differentiation or emission error.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Two operands that must have equal shapes do not.
    #[error("`{op}`: shape mismatch: {lhs} vs {rhs}")]
    ShapeMismatch {
        /// The op.
        op: &'static str,
        /// The first operand's type.
        lhs: TensorType,
        /// The second operand's type.
        rhs: TensorType,
    },
    /// Two operands that must have equal element types do not.
    #[error("`{op}`: element type mismatch: {lhs} vs {rhs}")]
    DTypeMismatch {
        /// The op.
        op: &'static str,
        /// The first operand's element type.
        lhs: DType,
        /// The second operand's element type.
        rhs: DType,
    },
    /// An operand has an element type the op does not accept.
    #[error("`{op}`: expected {expected} operand, got {actual}")]
    UnsupportedDType {
        /// The op.
        op: &'static str,
        /// What the op accepts, in words (`a floating-point`).
        expected: &'static str,
        /// The operand's type.
        actual: TensorType,
    },
    /// An axis or dimension index is out of range.
    #[error("`{op}`: axis {axis} is out of range for {operand}")]
    AxisOutOfRange {
        /// The op.
        op: &'static str,
        /// The axis given.
        axis: i64,
        /// The operand's type.
        operand: TensorType,
    },
    /// Any other invalid use of an op; the message says what and shows the types.
    #[error("`{op}`: {message}")]
    InvalidOp {
        /// The op.
        op: &'static str,
        /// What is wrong.
        message: String,
    },
    /// Tensors from unrelated graphs were combined.
    #[error("`{op}`: operands come from different graphs")]
    ForeignTensor {
        /// The op.
        op: &'static str,
    },
    /// An optimizer hyper-parameter lies outside the values the update is defined for.
    #[error("`{optimizer}`: `{field}` is {value}; expected {expected}")]
    InvalidHyperParameter {
        /// The optimizer (`adam`).
        optimizer: &'static str,
        /// The field, as spelled in the optimizer's struct (`lr`).
        field: &'static str,
        /// The value given.
        value: f64,
        /// The valid values, in words (`a finite number > 0`).
        expected: &'static str,
    },
    /// A stack's depth read from its config does not fit the stack's block pattern.
    #[error("{}", crate::layer::depth_message(stack, field, key, *value, *prefix, *block))]
    Depth {
        /// The stack type.
        stack: &'static str,
        /// What holds the depth, as the user spells it (`LlamaConfig.layers`), or the
        /// count expression as written.
        field: String,
        /// The count written: `layers` (prefix included) or `repeat` (blocks).
        key: &'static str,
        /// The config's value.
        value: i128,
        /// The prefix's length in sub-layers.
        prefix: usize,
        /// The block's length in sub-layers.
        block: usize,
    },
    /// Reverse-mode differentiation is not defined for this use of an op.
    #[error("`{op}` cannot be differentiated: {reason}")]
    NotDifferentiable {
        /// The op.
        op: &'static str,
        /// Why, and what to use instead.
        reason: String,
    },
}

impl Error {
    pub(crate) fn invalid(op: &'static str, message: impl Into<String>) -> Self {
        Error::InvalidOp {
            op,
            message: message.into(),
        }
    }
}
