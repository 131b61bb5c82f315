//! Matrix products and triangular solves.

use crate::builder::{Scope, Tensor};
use crate::error::{Error, Result};
use crate::ir::{DotDims, LhsCotangent, Op, TriangularSolve};

impl Tensor {
    /// `dot_general` with explicit dimension numbers. Result dimensions: batch, then the
    /// left operand's free dimensions, then the right operand's. Its VJP contracts with the
    /// right operand in place ([`LhsCotangent::InPlace`]).
    pub fn dot_general(&self, rhs: &Tensor, dims: DotDims) -> Result<Tensor> {
        self.dot_general_with(rhs, dims, LhsCotangent::InPlace)
    }

    /// [`dot_general`](Tensor::dot_general) whose VJP forms the left operand's cotangent as
    /// `lhs_cotangent` says.
    pub fn dot_general_with(
        &self,
        rhs: &Tensor,
        dims: DotDims,
        lhs_cotangent: LhsCotangent,
    ) -> Result<Tensor> {
        Scope::apply1(
            Op::DotGeneral {
                dims,
                lhs_cotangent,
            },
            &[self, rhs],
            None,
        )
    }

    /// Batched matrix product over the last two dimensions; leading dimensions are batch
    /// dimensions and must match. A rank-2 right operand is shared across the batch.
    pub fn matmul(&self, rhs: &Tensor) -> Result<Tensor> {
        self.matmul_with(rhs, LhsCotangent::InPlace)
    }

    /// [`matmul`](Tensor::matmul) whose VJP forms the left operand's cotangent as
    /// `lhs_cotangent` says.
    pub fn matmul_with(&self, rhs: &Tensor, lhs_cotangent: LhsCotangent) -> Result<Tensor> {
        let (lr, rr) = (self.rank(), rhs.rank());
        if lr < 2 || rr < 2 {
            return Err(Error::invalid(
                "dot_general",
                format!("matmul needs rank ≥ 2, got {} and {}", self.ty(), rhs.ty()),
            ));
        }
        if rr == 2 {
            return self.dot_general_with(
                rhs,
                DotDims {
                    lhs_contract: vec![lr - 1],
                    rhs_contract: vec![0],
                    ..DotDims::default()
                },
                lhs_cotangent,
            );
        }
        if lr != rr {
            return Err(Error::invalid(
                "dot_general",
                format!("matmul batch ranks differ: {} and {}", self.ty(), rhs.ty()),
            ));
        }
        let batch: Vec<usize> = (0..lr - 2).collect();
        self.dot_general_with(
            rhs,
            DotDims {
                lhs_batch: batch.clone(),
                rhs_batch: batch,
                lhs_contract: vec![lr - 1],
                rhs_contract: vec![rr - 2],
            },
            lhs_cotangent,
        )
    }

    /// Solves a triangular system with `self` as `A` and `b` as the right-hand side.
    pub fn triangular_solve(&self, b: &Tensor, options: TriangularSolve) -> Result<Tensor> {
        Scope::apply1(Op::TriangularSolve(options), &[self, b], None)
    }
}
