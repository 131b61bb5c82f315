//! Elementwise ops: unary functions, binary arithmetic, comparisons, select, conversion.

use crate::builder::{Scope, Tensor};
use crate::dtype::DType;
use crate::error::Result;
use crate::ir::{BinaryOp, Comparison, Op, UnaryOp};
use crate::types::TensorType;

macro_rules! unary {
    ($($(#[$doc:meta])* $name:ident => $op:ident),* $(,)?) => {$(
        $(#[$doc])*
        pub fn $name(&self) -> Result<Tensor> {
            Scope::apply1(Op::Unary(UnaryOp::$op), &[self], None)
        }
    )*};
}

macro_rules! binary {
    ($($(#[$doc:meta])* $name:ident => $op:ident),* $(,)?) => {$(
        $(#[$doc])*
        pub fn $name(&self, rhs: &Tensor) -> Result<Tensor> {
            Scope::apply1(Op::Binary(BinaryOp::$op), &[self, rhs], None)
        }
    )*};
}

macro_rules! compare {
    ($($(#[$doc:meta])* $name:ident => $op:ident),* $(,)?) => {$(
        $(#[$doc])*
        pub fn $name(&self, rhs: &Tensor) -> Result<Tensor> {
            Scope::apply1(Op::Compare(Comparison::$op), &[self, rhs], None)
        }
    )*};
}

impl Tensor {
    unary! {
        /// `-x`
        neg => Neg,
        /// `e^x`
        exp => Exp,
        /// `ln x`
        log => Log,
        /// `ln(1 + x)`, accurate near 0.
        log1p => Log1p,
        /// `tanh x`
        tanh => Tanh,
        /// `1 / (1 + e^-x)`
        sigmoid => Logistic,
        /// `√x`
        sqrt => Sqrt,
        /// `1 / √x`
        rsqrt => Rsqrt,
        /// `|x|`
        abs => Abs,
        /// `sign x`
        sign => Sign,
        /// `sin x`
        sin => Sin,
        /// `cos x`
        cos => Cos,
    }

    binary! {
        /// `a + b` (equal types).
        add => Add,
        /// `a - b`
        sub => Sub,
        /// `a · b`
        mul => Mul,
        /// `a / b`
        div => Div,
        /// `a^b`
        pow => Pow,
        /// `max(a, b)`
        max => Max,
        /// `min(a, b)`
        min => Min,
    }

    compare! {
        /// `a == b`
        eq => Eq,
        /// `a != b`
        ne => Ne,
        /// `a < b`
        lt => Lt,
        /// `a <= b`
        le => Le,
        /// `a > b`
        gt => Gt,
        /// `a >= b`
        ge => Ge,
    }

    /// `self ? on_true : on_false`, elementwise; `self` is a `bool` tensor.
    pub fn select(&self, on_true: &Tensor, on_false: &Tensor) -> Result<Tensor> {
        Scope::apply1(Op::Select, &[self, on_true, on_false], None)
    }

    /// Converts to another element type.
    pub fn convert(&self, dtype: DType) -> Result<Tensor> {
        if dtype == self.dtype() {
            return Ok(self.clone());
        }
        Scope::apply1(Op::Convert, &[self], Some(&self.ty().with_dtype(dtype)))
    }

    /// Identity in the forward pass; blocks the gradient.
    pub fn stop_gradient(&self) -> Result<Tensor> {
        Scope::apply1(Op::StopGradient, &[self], None)
    }

    /// A constant of this tensor's type filled with `value`, in this tensor's scope.
    pub fn full_like(&self, value: f64) -> Result<Tensor> {
        self.scope().full(value, self.ty().clone())
    }

    /// `x · c` for a constant `c`.
    pub fn scale(&self, c: f64) -> Result<Tensor> {
        self.mul(&self.full_like(c)?)
    }

    /// `x + c` for a constant `c`.
    pub fn add_scalar(&self, c: f64) -> Result<Tensor> {
        self.add(&self.full_like(c)?)
    }

    /// `x²`
    pub fn square(&self) -> Result<Tensor> {
        self.mul(self)
    }

    /// Zeros of this tensor's type.
    pub fn zeros_like(&self) -> Result<Tensor> {
        self.full_like(0.0)
    }

    /// Zeros of type `ty` computed from an element of this tensor: exactly `+0` whatever its
    /// value (`0 · [x ≠ x]`), and not before it exists. A zero-init with no operands is free
    /// to run anywhere, and XLA's scheduler runs it early, where it lives until its use;
    /// zero-inits of one type are one value after XLA's common-subexpression pass, copied
    /// into each loop-carried buffer that needs its own. Zeros from different tensors are
    /// neither.
    pub(crate) fn zeros_from(&self, ty: &TensorType) -> Result<Tensor> {
        if self.dims().contains(&0) {
            return self.scope().full(0.0, ty.clone());
        }
        let ones = vec![1; self.rank()];
        let first = self
            .slice(&vec![0; self.rank()], &ones, &ones)?
            .reshape(&[])?;
        first
            .ne(&first)?
            .convert(ty.dtype)?
            .scale(0.0)?
            .broadcast_in_dim(&ty.dims, &[])
    }
}

/// Passes tensors through unchanged while keeping XLA from moving work across this point
/// (`stablehlo.optimization_barrier`).
pub fn optimization_barrier(values: &[&Tensor]) -> Result<Vec<Tensor>> {
    Scope::apply(Op::OptimizationBarrier, values, None)
}
