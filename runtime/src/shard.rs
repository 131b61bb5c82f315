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
//! let slabs = shard(&spec, 1, &full, 3);
//! assert_eq!(slabs, vec![vec![0.0, 3.0], vec![1.0, 4.0], vec![2.0, 5.0]]);
//! assert_eq!(unshard(&spec, 1, &slabs), full);
//! ```

use stackscan::fsdp::ParamSpec;

/// Row-major strides of `dims`.
fn strides(dims: &[i64]) -> Vec<usize> {
    let mut s = vec![1usize; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1] as usize;
    }
    s
}

/// Permutes the dimensions of a row-major array: result dimension `i` is input `perm[i]`.
pub fn permute<T: Copy + Default>(data: &[T], dims: &[i64], perm: &[usize]) -> Vec<T> {
    let out_dims: Vec<i64> = perm.iter().map(|&p| dims[p]).collect();
    let in_strides = strides(dims);
    let out_strides = strides(&out_dims);
    let mut out = vec![T::default(); data.len()];
    for (o, slot) in out.iter_mut().enumerate() {
        let mut src = 0;
        for (i, &p) in perm.iter().enumerate() {
            let idx = (o / out_strides[i]) % out_dims[i].max(1) as usize;
            src += idx * in_strides[p];
        }
        *slot = data[src];
    }
    out
}

fn inverse(perm: &[usize]) -> Vec<usize> {
    let mut inv = vec![0; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        inv[p] = i;
    }
    inv
}

/// `natural → shard-major` permutation of a parameter.
fn to_major(spec: &ParamSpec) -> Vec<usize> {
    match spec.shard_dim {
        None => (0..spec.shape.len()).collect(),
        Some(d) => std::iter::once(d)
            .chain((0..spec.shape.len()).filter(|&i| i != d))
            .collect(),
    }
}

fn elements(spec: &ParamSpec) -> usize {
    spec.shape.iter().product::<i64>().max(0) as usize
}

/// Splits `layers` stacked copies of a parameter (natural layout, row-major) into `n`
/// per-device slabs `[layers, slab…]`; a replicated parameter is copied whole to each device.
pub fn shard<T: Copy + Default>(
    spec: &ParamSpec,
    layers: usize,
    full: &[T],
    n: usize,
) -> Vec<Vec<T>> {
    let per = elements(spec);
    let mut out = vec![Vec::with_capacity(full.len() / n.max(1)); n];
    for l in 0..layers {
        let major = permute(&full[l * per..(l + 1) * per], &spec.shape, &to_major(spec));
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
    out
}

/// Reassembles per-device slabs into `layers` stacked copies in natural layout. For a
/// replicated parameter device 0's copy is taken.
pub fn unshard<T: Copy + Default>(spec: &ParamSpec, layers: usize, slabs: &[Vec<T>]) -> Vec<T> {
    let n = slabs.len();
    let per = elements(spec);
    let major_dims = spec.shard_major_dims();
    let back = inverse(&to_major(spec));
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
    out
}
