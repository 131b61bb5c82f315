//! Checkpoints: training 10 steps, saving, restoring into a fresh trainer and training 10
//! more is bit-identical to training 20; a truncated, corrupt, wrong-shape, wrong-dtype,
//! incomplete or bit-flipped file is refused with the error naming the tensor, the trainer left
//! as it was and the file untouched; an interrupted save leaves the previous checkpoint
//! loadable.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan_runtime::testing as common;

use std::path::{Path, PathBuf};

use stackscan::fsdp::StackModel;
use stackscan::plan::PlanOptions;
use stackscan::{LayerStack, Tensor};
use stackscan_models::toy::{self, Toy, ToyConfig, ToyModel};
use stackscan_runtime::checkpoint::Checkpoint;
use stackscan_runtime::testing::train::ADAM;
use stackscan_runtime::train::{HostInput, Progress, Trainer, weight_names};
use stackscan_runtime::{Client, Error, Mesh};

/// The target's directory for tests, where
/// [`cached_cpu_client`](stackscan_runtime::testing::cached_cpu_client) keeps its cache.
const TARGET_TMP: &str = env!("CARGO_TARGET_TMPDIR");

/// Device `d`'s `x` and `y` for step `step`.
fn batch(devices: usize, step: usize) -> Vec<Vec<HostInput>> {
    common::train::batch(devices, 2, 16, step)
}

fn trainer(client: &Client, mesh: &Mesh, m: &StackModel, seed: u64) -> Trainer {
    Trainer::new(
        client,
        mesh,
        m,
        PlanOptions::prefetch_deferred(),
        ADAM,
        seed,
    )
    .unwrap()
}

/// Loss bits of steps `from..to`.
fn train(t: &mut Trainer, from: usize, to: usize) -> Vec<u32> {
    (from..to)
        .map(|s| t.step(&batch(2, s)).unwrap().loss.to_bits())
        .collect()
}

