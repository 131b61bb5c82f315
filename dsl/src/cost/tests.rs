//! Hand-derived costs: each expected figure is worked out in the comment beside it.

use super::count::slot;
use super::*;
use crate::builder::Scope;
use crate::dtype::DType;
use crate::ir::Axis;
use crate::types::TensorType;

fn f32(dims: &[i64]) -> TensorType {
    TensorType::new(DType::F32, dims)
}

fn axis4() -> Axis {
    Axis {
        name: "fsdp".to_owned(),
        size: 4,
    }
}

#[test]
fn slots_follow_dtype_all() {
    for (i, d) in DType::ALL.into_iter().enumerate() {
        assert_eq!(slot(d), i);
    }
}

#[test]
fn matmul_is_2mkn() {
    let s = Scope::new("f");
    let x = s.param(f32(&[3, 5]));
    let w = s.param(f32(&[5, 7]));
    let y = x.matmul(&w).unwrap();
    let c = of(&s.finish(&[y]).unwrap()).unwrap();
    // M=3, K=5, N=7: 2·3·5·7 = 210; no other op, so nothing else counted.
    assert_eq!(c.matrix_flops.get(DType::F32), 210);
    assert_eq!(c.flops(), 210);
    assert_eq!(c.bytes_read.total() + c.bytes_written.total(), 0);
}

#[test]
fn batched_dot_counts_the_batch() {
    let s = Scope::new("f");
    let x = s.param(f32(&[4, 3, 5]));
    let w = s.param(f32(&[4, 5, 7]));
    let y = x.matmul(&w).unwrap();
    let c = of(&s.finish(&[y]).unwrap()).unwrap();
    // B=4, M=3, K=5, N=7: 2·4·3·5·7 = 840.
    assert_eq!(c.matrix_flops.get(DType::F32), 840);
}

#[test]
fn add_reads_two_operands_and_writes_one() {
    let s = Scope::new("f");
    let a = s.param(f32(&[2, 3]));
    let b = s.param(f32(&[2, 3]));
    let y = a.add(&b).unwrap();
    let c = of(&s.finish(&[y]).unwrap()).unwrap();
    // 2·3 = 6 elements of 4 bytes: reads 2·6·4 = 48, writes 6·4 = 24; one FLOP each: 6.
    assert_eq!(c.bytes_read.get(DType::F32), 48);
    assert_eq!(c.bytes_written.get(DType::F32), 24);
    assert_eq!(c.vector_flops.get(DType::F32), 6);
    assert_eq!(c.matrix_flops.total(), 0);
}

#[test]
fn bf16_counts_two_bytes_per_element() {
    let s = Scope::new("f");
    let a = s.param(TensorType::new(DType::BF16, [2, 3]));
    let y = a.add(&a).unwrap();
    let c = of(&s.finish(&[y]).unwrap()).unwrap();
    // 6 elements of 2 bytes: reads 2·6·2 = 24, writes 6·2 = 12, all under bf16.
    assert_eq!(c.bytes_read.get(DType::BF16), 24);
    assert_eq!(c.bytes_written.get(DType::BF16), 12);
    assert_eq!(c.bytes_read.get(DType::F32), 0);
    assert_eq!(c.vector_flops.get(DType::BF16), 6);
}

#[test]
fn reduce_counts_input_elements() {
    let s = Scope::new("f");
    let a = s.param(f32(&[4, 5]));
    let y = a.sum(&[1]).unwrap();
    let c = of(&s.finish(&[y]).unwrap()).unwrap();
    // 4·5 = 20 input elements: 20 FLOPs, 80 bytes read, 4·4 = 16 written.
    assert_eq!(c.vector_flops.get(DType::F32), 20);
    assert_eq!(c.bytes_read.get(DType::F32), 80);
    assert_eq!(c.bytes_written.get(DType::F32), 16);
}

#[test]
fn scan_multiplies_its_body_by_its_length() {
    let s = Scope::new("f");
    let c0 = s.param(f32(&[2, 2]));
    let w = s.param(f32(&[2, 2]));
    let (out, _) = s
        .scan(&[c0], &[], 5, false, |_, c, _| {
            let next = c[0].matmul(&w)?.add(&c[0])?;
            Ok((vec![next], vec![]))
        })
        .unwrap();
    let c = of(&s.finish(&out).unwrap()).unwrap();
    // Per step: a 2x2·2x2 matmul, 2·2·2·2 = 16 FLOPs, and an add of 4 elements reading
    // 2·4·4 = 32 bytes and writing 16. Five steps: 80, 20, 160, 80.
    assert_eq!(c.matrix_flops.get(DType::F32), 80);
    assert_eq!(c.vector_flops.get(DType::F32), 20);
    assert_eq!(c.bytes_read.get(DType::F32), 160);
    assert_eq!(c.bytes_written.get(DType::F32), 80);
}

