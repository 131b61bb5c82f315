//! Tensor types: element type and static dimensions.
//!
//! ```
//! use stackscan::{DType, TensorType};
//! let t = TensorType::new(DType::F32, [2, 3]);
//! assert_eq!(t.to_string(), "tensor<2x3xf32>");
//! assert_eq!(t.num_elements(), 6);
//! ```

use std::fmt;

use crate::dtype::DType;

/// The type of one array: element type and dimensions (major to minor), as MLIR writes it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorType {
    /// Element type.
    pub dtype: DType,
    /// Dimensions, major to minor. Empty for a scalar.
    pub dims: Vec<i64>,
}

impl TensorType {
    /// A tensor type from its element type and dimensions.
    pub fn new(dtype: DType, dims: impl Into<Vec<i64>>) -> Self {
        TensorType {
            dtype,
            dims: dims.into(),
        }
    }

    /// A rank-0 tensor type.
    pub fn scalar(dtype: DType) -> Self {
        TensorType::new(dtype, Vec::new())
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    /// Number of elements (1 for a scalar). Dimensions are validated non-negative when a type
    /// enters a graph, so this does not fail for types held by a graph.
    pub fn num_elements(&self) -> usize {
        self.dims.iter().map(|&d| d.max(0) as usize).product()
    }

    /// Bytes of a dense array of this type.
    pub fn size_in_bytes(&self) -> usize {
        self.num_elements() * self.dtype.size_in_bytes()
    }

    /// The same dimensions with another element type.
    pub fn with_dtype(&self, dtype: DType) -> Self {
        TensorType::new(dtype, self.dims.clone())
    }

    /// The same element type with other dimensions.
    pub fn with_dims(&self, dims: impl Into<Vec<i64>>) -> Self {
        TensorType::new(self.dtype, dims)
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("tensor<")?;
        for d in &self.dims {
            write!(f, "{d}x")?;
        }
        write!(f, "{}>", self.dtype)
    }
}
