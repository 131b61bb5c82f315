//! 1000 execute + transfer round trips leave the live-buffer count where it started and do not
//! grow the resident set by more than a few MB.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan_runtime::testing as common;

use stackscan_runtime::CompileOptions;

const STEP: &str = r#"
func.func public @main(%x: tensor<64x64xf32>, %w: tensor<64x64xf32>) -> (tensor<64x64xf32>, tensor<f32>) {
  %y = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %s = stablehlo.reduce(%y init: %zero) applies stablehlo.add across dimensions = [0, 1] : (tensor<64x64xf32>, tensor<f32>) -> tensor<f32>
  return %y, %s : tensor<64x64xf32>, tensor<f32>
}"#;

/// Resident set size of this process in bytes (Linux `/proc/self/statm`).
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("read /proc/self/statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("statm has a resident field");
    pages * 4096
}

#[test]
fn a_thousand_round_trips_leak_no_buffers() {
    let client = common::cpu_client(1);
    let dev = client.devices()[0].clone();
    let exe = client.compile(STEP, &CompileOptions::default()).unwrap();
    let w: Vec<f32> = (0..64 * 64).map(|i| (i % 7) as f32 * 0.125).collect();
    let w_buf = client.buffer(&w, &[64, 64], &dev).unwrap();
    let baseline = client.live_buffers();
    let round = |i: usize| {
        let x: Vec<f32> = (0..64 * 64).map(|j| ((i + j) % 5) as f32).collect();
        let x_buf = client.buffer(&x, &[64, 64], &dev).unwrap();
        let out = exe.execute(&[[&x_buf, &w_buf]]).unwrap();
        let y = out[0][0].to_host::<f32>().unwrap();
        let s = out[0][1].to_host::<f32>().unwrap();
        assert_eq!(y.len(), 64 * 64);
        assert_eq!(s.len(), 1);
    };
    // Warm up allocator pools and thread stacks before measuring.
    for i in 0..100 {
        round(i);
    }
    assert_eq!(client.live_buffers(), baseline);
    let before = rss_bytes();
    for i in 0..1000 {
        round(i);
        assert_eq!(client.live_buffers(), baseline, "round {i}");
    }
    let grown = rss_bytes().saturating_sub(before);
    eprintln!("rss grew by {} KiB over 1000 round trips", grown / 1024);
    assert!(grown < 4 << 20, "rss grew by {grown} bytes");
    drop(w_buf);
    assert_eq!(client.live_buffers(), baseline - 1);
}
