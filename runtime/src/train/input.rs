//! The trainer's host inputs, and the checks each passes before anything is uploaded: the
//! element type and per-device length the model declares, and its declared value range.
//!
//! On the device nothing would catch a bad value: a gather clamps a token id outside the
//! vocabulary and a one-hot matches no class for such a label, so the step would run and
//! train on garbage. Every element is therefore checked on the host, which costs one pass
//! over data that is about to be copied anyway.
//!
//! ```
//! use stackscan::fsdp::InputSpec;
//! use stackscan::{DType, TensorType};
//! use stackscan_runtime::Error;
//! use stackscan_runtime::train::HostInput;
//!
//! let labels = InputSpec::new("labels", TensorType::new(DType::I32, [2, 3])).with_values(0..8);
//! let err = HostInput::I32(vec![0, 1, 2, 3, 8, 5]).check(&labels, 1).unwrap_err();
//! assert!(matches!(err, Error::InputOutOfRange { ref position, value: 8, .. } if position == &[1, 1]));
//! assert_eq!(
//!     err.to_string(),
//!     "device 1, input `labels` at [1, 1]: 8 is outside the valid values 0..8"
//! );
//! ```

use stackscan::DType;
use stackscan::fsdp::InputSpec;

use crate::error::{Error, Result};

/// One device's value of one model input.
#[derive(Clone, Debug, PartialEq)]
pub enum HostInput {
    /// Floating-point values (sent as the input's element type; f32 here).
    F32(Vec<f32>),
    /// Integer values (token ids, labels).
    I32(Vec<i32>),
}

impl HostInput {
    /// The element type the values are sent as.
    pub fn dtype(&self) -> DType {
        match self {
            HostInput::F32(_) => DType::F32,
            HostInput::I32(_) => DType::I32,
        }
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        match self {
            HostInput::F32(v) => v.len(),
            HostInput::I32(v) => v.len(),
        }
    }

    /// Whether there are no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Part `i` of `k` equal runs of the values: micro-batch `i` of an input that holds `k`
    /// micro-batches one after another (`len` a multiple of `k`).
    pub fn part(&self, i: usize, k: usize) -> HostInput {
        let run = self.len() / k.max(1);
        let range = i * run..(i + 1) * run;
        match self {
            HostInput::F32(v) => HostInput::F32(v[range].to_vec()),
            HostInput::I32(v) => HostInput::I32(v[range].to_vec()),
        }
    }

    /// Checks that these values can be device `device`'s share of `spec`: its element type,
    /// its per-device element count, and every value inside its declared range. The first
    /// value out of range is reported with its index in the per-device array.
    pub fn check(&self, spec: &InputSpec, device: usize) -> Result<()> {
        if self.dtype() != spec.ty.dtype {
            return Err(Error::InputType {
                input: spec.name.clone(),
                device,
                expected: spec.ty.dtype,
                actual: self.dtype(),
            });
        }
        let expected = spec.ty.num_elements();
        if self.len() != expected {
            return Err(Error::InputLength {
                input: spec.name.clone(),
                device,
                dims: spec.ty.dims.clone(),
                expected,
                actual: self.len(),
            });
        }
        // Only integer inputs declare ranges (`StackModel::validate` rejects the others).
        let (Some(range), HostInput::I32(values)) = (&spec.values, self) else {
            return Ok(());
        };
        let outside = values
            .iter()
            .map(|&v| i64::from(v))
            .enumerate()
            .find(|(_, v)| !range.contains(v));
        match outside {
            None => Ok(()),
            Some((flat, value)) => Err(Error::InputOutOfRange {
                input: spec.name.clone(),
                device,
                position: unravel(flat, &spec.ty.dims),
                value,
                expected: range.clone(),
            }),
        }
    }
}

/// The row-major multi-index of element `flat` of an array of shape `dims`.
fn unravel(mut flat: usize, dims: &[i64]) -> Vec<i64> {
    let mut position = vec![0; dims.len()];
    for (p, &d) in position.iter_mut().zip(dims).rev() {
        // `flat` indexes an element, so no dimension is 0 here; `max` keeps the division total.
        let d = usize::try_from(d).unwrap_or(0).max(1);
        *p = (flat % d) as i64;
        flat /= d;
    }
    position
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_row_major() {
        assert_eq!(unravel(0, &[2, 3]), [0, 0]);
        assert_eq!(unravel(5, &[2, 3]), [1, 2]);
        assert_eq!(unravel(7, &[2, 2, 2]), [1, 1, 1]);
        assert_eq!(unravel(0, &[]), Vec::<i64>::new());
    }
}
