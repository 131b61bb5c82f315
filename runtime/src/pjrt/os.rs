//! The two operating-system calls outside PJRT that need `unsafe`: mapping a file read-only
//! and setting an environment variable. They live here so that all of the crate's `unsafe`
//! stays in one module, each block with its argument.

use std::fs::File;
use std::path::Path;

use crate::error::{Error, Result};

/// A file mapped read-only into memory, its bytes shared with the page cache rather than
/// copied (a token file of many gigabytes costs no allocation).
#[derive(Debug)]
pub struct MappedFile {
    /// `None` for an empty file, which cannot be mapped.
    map: Option<memmap2::Mmap>,
}

impl MappedFile {
    /// Maps the file at `path`.
    pub fn open(path: &Path) -> Result<MappedFile> {
        let file =
            File::open(path).map_err(|e| Error::io(format!("opening `{}`", path.display()), e))?;
        let len = file
            .metadata()
            .map_err(|e| Error::io(format!("reading the size of `{}`", path.display()), e))?
            .len();
        if len == 0 {
            return Ok(MappedFile { map: None });
        }
        // SAFETY:
        // - the file is opened read-only and mapped read-only, so nothing in this process
        //   writes through the mapping;
        // - the bytes are only ever read as `u8`, for which every bit pattern is valid, so a
        //   file that another process rewrites while it is mapped yields other numbers, not
        //   invalid values (truncating it under a running job is the one thing no mapping can
        //   guard against: the kernel then raises SIGBUS, as for any reader of a mapped file).
        let map = unsafe { memmap2::Mmap::map(&file) }
            .map_err(|e| Error::io(format!("mapping `{}`", path.display()), e))?;
        Ok(MappedFile { map: Some(map) })
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }
}

/// The number of threads of this process, from `/proc/self/task` (Linux).
fn thread_count() -> Option<usize> {
    std::fs::read_dir("/proc/self/task")
        .ok()
        .map(|entries| entries.count())
}

/// Sets the environment variable `key` to `value`, which is sound only while no other thread
/// can read or write the environment (C's `getenv` in a plugin's thread takes no lock).
/// Refused with [`Error::EnvironmentAfterThreads`] unless this process has exactly one
/// thread, which is why binaries call it first thing in `main`.
pub fn set_env_single_threaded(key: &str, value: &str) -> Result<()> {
    if thread_count() != Some(1) {
        return Err(Error::EnvironmentAfterThreads {
            variable: key.to_owned(),
        });
    }
    // SAFETY: this process has one thread, the caller's (counted just above), and only that
    // thread could start another, so nothing reads or writes the environment concurrently.
    unsafe { std::env::set_var(key, value) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_a_file_and_an_empty_one() {
        let dir = std::env::temp_dir().join(format!("stackscan-map-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let full = dir.join("full.bin");
        std::fs::write(&full, [1u8, 2, 3]).expect("write");
        assert_eq!(MappedFile::open(&full).expect("map").bytes(), &[1, 2, 3]);
        let empty = dir.join("empty.bin");
        std::fs::write(&empty, []).expect("write");
        assert!(MappedFile::open(&empty).expect("map").bytes().is_empty());
        assert!(matches!(
            MappedFile::open(&dir.join("missing.bin")),
            Err(Error::Io { .. })
        ));
        std::fs::remove_dir_all(dir).expect("clean up");
    }

    #[test]
    fn refuses_to_set_the_environment_beside_other_threads() {
        // The test harness runs this on a thread of its own, so there are at least two.
        let e = set_env_single_threaded("STACKSCAN_NOT_SET", "1").expect_err("refused");
        assert!(
            matches!(&e, Error::EnvironmentAfterThreads { variable } if variable == "STACKSCAN_NOT_SET"),
            "{e}"
        );
        assert!(std::env::var_os("STACKSCAN_NOT_SET").is_none());
    }
}
