//! Orderings of a tensor's dimensions: permutations and their inverses, and the shard-major
//! order FSDP stores parameters in.
//!
//! A sharded parameter is kept with its sharded dimension first, so each device's shard is one
//! contiguous slab and the reduce-scatter of its gradient needs no relayout. The lowering
//! (`stackscan::fsdp`) transposes between natural and shard-major order inside the program;
//! the runtime's host-side sharding permutes the data the same way. Both take their
//! permutations from here, so the two sides cannot drift apart.
//!
//! ```
//! use stackscan::layout::{natural_to_shard_major, permute, shard_major_dims, shard_major_to_natural};
//!
//! // A [2, 3] weight sharded along its minor dimension is stored as [3, 2].
//! assert_eq!(natural_to_shard_major(2, Some(1)), vec![1, 0]);
//! assert_eq!(shard_major_dims(&[2, 3], Some(1)), vec![3, 2]);
//! let natural = [0, 1, 2, 3, 4, 5];
//! let major = permute(&natural, &[2, 3], &natural_to_shard_major(2, Some(1)));
//! assert_eq!(major, vec![0, 3, 1, 4, 2, 5]);
//! assert_eq!(permute(&major, &[3, 2], &shard_major_to_natural(2, Some(1))), natural);
//! ```

/// The inverse of a permutation: `inverse(p)[p[i]] = i`. Transposing by `p` and then by
/// `inverse(p)` restores the original order.
pub fn inverse(perm: &[usize]) -> Vec<usize> {
    let mut inv = vec![0; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        inv[p] = i;
    }
    inv
}

/// The permutation from natural to shard-major order of a rank-`rank` tensor: `shard_dim`
/// first, the others in their order; the identity when nothing is sharded.
pub fn natural_to_shard_major(rank: usize, shard_dim: Option<usize>) -> Vec<usize> {
    match shard_dim {
        None => (0..rank).collect(),
        Some(d) => std::iter::once(d)
            .chain((0..rank).filter(|&i| i != d))
            .collect(),
    }
}

/// The permutation from shard-major back to natural order (the inverse of
/// [`natural_to_shard_major`]).
pub fn shard_major_to_natural(rank: usize, shard_dim: Option<usize>) -> Vec<usize> {
    inverse(&natural_to_shard_major(rank, shard_dim))
}

/// `dims` reordered by `perm`: dimension `i` of the result is `dims[perm[i]]`, as for a
/// transpose.
pub fn permute_dims(dims: &[i64], perm: &[usize]) -> Vec<i64> {
    perm.iter().map(|&p| dims[p]).collect()
}

/// `shape` in shard-major order.
pub fn shard_major_dims(shape: &[i64], shard_dim: Option<usize>) -> Vec<i64> {
    permute_dims(shape, &natural_to_shard_major(shape.len(), shard_dim))
}

/// Row-major strides of `dims`.
fn strides(dims: &[i64]) -> Vec<usize> {
    let mut s = vec![1usize; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1] as usize;
    }
    s
}

/// Transposes a row-major array of dimensions `dims` on the host: result dimension `i` is input
/// dimension `perm[i]`, the same as the program's `transpose` by `perm`.
pub fn permute<T: Copy + Default>(data: &[T], dims: &[i64], perm: &[usize]) -> Vec<T> {
    let out_dims = permute_dims(dims, perm);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_major_puts_the_sharded_dimension_first_and_back() {
        assert_eq!(natural_to_shard_major(3, None), vec![0, 1, 2]);
        assert_eq!(natural_to_shard_major(3, Some(2)), vec![2, 0, 1]);
        assert_eq!(shard_major_to_natural(3, Some(2)), vec![1, 2, 0]);
        assert_eq!(shard_major_dims(&[2, 4, 3], Some(1)), vec![4, 2, 3]);
        for d in 0..4 {
            let to = natural_to_shard_major(4, Some(d));
            let back = shard_major_to_natural(4, Some(d));
            let composed: Vec<usize> = back.iter().map(|&b| to[b]).collect();
            assert_eq!(composed, vec![0, 1, 2, 3]);
        }
    }

    #[test]
    fn permuting_data_there_and_back_is_the_identity() {
        let dims = [2, 4, 3];
        let data: Vec<i32> = (0..24).collect();
        let to = natural_to_shard_major(3, Some(1));
        let major = permute(&data, &dims, &to);
        // Element [a, b, c] of the natural array is element [b, a, c] of the shard-major one.
        for (a, b, c) in
            (0..2).flat_map(|a| (0..4).flat_map(move |b| (0..3).map(move |c| (a, b, c))))
        {
            assert_eq!(major[b * 6 + a * 3 + c], data[a * 12 + b * 3 + c]);
        }
        let back = permute(&major, &permute_dims(&dims, &to), &inverse(&to));
        assert_eq!(back, data);
    }
}
