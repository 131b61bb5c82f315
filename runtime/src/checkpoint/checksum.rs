//! Per-tensor checksums: the SHA-256 of each tensor's raw little-endian bytes, recorded in the
//! file's `__metadata__` as `stackscan.sha256.{tensor}` = lower-case hex (safetensors metadata
//! holds strings only).
//!
//! The header checks (dtype, shape, byte ranges) cannot see a flipped bit in the data: a weight
//! of -0.0094 read back as 154.6 is a valid `F32`. SHA-256 rather than a CRC because `sha2` is
//! already a dependency (plugin and compile-cache hashes) and hashing costs little next to
//! reading the file; one digest per tensor, rather than one for the file, so a mismatch names
//! the tensor at fault.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// The metadata keys of checksums: the prefix, then the tensor's name.
pub(super) const PREFIX: &str = "stackscan.sha256.";

/// The metadata key of tensor `name`'s checksum.
pub(super) fn key(name: &str) -> String {
    format!("{PREFIX}{name}")
}

/// The tensor a metadata key is the checksum of, or `None` for other metadata.
pub(super) fn tensor_of(key: &str) -> Option<&str> {
    key.strip_prefix(PREFIX)
}

/// Lower-case hex SHA-256 of `bytes`, a tensor's data as the file holds it.
fn of_bytes(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// [`of_bytes`] of `data`'s little-endian bytes, hashed a chunk at a time so the tensor is
/// not copied whole.
pub(super) fn of_f32(data: &[f32]) -> String {
    let mut h = Sha256::new();
    let mut chunk = Vec::with_capacity(4096);
    for part in data.chunks(1024) {
        chunk.clear();
        chunk.extend(part.iter().flat_map(|x| x.to_le_bytes()));
        h.update(&chunk);
    }
    hex(&h.finalize())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The checksums of a file, by tensor, split off its metadata.
pub(super) type Checksums = BTreeMap<String, String>;

/// Whether the safetensors file at `path` records a checksum for its tensors, read from its
/// header alone; a file that cannot be read or parsed has none.
pub(super) fn file_has_checksums(path: &Path) -> bool {
    use std::io::Read;
    let header = || -> Option<serde_json::Value> {
        let mut f = std::fs::File::open(path).ok()?;
        let mut len = [0u8; 8];
        f.read_exact(&mut len).ok()?;
        let len = usize::try_from(u64::from_le_bytes(len)).ok()?;
        // A header is small; a length past any real one is a file of something else.
        if len > 100 << 20 {
            return None;
        }
        let mut text = vec![0u8; len];
        f.read_exact(&mut text).ok()?;
        serde_json::from_slice(&text).ok()
    };
    header()
        .and_then(|h| h.get("__metadata__").and_then(|m| m.as_object()).cloned())
        .is_some_and(|m| m.keys().any(|k| tensor_of(k).is_some()))
}

/// Checks that `sums` and `tensors` (the file's tensor names) name each other, before any data
/// is hashed: a header damaged in a tensor's name would otherwise leave its data unchecked. A
/// file without checksums predates them: it loads, with a warning.
pub(super) fn match_tensors<'a>(
    sums: &Checksums,
    tensors: impl IntoIterator<Item = &'a str>,
    path: &Path,
) -> Result<()> {
    let corrupt = |reason: String| Error::CheckpointCorrupt {
        path: path.to_owned(),
        reason,
    };
    let tensors: BTreeSet<&str> = tensors.into_iter().collect();
    if sums.is_empty() {
        if !tensors.is_empty() {
            tracing::warn!(
                "checkpoint `{}` has no checksums (it predates them): its tensors' data cannot be verified",
                path.display()
            );
        }
        return Ok(());
    }
    if let Some(name) = tensors.iter().find(|t| !sums.contains_key(**t)) {
        return Err(corrupt(format!(
            "tensor `{name}` has no checksum, though others do"
        )));
    }
    if let Some(name) = sums.keys().find(|s| !tensors.contains(s.as_str())) {
        return Err(corrupt(format!(
            "checksum `{}` names no tensor of the file",
            key(name)
        )));
    }
    Ok(())
}

/// Checks tensor `name`'s data, `raw` as the file holds it, against its checksum in `sums`
/// (none when the file predates checksums).
pub(super) fn verify(sums: &Checksums, name: &str, raw: &[u8], path: &Path) -> Result<()> {
    let Some(expected) = sums.get(name) else {
        return Ok(());
    };
    let actual = of_bytes(raw);
    if actual == *expected {
        return Ok(());
    }
    Err(Error::CheckpointChecksum {
        path: path.to_owned(),
        tensor: name.to_owned(),
        expected: expected.clone(),
        actual,
    })
}
