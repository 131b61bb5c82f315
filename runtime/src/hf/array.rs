//! The few row-major array moves a weight mapping needs, on `f32` host data: slicing and
//! writing a block along one dimension, swapping the last two dimensions, and reordering the
//! indices of one dimension.

use stackscan::hf_map::is_permutation;

use crate::error::{Error, Result};

/// A dense row-major `f32` array: one of their tensors as an export makes it.
#[derive(Clone, Debug, PartialEq)]
pub struct Array {
    /// Dims.
    pub dims: Vec<i64>,
    /// Values, row-major.
    pub data: Vec<f32>,
}

/// The sizes of the dimensions before `dim`, `dim` itself and after it, for row-major walks.
fn split(dims: &[i64], dim: usize) -> (usize, usize, usize) {
    let outer = dims[..dim].iter().product::<i64>() as usize;
    let inner = dims[dim + 1..].iter().product::<i64>() as usize;
    (outer, dims[dim] as usize, inner)
}

fn bad(what: String) -> Error {
    Error::Program(format!("weight mapping: {what}"))
}

impl Array {
    pub(crate) fn new(dims: Vec<i64>, data: Vec<f32>) -> Result<Array> {
        let n = dims.iter().product::<i64>();
        if dims.iter().any(|&d| d < 0) || n as usize != data.len() {
            return Err(bad(format!("{} values for dims {dims:?}", data.len())));
        }
        Ok(Array { dims, data })
    }

    pub(crate) fn zeros(dims: Vec<i64>) -> Array {
        let n = dims.iter().product::<i64>().max(0) as usize;
        Array {
            dims,
            data: vec![0.0; n],
        }
    }

    fn check_dim(&self, dim: usize) -> Result<()> {
        if dim >= self.dims.len() {
            return Err(bad(format!("dimension {dim} of dims {:?}", self.dims)));
        }
        Ok(())
    }

    /// Indices `[start, start + len)` of dimension `dim`.
    pub(crate) fn slice(&self, dim: usize, start: i64, len: i64) -> Result<Array> {
        self.check_dim(dim)?;
        if start < 0 || len < 0 || start + len > self.dims[dim] {
            return Err(bad(format!(
                "slice {start}..{} of dimension {dim} of {:?}",
                start + len,
                self.dims
            )));
        }
        let (outer, n, inner) = split(&self.dims, dim);
        let (start, len) = (start as usize, len as usize);
        let mut data = Vec::with_capacity(outer * len * inner);
        for o in 0..outer {
            let base = o * n * inner;
            data.extend_from_slice(&self.data[base + start * inner..base + (start + len) * inner]);
        }
        let mut dims = self.dims.clone();
        dims[dim] = len as i64;
        Ok(Array { dims, data })
    }

    /// Writes `block` at indices `[start, start + block's size)` of dimension `dim`.
    pub(crate) fn write(&mut self, dim: usize, start: i64, block: &Array) -> Result<()> {
        self.check_dim(dim)?;
        let len = block.dims.get(dim).copied().unwrap_or(-1);
        let fits = block.dims.len() == self.dims.len()
            && (0..self.dims.len()).all(|d| d == dim || block.dims[d] == self.dims[d])
            && start >= 0
            && start + len <= self.dims[dim];
        if !fits {
            return Err(bad(format!(
                "a block {:?} at {start} of dimension {dim} of {:?}",
                block.dims, self.dims
            )));
        }
        let (outer, n, inner) = split(&self.dims, dim);
        let (start, len) = (start as usize, len as usize);
        for o in 0..outer {
            let to = o * n * inner + start * inner;
            let from = o * len * inner;
            self.data[to..to + len * inner].copy_from_slice(&block.data[from..from + len * inner]);
        }
        Ok(())
    }

    /// The last two dimensions swapped.
    pub(crate) fn transpose_last2(&self) -> Result<Array> {
        let r = self.dims.len();
        if r < 2 {
            return Err(bad(format!("a transpose of dims {:?}", self.dims)));
        }
        let (rows, cols) = (self.dims[r - 2] as usize, self.dims[r - 1] as usize);
        let batches = self.data.len() / (rows * cols).max(1);
        let mut data = vec![0.0; self.data.len()];
        for b in 0..batches {
            let m = &self.data[b * rows * cols..(b + 1) * rows * cols];
            let t = &mut data[b * rows * cols..(b + 1) * rows * cols];
            for i in 0..rows {
                for j in 0..cols {
                    t[j * rows + i] = m[i * cols + j];
                }
            }
        }
        let mut dims = self.dims.clone();
        dims.swap(r - 2, r - 1);
        Ok(Array { dims, data })
    }

    /// Index `i` of dimension `dim` becomes the old index `order[i]`; `order` is a
    /// permutation of the dimension's indices.
    pub(crate) fn reorder(&self, dim: usize, order: &[usize]) -> Result<Array> {
        self.check_dim(dim)?;
        let (outer, n, inner) = split(&self.dims, dim);
        if !is_permutation(order, n) {
            return Err(bad(format!(
                "an order of {} indices for dimension {dim} of {:?}",
                order.len(),
                self.dims
            )));
        }
        let mut data = Vec::with_capacity(self.data.len());
        for o in 0..outer {
            for &from in order {
                let at = (o * n + from) * inner;
                data.extend_from_slice(&self.data[at..at + inner]);
            }
        }
        Ok(Array {
            dims: self.dims.clone(),
            data,
        })
    }
}

/// The inverse permutation of `order`.
pub(crate) fn inverse(order: &[usize]) -> Vec<usize> {
    let mut inv = vec![0; order.len()];
    for (i, &o) in order.iter().enumerate() {
        inv[o] = i;
    }
    inv
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iota(dims: &[i64]) -> Array {
        let n = dims.iter().product::<i64>() as usize;
        Array::new(dims.to_vec(), (0..n).map(|i| i as f32).collect()).expect("array")
    }

    #[test]
    fn slices_and_writes_back_along_a_middle_dimension() {
        let a = iota(&[2, 3, 2]);
        let s = a.slice(1, 1, 2).expect("slice");
        assert_eq!(s.dims, vec![2, 2, 2]);
        assert_eq!(s.data, vec![2.0, 3.0, 4.0, 5.0, 8.0, 9.0, 10.0, 11.0]);
        let mut z = Array::zeros(vec![2, 3, 2]);
        z.write(1, 1, &s).expect("write");
        z.write(1, 0, &a.slice(1, 0, 1).expect("slice"))
            .expect("write");
        assert_eq!(z, a);
        assert!(a.slice(1, 2, 2).is_err());
        assert!(z.write(0, 1, &s).is_err());
    }

    #[test]
    fn transposes_each_matrix_of_a_batch() {
        let t = iota(&[2, 2, 3]).transpose_last2().expect("transpose");
        assert_eq!(t.dims, vec![2, 3, 2]);
        assert_eq!(&t.data[..6], &[0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
        assert_eq!(t.transpose_last2().expect("back"), iota(&[2, 2, 3]));
    }

    #[test]
    fn reorders_a_dimension_and_its_inverse_restores_it() {
        let a = iota(&[2, 4]);
        let order = [0, 2, 1, 3];
        let r = a.reorder(1, &order).expect("reorder");
        assert_eq!(r.data, vec![0.0, 2.0, 1.0, 3.0, 4.0, 6.0, 5.0, 7.0]);
        assert_eq!(r.reorder(1, &inverse(&order)).expect("back"), a);
        assert!(a.reorder(1, &[0, 0, 1, 2]).is_err());
    }
}