/// A fresh directory for one test.
fn dir(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("stackscan-ckpt-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Every tensor's bits, for bitwise comparison of two states.
fn bits(c: &Checkpoint) -> Vec<(String, Vec<i64>, Vec<u32>)> {
    c.tensors
        .iter()
        .map(|t| {
            let b = t.data.iter().map(|x| x.to_bits()).collect();
            (t.name.clone(), t.shape.clone(), b)
        })
        .collect()
}

const PROGRESS: Progress = Progress {
    data_position: 10,
    rng_state: 0x0123_4567_89ab_cdef,
};

#[test]
fn train_save_resume_is_bit_identical_to_training_through() {
    let client = common::cached_cpu_client(2, TARGET_TMP);
    let mesh = Mesh::new(&client, "fsdp", 2).unwrap();
    let m = toy::hand_built(&ToyConfig::small(), 1).unwrap();
    let d = dir("resume");
    let path = d.join("step10.safetensors");

    // The run straight through trains the declared toy model (its attribute's options are
    // the hand-built runs' `prefetch_deferred`): resuming the hand-built one must match it.
    assert_eq!(Toy::OPTIONS, PlanOptions::prefetch_deferred());
    let mut through =
        Trainer::declared::<ToyModel<Tensor, Toy>>(&client, &mesh, &ToyConfig::small(), ADAM, 7)
            .unwrap();
    let losses20 = train(&mut through, 0, 20);

    let mut first = trainer(&client, &mesh, &m, 7);
    let losses10 = train(&mut first, 0, 10);
    first.save(&path, PROGRESS).unwrap();
    // Another seed: only the checkpoint can make it match.
    let mut resumed = trainer(&client, &mesh, &m, 12345);
    assert_eq!(resumed.load(&path).unwrap(), PROGRESS);
    assert_eq!(resumed.steps(), 10);
    let rest = train(&mut resumed, 10, 20);

    assert_eq!(losses10, losses20[..10]);
    assert_eq!(rest, losses20[10..], "losses after resuming differ");
    let a = bits(&through.checkpoint(PROGRESS).unwrap());
    let b = bits(&resumed.checkpoint(PROGRESS).unwrap());
    assert_eq!(a.len(), 3 * through.num_weights());
    assert_eq!(a, b, "weights or moments differ after 20 steps");

    // Names come from the model, moments beside their weights.
    let names = weight_names(&m);
    let file = Checkpoint::read(&path).unwrap();
    for n in &names {
        for prefix in ["", "adam.m.", "adam.v."] {
            assert!(
                file.tensors
                    .iter()
                    .any(|t| t.name == format!("{prefix}{n}")),
                "{prefix}{n}"
            );
        }
    }
    assert!(
        names.iter().any(|n| n.starts_with("layers.A.")),
        "{names:?}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

/// A trained-10 trainer and its checkpoint at `dir/good.safetensors`.
struct Fixture {
    client: Client,
    mesh: Mesh,
    model: StackModel,
    good: Checkpoint,
    dir: PathBuf,
}

fn fixture(test: &str) -> Fixture {
    let client = common::cached_cpu_client(2, TARGET_TMP);
    let mesh = Mesh::new(&client, "fsdp", 2).unwrap();
    let model = toy::hand_built(&ToyConfig::small(), 1).unwrap();
    let mut t = trainer(&client, &mesh, &model, 7);
    train(&mut t, 0, 10);
    let good = t.checkpoint(PROGRESS).unwrap();
    Fixture {
        client,
        mesh,
        model,
        good,
        dir: dir(test),
    }
}

impl Fixture {
    /// Writes `bytes` to `name`, loads it into a fresh trainer and returns the error; checks
    /// the trainer is unchanged (its next step matches an untouched one) and the file too.
    fn refused(&self, name: &str, bytes: &[u8]) -> Error {
        let path = self.dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        let mut hit = trainer(&self.client, &self.mesh, &self.model, 7);
        let before = bits(&hit.checkpoint(Progress::default()).unwrap());
        let err = hit.load(&path).unwrap_err();
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "the file was changed");
        assert_eq!(hit.steps(), 0);
        assert_eq!(bits(&hit.checkpoint(Progress::default()).unwrap()), before);
        let mut fresh = trainer(&self.client, &self.mesh, &self.model, 7);
        assert_eq!(train(&mut hit, 0, 2), train(&mut fresh, 0, 2));
        err
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn a_truncated_checkpoint_names_the_cut_tensor() {
    let f = fixture("truncated");
    let bytes = f.good.to_bytes().unwrap();
    let last = file_last(&f.good);
    match f.refused("cut.safetensors", &bytes[..bytes.len() - 4]) {
        Error::CheckpointTruncated {
            tensor: Some(t),
            needed,
            actual,
            ..
        } => {
            assert_eq!(t, last);
            assert_eq!((needed, actual), (bytes.len(), bytes.len() - 4));
        }
        e => panic!("{e}"),
    }
    match f.refused("header.safetensors", &bytes[..20]) {
        Error::CheckpointTruncated { tensor: None, .. } => {}
        e => panic!("{e}"),
    }
    match f.refused("empty.safetensors", &[]) {
        Error::CheckpointTruncated { tensor: None, .. } => {}
        e => panic!("{e}"),
    }
}

#[test]
fn a_corrupt_header_is_refused() {
    let f = fixture("corrupt");
    let mut bytes = f.good.to_bytes().unwrap();
    bytes[8] = b'#';
    let err = f.refused("corrupt.safetensors", &bytes);
    assert!(matches!(err, Error::CheckpointCorrupt { .. }), "{err}");
    assert!(err.to_string().contains("not JSON"), "{err}");
    // A header length far past the end.
    let mut bytes = f.good.to_bytes().unwrap();
    bytes[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    let err = f.refused("length.safetensors", &bytes);
    assert!(
        matches!(
            err,
            Error::CheckpointCorrupt { .. } | Error::CheckpointTruncated { .. }
        ),
        "{err}"
    );
    // Metadata without the step.
    let mut c = f.good.clone();
    c.metadata.remove("step");
    let err = f.refused("nostep.safetensors", &c.to_bytes().unwrap());
    assert!(err.to_string().contains("`step`"), "{err}");
}

#[test]
fn a_wrong_shape_names_the_tensor() {
    let f = fixture("shape");
    let mut c = f.good.clone();
    let t = &mut c.tensors[1];
    let name = t.name.clone();
    let expected = t.shape.clone();
    t.shape.push(1);
    match f.refused("shape.safetensors", &c.to_bytes().unwrap()) {
        Error::CheckpointShape {
            tensor,
            expected: e,
            actual,
        } => {
            assert_eq!(tensor, name);
            assert_eq!(e, expected);
            assert_eq!(actual[..actual.len() - 1], expected[..]);
        }
        e => panic!("{e}"),
    }
}

#[test]
fn a_wrong_dtype_names_the_tensor() {
    let f = fixture("dtype");
    let bytes = f.good.to_bytes().unwrap();
    // The first tensor's dtype in the header, spelled with the same number of bytes.
    let text = String::from_utf8_lossy(&bytes[8..]).into_owned();
    let first = f.good.tensors[0].name.clone();
    let entry = text
        .find(&format!("\"{first}\":{{"))
        .unwrap_or_else(|| panic!("no entry for {first}"));
    let dtype = 8 + entry + text[entry..].find("\"F32\"").unwrap();
    let mut bad = bytes.clone();
    bad[dtype + 1..dtype + 4].copy_from_slice(b"I32");
    match f.refused("dtype.safetensors", &bad) {
        Error::CheckpointDType {
            tensor,
            expected,
            actual,
        } => {
            assert_eq!(tensor, first);
            assert_eq!(
                (expected.as_str(), actual.as_str()),
                ("F32, BF16 or F16", "I32")
            );
        }
        e => panic!("{e}"),
    }
}

#[test]
fn a_missing_tensor_is_named() {
    let f = fixture("missing");
    let mut c = f.good.clone();
    let gone = c.tensors.remove(c.tensors.len() / 2).name;
    match f.refused("missing.safetensors", &c.to_bytes().unwrap()) {
        Error::CheckpointMissing { tensor, .. } => assert_eq!(tensor, gone),
        e => panic!("{e}"),
    }
}

#[test]
fn a_flipped_bit_in_a_tensor_is_refused_naming_it() {
    let f = fixture("flipped");
    let mut bytes = f.good.to_bytes().unwrap();
    // The last element of the last tensor: the header checks cannot see it, its checksum can.
    let last = file_last(&f.good);
    let at = bytes.len() - 2;
    bytes[at] ^= 0x10;
    match f.refused("flipped.safetensors", &bytes) {
        Error::CheckpointChecksum { tensor, path, .. } => {
            assert_eq!(tensor, last);
            assert!(path.ends_with("flipped.safetensors"), "{}", path.display());
        }
        e => panic!("{e}"),
    }
}

/// A save interrupted after its temporary was written (the process killed before the rename)
/// leaves the previous checkpoint as it was; the next save replaces it whole and leaves no
/// temporary behind.
#[test]
fn an_interrupted_save_leaves_the_previous_checkpoint() {
    let f = fixture("atomic");
    let path = f.dir.join("latest.safetensors");
    f.good.write(&path).unwrap();
    let good = std::fs::read(&path).unwrap();
    // What a writer killed mid-write leaves: a partial temporary beside the checkpoint.
    let partial = f.dir.join(".latest.safetensors.tmp-999999");
    std::fs::write(&partial, &good[..good.len() / 3]).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), good);
    let mut t = trainer(&f.client, &f.mesh, &f.model, 1);
    assert_eq!(t.load(&path).unwrap(), PROGRESS);
    // A later save replaces the file and removes its own temporary.
    train(&mut t, 10, 11);
    t.save(&path, PROGRESS).unwrap();
    assert_ne!(std::fs::read(&path).unwrap(), good);
    let left: Vec<_> = std::fs::read_dir(&f.dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(&format!("tmp-{}", std::process::id())))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // A save into a directory that does not exist fails and writes nothing.
    let err = t
        .save(Path::new("/nonexistent-dir/x.safetensors"), PROGRESS)
        .unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err}");
}

/// The tensor a checkpoint file holds last: files hold tensors in name order.
fn file_last(c: &stackscan_runtime::checkpoint::Checkpoint) -> String {
    c.tensors.iter().map(|t| t.name.clone()).max().unwrap()
}
