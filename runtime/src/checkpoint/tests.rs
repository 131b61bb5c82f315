//! Checksums: a flipped byte in a tensor's data or in its recorded digest is refused, naming
//! the tensor; checksums and tensors must name each other; a file from before checksums loads.

use std::path::Path;

use serde_json::{Map, Value};

use super::{Checkpoint, Tensor};
use crate::error::Error;

const PATH: &str = "run/latest.safetensors";

fn checkpoint() -> Checkpoint {
    let tensor = |name: &str, shape: Vec<i64>, scale: f32| {
        let n = shape.iter().product::<i64>() as usize;
        let data = (0..n).map(|i| (i as f32 - 3.5) * scale).collect();
        Tensor {
            name: name.into(),
            shape,
            data,
        }
    };
    Checkpoint {
        // In name order: the file's, so a checkpoint reads back equal.
        tensors: vec![
            tensor("adam.m.layers.attn.wq", vec![2, 3, 4], 1e-3),
            tensor("embed", vec![4, 2], 0.5),
            tensor("layers.attn.wq", vec![2, 3, 4], -0.0094),
        ],
        metadata: [("step", "10"), ("data_position", "20"), ("rng_state", "7")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
    }
}

fn parse(bytes: &[u8]) -> Result<Checkpoint, Error> {
    Checkpoint::from_bytes(bytes, Path::new(PATH))
}

/// Where the data starts: after the length and the header.
fn data_start(bytes: &[u8]) -> usize {
    let len = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
    8 + len as usize
}

/// `bytes` with its header edited by `edit`, written back as the writer lays a header out.
fn with_header(bytes: &[u8], edit: impl FnOnce(&mut Map<String, Value>)) -> Vec<u8> {
    let start = data_start(bytes);
    let mut header: Map<String, Value> =
        serde_json::from_slice(&bytes[8..start]).expect("a JSON header");
    edit(&mut header);
    let mut json = Value::Object(header).to_string().into_bytes();
    while !json.len().is_multiple_of(8) {
        json.push(b' ');
    }
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&json);
    out.extend_from_slice(&bytes[start..]);
    out
}

fn metadata(header: &mut Map<String, Value>) -> &mut Map<String, Value> {
    header
        .get_mut("__metadata__")
        .and_then(Value::as_object_mut)
        .expect("metadata")
}

#[test]
fn a_checkpoint_reads_back_with_its_checksums_left_out() {
    let c = checkpoint();
    assert_eq!(
        parse(&c.to_bytes().expect("serialises")).expect("intact"),
        c
    );
    // A user's key in the checksums' place is replaced by the real checksum on write.
    let mut forged = c.clone();
    forged
        .metadata
        .insert("stackscan.sha256.embed".into(), "0".repeat(64));
    assert_eq!(
        forged.to_bytes().expect("serialises"),
        c.to_bytes().expect("serialises")
    );
}

#[test]
fn a_flipped_byte_in_a_tensor_is_refused_naming_it() {
    let c = checkpoint();
    let bytes = c.to_bytes().expect("serialises");
    // The middle of `layers.attn.wq`, the last tensor: its 24 elements follow the 24 of
    // `adam.m.layers.attn.wq` and the 8 of `embed`.
    let at = data_start(&bytes) + (24 + 8) * 4 + 12 * 4 + 1;
    let mut bad = bytes.clone();
    bad[at] ^= 0x40;
    let err = parse(&bad).expect_err("a flipped byte was accepted");
    match &err {
        Error::CheckpointChecksum {
            path,
            tensor,
            expected,
            actual,
        } => {
            assert_eq!(path, Path::new(PATH));
            assert_eq!(tensor, "layers.attn.wq");
            assert_eq!(expected.len(), 64);
            assert_ne!(expected, actual);
        }
        e => panic!("{e}"),
    }
    let message = err.to_string();
    for part in [PATH, "`layers.attn.wq`", "sha256"] {
        assert!(message.contains(part), "no `{part}` in {message}");
    }
    // Every byte of every tensor is covered, the first and the last included.
    for at in [data_start(&bytes), bytes.len() - 1] {
        let mut bad = bytes.clone();
        bad[at] ^= 0x01;
        assert!(
            matches!(parse(&bad), Err(Error::CheckpointChecksum { .. })),
            "byte {at}"
        );
    }
}

