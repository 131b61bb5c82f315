//! What the trainer tests share: the optimizer they train with and deterministic batches, so
//! tests that compare two trainers step for step feed both the same data without each
//! keeping its own copy of the generator.

use stackscan::fsdp::Adam;

use crate::train::HostInput;

/// Adam with a large step (`lr` 0.05, β₂ 0.95), so a few steps of a tiny model move its loss
/// well beyond rounding and a skipped or repeated update shows in the next loss.
pub const ADAM: Adam = Adam {
    lr: 0.05,
    beta1: 0.9,
    beta2: 0.95,
    eps: 1e-8,
    weight_decay: 0.0,
    schedule: stackscan::fsdp::Schedule::Constant,
    clip_grad_norm: None,
};

/// One step's batch: for each of `devices`, `inputs` f32 inputs of `len` values each, in
/// [-0.5, 0.5). Values differ by device, input, position and `step` (a period of 11 keeps
/// them away from a constant), and the same arguments always give the same batch.
pub fn batch(devices: usize, inputs: usize, len: usize, step: usize) -> Vec<Vec<HostInput>> {
    (0..devices)
        .map(|d| {
            (0..inputs)
                .map(|k| {
                    let v = (0..len)
                        .map(|i| ((i * 7 + d * 3 + k * 5 + step * 2) % 11) as f32 / 11.0 - 0.5);
                    HostInput::F32(v.collect())
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_are_deterministic_and_differ_by_device_input_and_step() {
        let values = |b: &[Vec<HostInput>], d: usize, k: usize| match &b[d][k] {
            HostInput::F32(v) => v.clone(),
            other => panic!("not f32: {other:?}"),
        };
        let a = batch(2, 2, 16, 3);
        assert_eq!(a.len(), 2);
        assert!(a.iter().all(|inputs| inputs.len() == 2));
        assert_eq!(values(&a, 0, 0).len(), 16);
        assert_eq!(values(&a, 1, 1), values(&batch(2, 2, 16, 3), 1, 1));
        // Element 0 of device 0, input 0 at step 3: (0 + 0 + 0 + 6) % 11 / 11 − 0.5.
        assert_eq!(values(&a, 0, 0)[0], 6.0 / 11.0 - 0.5);
        assert_ne!(values(&a, 0, 0), values(&a, 1, 0));
        assert_ne!(values(&a, 0, 0), values(&a, 0, 1));
        assert_ne!(values(&a, 0, 0), values(&batch(2, 2, 16, 4), 0, 0));
        assert!(values(&a, 1, 0).iter().all(|v| (-0.5..0.5).contains(v)));
    }
}
