//! Atomic file replacement: the bytes go to a temporary file in the target's directory, which
//! is flushed to disk, renamed over the target, and the directory flushed so the rename itself
//! survives a power cut. A crash at any point leaves either the old file or the new one.

use std::fs::{self, File};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

/// Writes started by this process, numbering their temporaries.
static WRITES: AtomicU64 = AtomicU64::new(0);

/// Replaces `path` with `bytes` atomically.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic_with(path, |f| f.write_all(bytes))
}

/// Replaces `path` atomically with what `write` writes to the temporary file: for a file
/// made a piece at a time (a token file of a large text), never whole in memory.
pub fn write_atomic_with(
    path: &Path,
    write: impl FnOnce(&mut File) -> std::io::Result<()>,
) -> Result<()> {
    let io = |what: &str, p: &Path| {
        let context = format!("{what} `{}`", p.display());
        move |source| Error::Io { context, source }
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| Error::Io {
            context: format!("writing `{}`", path.display()),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file path"),
        })?
        .to_string_lossy();
    // Same directory, so the rename never crosses a file system; the pid and a per-process
    // count keep two writers (processes, or threads of one) from sharing a temporary.
    let n = WRITES.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.tmp-{}-{n}", std::process::id()));
    let result = (|| {
        let mut f = File::create(&tmp).map_err(io("creating", &tmp))?;
        write(&mut f).map_err(io("writing", &tmp))?;
        f.sync_all().map_err(io("syncing", &tmp))?;
        fs::rename(&tmp, path).map_err(io("renaming over", path))?;
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io("syncing directory", dir))
    })();
    if result.is_err() {
        // Best effort: the temporary is garbage whatever happened.
        let _ = fs::remove_file(&tmp);
    }
    result
}