#[test]
fn collectives_on_four_devices() {
    let s = Scope::new("f");
    let shard = s.param(f32(&[2, 3]));
    let full = s.param(f32(&[8, 3]));
    let g = shard.all_gather(0, &axis4()).unwrap();
    let r = full.reduce_scatter(0, &axis4()).unwrap();
    let p = full.psum(&axis4()).unwrap();
    let t = full.all_to_all(0, 0, &axis4()).unwrap();
    let c = of(&s.finish(&[g, r, p, t]).unwrap()).unwrap();
    // all_gather of a 2·3·4 = 24-byte shard over n=4: (4−1)·24 = 72.
    assert_eq!(c.collective(Collective::AllGather).get(DType::F32), 72);
    // reduce_scatter of 8·3·4 = 96 bytes: (4−1)·96/4 = 72.
    assert_eq!(c.collective(Collective::ReduceScatter).get(DType::F32), 72);
    // all_reduce of 96 bytes: 2·(4−1)·96/4 = 144.
    assert_eq!(c.collective(Collective::AllReduce).get(DType::F32), 144);
    // all_to_all of 96 bytes: (4−1)·96/4 = 72.
    assert_eq!(c.collective(Collective::AllToAll).get(DType::F32), 72);
    // Collectives are link traffic, not memory traffic or FLOPs.
    assert_eq!(c.bytes_read.total() + c.bytes_written.total(), 0);
    assert_eq!(c.flops(), 0);
}

#[test]
fn matmul_vjp_costs_two_forward_dots() {
    let s = Scope::new("f");
    let x = s.param(f32(&[3, 5]));
    let w = s.param(f32(&[5, 7]));
    let y = x.matmul(&w).unwrap();
    let forward = s.finish(&[y]).unwrap();
    let backward = crate::vjp(&forward).unwrap();
    // dx = dy·Wᵀ: [3,7]x[7,5], 2·3·7·5 = 210; dW = xᵀ·dy: [5,3]x[3,7], 2·5·3·7 = 210.
    // Each has the forward's M·K·N, so together 2·210 = 420.
    assert_eq!(of(&forward).unwrap().matrix_flops.get(DType::F32), 210);
    assert_eq!(of(&backward).unwrap().matrix_flops.get(DType::F32), 420);
}

#[test]
fn while_of_unknown_trip_count_is_flagged_not_guessed() {
    let s = Scope::new("f");
    let a = s.param(f32(&[2, 2]));
    let out = s
        .while_loop(
            &[a],
            |cs, c| c[0].sum_all()?.lt(&cs.scalar(10.0, DType::F32)?),
            |_, c| Ok(vec![c[0].add(&c[0])?]),
            &[],
        )
        .unwrap();
    let c = of(&s.finish(&out).unwrap()).unwrap();
    assert_eq!(c.unknown_trip_loops, 1);
    assert_eq!(c.flops(), 0);
    // Inside a scan of 3 the loop runs, uncounted, three times.
    assert_eq!((c * 3).unknown_trip_loops, 3);
}

#[test]
fn dead_nodes_cost_nothing() {
    let s = Scope::new("f");
    let a = s.param(f32(&[2, 3]));
    let _unused = a.mul(&a).unwrap();
    let y = a.add(&a).unwrap();
    let c = of(&s.finish(&[y]).unwrap()).unwrap();
    // Only the add runs: 6 FLOPs, not 12.
    assert_eq!(c.vector_flops.get(DType::F32), 6);
}

#[test]
fn costs_add_and_sum_fieldwise() {
    let s = Scope::new("f");
    let a = s.param(f32(&[2, 3]));
    let y = a.add(&a).unwrap();
    let one = of(&s.finish(&[y]).unwrap()).unwrap();
    let three: Cost = [one, one, one].into_iter().sum();
    // 6 FLOPs and 24 written bytes per copy.
    assert_eq!(three.vector_flops.get(DType::F32), 18);
    assert_eq!((one + one).bytes_written.get(DType::F32), 48);
    assert_eq!(three, one * 3);
}

#[test]
fn products_are_bucketed_by_their_smaller_output_side() {
    use crate::builder::Scope;
    let t = |d: &[i64]| crate::types::TensorType::new(crate::dtype::DType::F32, d);
    let s = Scope::new("f");
    // Tokens [2, 64] (M = 128) times a [256, 896] weight: min(M, N) = 128, bucket 7.
    let x = s.param(t(&[2, 64, 256]));
    let w = s.param(t(&[256, 896]));
    let y = x.matmul(&w).unwrap();
    // 16 batched [64, 32]·[32, 64] products: min(M, N) = 64 (K = 32 does not count), bucket 6.
    let q = s.param(t(&[16, 64, 32]));
    let k = s.param(t(&[16, 32, 64]));
    let z = q.matmul(&k).unwrap();
    let c = super::of(&s.finish(&[y, z]).unwrap()).unwrap();
    let mut expected = [0u64; super::SIDE_BUCKETS];
    expected[7] = 2 * 128 * 256 * 896;
    expected[6] = 2 * 16 * 64 * 32 * 64;
    assert_eq!(c.matrix_flops_by_side, expected);
    assert_eq!(
        c.matrix_flops_by_side.iter().sum::<u64>(),
        c.matrix_flops.total()
    );
    assert_eq!((c * 3).matrix_flops_by_side[7], 3 * expected[7]);
    assert_eq!(
        (
            super::side_bucket(0),
            super::side_bucket(1),
            super::side_bucket(127)
        ),
        (0, 0, 6)
    );
    assert_eq!(super::side_bucket(u64::MAX), super::SIDE_BUCKETS - 1);
}