#[test]
fn a_flipped_byte_in_a_checksum_is_refused() {
    let c = checkpoint();
    let bytes = c.to_bytes().expect("serialises");
    let text = String::from_utf8(bytes[8..data_start(&bytes)].to_vec()).expect("UTF-8");
    let key = "\"stackscan.sha256.embed\":\"";
    let at = 8 + text.find(key).expect("the checksum of `embed`") + key.len() + 5;
    let mut bad = bytes.clone();
    // Another hex digit, so the header stays valid and only the digest differs.
    bad[at] = if bad[at] == b'a' { b'b' } else { b'a' };
    match parse(&bad) {
        Err(Error::CheckpointChecksum {
            tensor,
            expected,
            actual,
            ..
        }) => {
            assert_eq!(tensor, "embed");
            assert_eq!(expected.as_bytes()[5], bad[at]);
            assert_eq!(actual.as_bytes()[5], bytes[at]);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn checksums_and_tensors_must_name_each_other() {
    let bytes = checkpoint().to_bytes().expect("serialises");
    let dropped = with_header(&bytes, |h| {
        metadata(h).remove("stackscan.sha256.layers.attn.wq");
    });
    match parse(&dropped) {
        Err(e @ Error::CheckpointCorrupt { .. }) => {
            let m = e.to_string();
            assert!(m.contains("`layers.attn.wq` has no checksum"), "{m}");
        }
        other => panic!("{other:?}"),
    }
    let ghost = with_header(&bytes, |h| {
        metadata(h).insert("stackscan.sha256.ghost".into(), "0".repeat(64).into());
    });
    match parse(&ghost) {
        Err(e @ Error::CheckpointCorrupt { .. }) => {
            let m = e.to_string();
            assert!(
                m.contains("`stackscan.sha256.ghost` names no tensor"),
                "{m}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_file_without_checksums_still_loads() {
    let c = checkpoint();
    // What the writer produced before checksums: the same file, its metadata without them.
    let old = with_header(&c.to_bytes().expect("serialises"), |h| {
        metadata(h).retain(|k, _| !k.starts_with("stackscan.sha256."));
    });
    assert_eq!(parse(&old).expect("an old file"), c);
    // Without checksums nothing can be verified: a damaged old file loads as it is.
    let mut damaged = old.clone();
    let last = damaged.len() - 1;
    damaged[last] ^= 0x01;
    assert_ne!(parse(&damaged).expect("an old file"), c);
}

#[test]
fn a_bf16_or_f16_checkpoint_loads_into_f32_masters() {
    use safetensors::{Dtype, tensor::TensorView};
    let c = checkpoint();
    for (dtype, narrow) in [
        (
            Dtype::BF16,
            (|x: f32| half::bf16::from_f32(x).to_le_bytes()) as fn(f32) -> [u8; 2],
        ),
        (Dtype::F16, |x: f32| half::f16::from_f32(x).to_le_bytes()),
    ] {
        let bytes: Vec<Vec<u8>> = c
            .tensors
            .iter()
            .map(|t| t.data.iter().flat_map(|&x| narrow(x)).collect())
            .collect();
        let views: Vec<(String, TensorView<'_>)> = c
            .tensors
            .iter()
            .zip(&bytes)
            .map(|(t, b)| {
                let shape = t.shape.iter().map(|&d| d as usize).collect();
                (
                    t.name.clone(),
                    TensorView::new(dtype, shape, b).expect("a view"),
                )
            })
            .collect();
        let file = safetensors::serialize(views, Some(c.metadata.clone().into_iter().collect()))
            .expect("serialises");
        let loaded = parse(&file).expect("a narrow checkpoint loads");
        assert_eq!(loaded.metadata, c.metadata);
        for (got, want) in loaded.tensors.iter().zip(&c.tensors) {
            assert_eq!((&got.name, &got.shape), (&want.name, &want.shape));
            let widened: Vec<f32> = want
                .data
                .iter()
                .map(|&x| {
                    let b = narrow(x);
                    match dtype {
                        Dtype::BF16 => half::bf16::from_le_bytes(b).to_f32(),
                        _ => half::f16::from_le_bytes(b).to_f32(),
                    }
                })
                .collect();
            assert_eq!(got.data, widened, "{dtype:?} {}", got.name);
        }
    }
}

/// A file without checksums is never overwritten: writing over it moves it aside, bytes
/// intact, under a free name; a verified file is simply replaced.
#[test]
fn a_file_that_was_not_verified_is_moved_aside_not_overwritten() {
    let dir = std::env::temp_dir().join(format!("stackscan-unverified-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("latest.safetensors");
    let c = checkpoint();
    let old = with_header(&c.to_bytes().expect("serialises"), |h| {
        metadata(h).retain(|k, _| !k.starts_with("stackscan.sha256."));
    });
    std::fs::write(&path, &old).expect("an old file");
    c.write(&path).expect("write");
    let aside = dir.join("latest.unverified.safetensors");
    assert_eq!(std::fs::read(&aside).expect("moved aside"), old);
    assert_eq!(Checkpoint::read(&path).expect("the new file"), c);
    assert!(super::checksum::file_has_checksums(&path));
    // A second old file goes beside the first, not over it.
    std::fs::write(&path, &old).expect("another old file");
    c.write(&path).expect("write");
    assert!(dir.join("latest.unverified-2.safetensors").is_file());
    // A verified file is replaced, nothing moved.
    c.write(&path).expect("write");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "latest.safetensors",
            "latest.unverified-2.safetensors",
            "latest.unverified.safetensors"
        ]
    );
    std::fs::remove_dir_all(&dir).expect("clean up");
}

/// The reader gives each tensor as the whole-file read does, reading only that tensor: a
/// flipped byte in one tensor's data is refused when that tensor is read (naming it) while
/// the others still read; a missing name, another shape and a cut file are refused by name.
#[test]
fn a_reader_gives_each_tensor_alone_and_checks_it() {
    use super::CheckpointReader;
    let dir = std::env::temp_dir().join(format!("stackscan-reader-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("latest.safetensors");
    let c = checkpoint();
    let mut bytes = c.to_bytes().expect("serialises");
    std::fs::write(&path, &bytes).expect("write");
    let mut r = CheckpointReader::open(&path).expect("opens");
    assert_eq!(r.metadata(), &c.metadata);
    for t in &c.tensors {
        assert_eq!(
            r.tensor(&t.name, &t.shape).expect("reads"),
            t.data,
            "{}",
            t.name
        );
    }
    assert!(matches!(
        r.tensor("nope", &[1]),
        Err(Error::CheckpointMissing { ref tensor, .. }) if tensor == "nope"
    ));
    assert!(matches!(
        r.tensor("embed", &[2, 4]),
        Err(Error::CheckpointShape { ref tensor, .. }) if tensor == "embed"
    ));
    // `embed` is the second tensor in the file: flip its first byte.
    let start = data_start(&bytes) + 2 * 3 * 4 * 4;
    bytes[start] ^= 0x01;
    std::fs::write(&path, &bytes).expect("write");
    let mut r = CheckpointReader::open(&path).expect("the header is intact");
    assert!(r.tensor("layers.attn.wq", &[2, 3, 4]).is_ok());
    assert!(matches!(
        r.tensor("embed", &[4, 2]),
        Err(Error::CheckpointChecksum { ref tensor, .. }) if tensor == "embed"
    ));
    // Cut short: refused as a whole read refuses it.
    std::fs::write(&path, &bytes[..bytes.len() - 3]).expect("write");
    let e = CheckpointReader::open(&path).expect_err("cut");
    assert!(matches!(e, Error::CheckpointTruncated { .. }), "{e}");
    std::fs::remove_dir_all(&dir).expect("clean up");
}
