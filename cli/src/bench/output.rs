//! Writing the report: JSON through serde, atomically, so a failed run never leaves half a
//! file where a previous report was.

use std::io::Write as _;
use std::path::Path;

use serde::Serialize;

use super::BenchError;

/// Checks that `dest` names a file in an existing directory, so a long run does not end in
/// an unwritable path.
pub fn check_destination(dest: &Path) -> Result<(), BenchError> {
    let bad = |why: &str| BenchError::Config(format!("cannot write `{}`: {why}", dest.display()));
    if dest.file_name().is_none() {
        return Err(bad("it names no file"));
    }
    let dir = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(bad("its directory does not exist"));
    }
    Ok(())
}

/// Writes `value` as pretty JSON to `dest`: into a temporary file beside it, synced, then
/// renamed over it.
pub fn write_json(dest: &Path, value: &impl Serialize) -> Result<(), BenchError> {
    let json = serde_json::to_string_pretty(value)
        .map_err(|e| BenchError::Io(std::io::Error::other(e)))?;
    let name = dest
        .file_name()
        .ok_or_else(|| BenchError::Config(format!("`{}` names no file", dest.display())))?;
    let mut temp_name = std::ffi::OsString::from(".");
    temp_name.push(name);
    temp_name.push(format!(".{}.tmp", std::process::id()));
    let temp = dest.with_file_name(temp_name);
    let written = std::fs::File::create(&temp)
        .and_then(|mut f| {
            f.write_all(json.as_bytes())?;
            f.write_all(b"\n")?;
            f.sync_all()
        })
        .and_then(|()| std::fs::rename(&temp, dest));
    if written.is_err() {
        // Nothing of a failed write stays behind; the error that matters is the write's.
        let _ = std::fs::remove_file(&temp);
    }
    written.map_err(|e| {
        BenchError::Io(std::io::Error::new(
            e.kind(),
            format!("writing `{}`: {e}", dest.display()),
        ))
    })
}
