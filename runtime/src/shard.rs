//! Host-side layout of FSDP parameters: splitting full weights into per-device slabs in
//! shard-major order and reassembling them, matching what `stackscan::fsdp` programs expect.
//!
//! ```
//! use stackscan::DType;
//! use stackscan::fsdp::ParamSpec;
//! use stackscan_runtime::shard::{shard, unshard};
//!
//! // A [2, 3] weight sharded along its minor dimension over 3 devices, one layer.
//! let spec = ParamSpec::sharded("w", &[2, 3], DType::F32, 1);
//! let full = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0];
//! let slabs = shard(&spec, 1, &full, 3)?;
//! assert_eq!(slabs, vec![vec![0.0, 3.0], vec![1.0, 4.0], vec![2.0, 5.0]]);
//! assert_eq!(unshard(&spec, 1, &slabs)?, full);
//! # Ok::<(), stackscan_runtime::Error>(())
//! ```

use stackscan::fsdp::ParamSpec;
pub use stackscan::layout::permute;

use crate::error::{Error, Result};

fn elements(spec: &ParamSpec) -> usize {
    spec.shape.iter().product::<i64>().max(0) as usize
}

/// Checks that `len` values fill `layers` copies of `spec` split `n` ways.
fn check(spec: &ParamSpec, layers: usize, len: usize, n: usize, per_device: bool) -> Result<()> {
    let per = elements(spec);
    let dims: Vec<i64> = std::iter::once(layers as i64)
        .chain(spec.shape.iter().copied())
        .collect();
    let splits = spec.shard_dim.map_or(1, |d| {
        n.max(1) * usize::from(spec.shape[d] % n.max(1) as i64 == 0)
    });
    if n == 0 || splits == 0 {
        return Err(Error::Mesh(format!(
            "parameter `{}` of shape {:?} does not split over {n} devices",
            spec.name, spec.shape
        )));
    }
    let expected = if per_device && spec.shard_dim.is_some() {
        layers * per / n
    } else {
        layers * per
    };
    if len != expected {
        return Err(Error::HostDataLength {
            dims,
            expected,
            actual: len,
        });
    }
    Ok(())
}

/// Splits `layers` stacked copies of a parameter (natural layout, row-major) into `n`
/// per-device slabs `[layers, slab…]`; a replicated parameter is copied whole to each device.
pub fn shard<T: Copy + Default>(
    spec: &ParamSpec,
    layers: usize,
    full: &[T],
    n: usize,
) -> Result<Vec<Vec<T>>> {
    check(spec, layers, full.len(), n, false)?;
    let per = elements(spec);
    let mut out = vec![Vec::with_capacity(full.len() / n); n];
    for l in 0..layers {
        let major = permute(
            &full[l * per..(l + 1) * per],
            &spec.shape,
            &spec.natural_to_shard_major(),
        );
        match spec.shard_dim {
            None => out.iter_mut().for_each(|o| o.extend_from_slice(&major)),
            Some(_) => {
                let slab = major.len() / n;
                for (d, o) in out.iter_mut().enumerate() {
                    o.extend_from_slice(&major[d * slab..(d + 1) * slab]);
                }
            }
        }
    }
    Ok(out)
}

/// Reassembles per-device slabs into `layers` stacked copies in natural layout. For a
/// replicated parameter device 0's copy is taken.
pub fn unshard<T: Copy + Default>(
    spec: &ParamSpec,
    layers: usize,
    slabs: &[Vec<T>],
) -> Result<Vec<T>> {
    let n = slabs.len();
    if n == 0 {
        return Err(Error::Mesh(format!(
            "no slabs of parameter `{}` to reassemble",
            spec.name
        )));
    }
    for s in slabs {
        check(spec, layers, s.len(), n, true)?;
    }
    let per = elements(spec);
    let major_dims = spec.shard_major_dims();
    let back = spec.shard_major_to_natural();
    let mut out = Vec::with_capacity(layers * per);
    for l in 0..layers {
        let major: Vec<T> = match spec.shard_dim {
            None => slabs[0][l * per..(l + 1) * per].to_vec(),
            Some(_) => {
                let slab = per / n;
                slabs
                    .iter()
                    .flat_map(|s| s[l * slab..(l + 1) * slab].iter().copied())
                    .collect()
            }
        };
        out.extend(permute(&major, &major_dims, &back));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use stackscan::DType;

    #[test]
    fn wrong_lengths_and_device_counts_are_errors() {
        let spec = ParamSpec::sharded("w", &[4, 2], DType::F32, 0);
        assert!(matches!(
            shard(&spec, 1, &[0.0f32; 7], 2),
            Err(Error::HostDataLength { .. })
        ));
        assert!(matches!(
            shard(&spec, 1, &[0.0f32; 8], 3),
            Err(Error::Mesh(_))
        ));
        assert!(matches!(
            shard(&spec, 1, &[0.0f32; 8], 0),
            Err(Error::Mesh(_))
        ));
        assert!(matches!(
            unshard(&spec, 1, &[vec![0.0f32; 3], vec![0.0; 4]]),
            Err(Error::HostDataLength { .. })
        ));
        assert!(matches!(unshard::<f32>(&spec, 1, &[]), Err(Error::Mesh(_))));
    }

    #[test]
    fn round_trip_over_layers_and_dims() {
        let spec = ParamSpec::sharded("w", &[2, 4, 3], DType::F32, 1);
        let full: Vec<f64> = (0..48).map(f64::from).collect();
        let slabs = shard(&spec, 2, &full, 2).unwrap();
        assert_eq!(slabs[0].len(), 24);
        assert_eq!(unshard(&spec, 2, &slabs).unwrap(), full);
    }
}
