//! The fusion rule on graphs small enough to count by hand; each expected byte count is worked
//! out beside it (f32: 4 bytes an element).

use super::*;
use crate::builder::Scope;
use crate::dtype::DType;
use crate::types::TensorType;

fn f32(dims: &[i64]) -> TensorType {
    TensorType::new(DType::F32, dims)
}

#[test]
fn elementwise_chains_fuse_and_only_boundaries_touch_memory() {
    let s = Scope::new("f");
    let x = s.param(f32(&[4, 8])); // 128 B
    let w = s.param(f32(&[8, 16])); // 512 B
    // One fusion of exp, ·2, +1 (and their constants): reads x, writes `a` for the product.
    let a = x
        .exp()
        .unwrap()
        .scale(2.0)
        .unwrap()
        .add_scalar(1.0)
        .unwrap();
    let z = a.matmul(&w).unwrap(); // [4, 16], 256 B
    // z² fused into its row sum: reads z, writes the [4] sum (16 B), returned through a
    // reshape (a bitcast, no traffic).
    let r = z
        .square()
        .unwrap()
        .sum(&[1])
        .unwrap()
        .reshape(&[2, 2])
        .unwrap();
    // Another consumer of z in its own fusion: reads z, writes t (256 B).
    let t = z.scale(3.0).unwrap();
    // A slice reads only what it keeps: 4·2·4 = 32 B, and writes as much.
    let u = x.slice_axis(1, 0, 2).unwrap();
    let c = of(&s.finish(&[r, t, u]).unwrap()).unwrap();
    // 128 + 128 (fusion 1) + 256 + 16 (z² sum) + 256 + 256 (z·3) + 32 + 32 (slice) = 1104.
    assert_eq!(c.hbm_bytes.get(DType::F32), 1104);
    // The product reads a (128) and w (512) and writes z (256).
    assert_eq!(c.dot_bytes.get(DType::F32), 896);
    // Kernels: the exp chain, the product, the z² sum, z·3, the slice.
    assert_eq!(c.kernels, 5);
    // The unfused count is larger: every op reads and writes its own tensors.
    assert!(c.bytes_read.total() + c.bytes_written.total() > 2 * 1104);
}

#[test]
fn a_reduction_result_is_written_even_when_its_consumer_fuses_with_its_input() {
    let s = Scope::new("f");
    let x = s.param(f32(&[4, 8])); // 128 B
    let m = x.max_over(&[1]).unwrap(); // [4], 16 B
    let y = x.sub(&m.broadcast_in_dim(&[4, 8], &[0]).unwrap()).unwrap();
    let c = of(&s.finish(&[y]).unwrap()).unwrap();
    // The max reads x (128) and writes m (16); the broadcast-subtract reads m (16) and x (128)
    // and writes y (128): 416.
    assert_eq!(c.hbm_bytes.get(DType::F32), 416);
    // The max, then the broadcast-subtract.
    assert_eq!(c.kernels, 2);
    assert_eq!(c.dot_bytes.total(), 0);
}

#[test]
fn a_scan_moves_its_bodys_traffic_once_per_step() {
    let f = Scope::new("f");
    let h0 = f.param(f32(&[8]));
    let (carry, _) = f
        .scan(&[h0], &[], 5, false, |_, carry, _| {
            Ok((vec![carry[0].exp()?.add_scalar(1.0)?], vec![]))
        })
        .unwrap();
    let c = of(&f.finish(&carry).unwrap()).unwrap();
    // Each step reads the 32-byte carry and writes the next one: 64 B, five times.
    assert_eq!(c.hbm_bytes.get(DType::F32), 320);
    // One fusion a step.
    assert_eq!(c.kernels, 5);
}

#[test]
fn the_single_consumer_rule_writes_out_shared_values_and_reduction_inputs() {
    let s = Scope::new("f");
    let x = s.param(f32(&[4, 8])); // 128 B
    let a = x.exp().unwrap(); // read by two ops
    let b = a.scale(2.0).unwrap(); // 128 B result
    let r = a.sum(&[1]).unwrap(); // [4]: 16 B
    // x² has one reader, a reduction.
    let q = x.square().unwrap().sum(&[1]).unwrap(); // 16 B
    let c = of(&s.finish(&[b, r, q]).unwrap()).unwrap();
    // Shared: exp, a·2 and the sum of a in one fusion reading x and writing b and r
    // (128 + 128 + 16); x² fused into its sum, reading x and writing q (128 + 16): 416 B in
    // two kernels.
    assert_eq!(c.hbm_bytes.get(DType::F32), 416);
    assert_eq!(c.kernels, 2);
    // Single consumer: exp reads x, writes a (128 + 128); a·2 reads a, writes b (128 + 128);
    // the sum of a reads a, writes r (128 + 16); x² reads x, writes it (128 + 128); its sum
    // reads it, writes q (128 + 16): 656 + 400 = 1056 B in five kernels. The scale's constant is
    // recomputed where it is used and reads nothing.
    assert_eq!(c.single_consumer_hbm_bytes.get(DType::F32), 1056);
    assert_eq!(c.single_consumer_kernels, 5);
}

#[test]
fn under_the_single_consumer_rule_a_sole_reader_still_fuses_its_chain() {
    let s = Scope::new("f");
    let x = s.param(f32(&[4, 8])); // 128 B
    let y = x
        .exp()
        .unwrap()
        .scale(2.0)
        .unwrap()
        .add_scalar(1.0)
        .unwrap();
    let c = of(&s.finish(&[y]).unwrap()).unwrap();
    // One fusion under both rules: read x, write y.
    assert_eq!(c.hbm_bytes.get(DType::F32), 256);
    assert_eq!(c.single_consumer_hbm_bytes.get(DType::F32), 256);
    assert_eq!((c.kernels, c.single_consumer_kernels), (1, 1));
}
