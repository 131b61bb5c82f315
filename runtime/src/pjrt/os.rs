//! The operating-system calls outside PJRT that need `unsafe`: mapping a file read-only,
//! setting an environment variable, and relaying stderr through a child process. They live
//! here so that all of the crate's `unsafe` stays in one module, each block with its argument.

use std::ffi::c_int;
use std::fs::File;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

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

// The POSIX calls the relay needs (glibc and musl export them under these names; `pid_t` is
// `int` on Linux).
unsafe extern "C" {
    fn pipe(fds: *mut c_int) -> c_int;
    fn fork() -> c_int;
    fn dup(fd: c_int) -> c_int;
    fn dup2(from: c_int, to: c_int) -> c_int;
    fn close(fd: c_int) -> c_int;
    fn waitpid(pid: c_int, status: *mut c_int, options: c_int) -> c_int;
    fn atexit(at_exit: extern "C" fn()) -> c_int;
    fn signal(signal: c_int, handler: usize) -> usize;
    fn _exit(status: c_int) -> !;
}

const STDERR: c_int = 2;
const SIGINT: c_int = 2;
const SIGQUIT: c_int = 3;
const SIG_IGN: usize = 1;
const WNOHANG: c_int = 1;

/// The relay's process id, for the wait at exit; 0 while there is none.
static RELAY: AtomicI32 = AtomicI32::new(0);

/// How long the exit of this process waits for the relay to show the last lines: long enough
/// for a pipe's worth of bytes, short enough that a grandchild still holding stderr open
/// cannot hold up the exit.
const RELAY_DRAIN: Duration = Duration::from_secs(2);

/// Routes this process's stderr (fd 2) through `relay`, run in a child process forked here:
/// `relay` gets the read end of a pipe whose write end becomes fd 2, and the original stderr
/// to write to. A child process, not a thread, so that the last lines before an abort (a
/// plugin's fatal error) still reach the terminal: the pipe outlives this process and the
/// relay drains it to the end. At exit this process closes its stderr and waits briefly for
/// the relay, so that its last lines come before the shell's prompt.
///
/// Refused with [`Error::EnvironmentAfterThreads`] unless this process has one thread: the
/// child of a fork has only the forking thread, which is sound only when there were no others.
pub fn relay_stderr_single_threaded(relay: fn(File, File)) -> Result<()> {
    if thread_count() != Some(1) {
        return Err(Error::EnvironmentAfterThreads {
            variable: "stderr (its relay process)".to_owned(),
        });
    }
    let mut fds = [0 as c_int; 2];
    // SAFETY: `fds` is an array of two `int`s, which `pipe` fills with two new descriptors.
    if unsafe { pipe(fds.as_mut_ptr()) } != 0 {
        return Err(Error::io(
            "creating the stderr relay's pipe",
            std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: `pipe` succeeded, so both are open descriptors that nothing else owns.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: fd 2 is this process's stderr; `dup` returns a new descriptor or -1.
    let original = unsafe { dup(STDERR) };
    if original < 0 {
        return Err(Error::io(
            "keeping the original stderr",
            std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: `dup` succeeded, so `original` is an open descriptor that nothing else owns.
    let original = unsafe { OwnedFd::from_raw_fd(original) };
    // SAFETY: this process has one thread (checked above), so the child starts in a consistent
    // state (no lock held by a thread that does not exist in it) and may run ordinary code.
    let pid = unsafe { fork() };
    if pid < 0 {
        return Err(Error::io(
            "starting the stderr relay",
            std::io::Error::last_os_error(),
        ));
    }
    if pid == 0 {
        drop(write);
        // SAFETY: the relay reads nothing from stdin and writes nothing to stdout; closing its
        // copies keeps a reader of this process's stdout from waiting on the relay.
        unsafe {
            close(0);
            close(1);
        }
        // SAFETY: setting a signal's disposition to "ignore" has no handler to be unsound in.
        // The terminal sends Ctrl-C and Ctrl-\ to the whole process group; the relay outlives
        // its parent by design and ends when the pipe does.
        unsafe {
            signal(SIGINT, SIG_IGN);
            signal(SIGQUIT, SIG_IGN);
        }
        relay(File::from(read), File::from(original));
        // SAFETY: `_exit` ends the child without running the parent's exit handlers or
        // flushing buffers it inherited from the parent, which the parent flushes itself.
        unsafe { _exit(0) }
    }
    drop(read);
    drop(original);
    // SAFETY: both are open descriptors; `dup2` makes fd 2 a second reference to the pipe's
    // write end (the write end itself is closed when `write` drops).
    if unsafe { dup2(std::os::fd::AsRawFd::as_raw_fd(&write), STDERR) } < 0 {
        return Err(Error::io(
            "routing stderr to its relay",
            std::io::Error::last_os_error(),
        ));
    }
    RELAY.store(pid, Ordering::SeqCst);
    // SAFETY: `wait_for_relay` is an `extern "C" fn()` that does not unwind.
    unsafe { atexit(wait_for_relay) };
    Ok(())
}

/// Run at exit: closes this process's stderr, so that the relay sees the end of its pipe once
/// no child holds it either, and waits up to [`RELAY_DRAIN`] for the relay to finish.
extern "C" fn wait_for_relay() {
    let pid = RELAY.swap(0, Ordering::SeqCst);
    if pid == 0 {
        return;
    }
    // SAFETY: closing fd 2 at exit; nothing in this process writes to stderr afterwards (a
    // late write from another thread fails with EBADF, which is harmless).
    unsafe { close(STDERR) };
    let start = Instant::now();
    while start.elapsed() < RELAY_DRAIN {
        let mut status = 0;
        // SAFETY: `pid` is this process's child; `status` is a valid `int` to write to.
        if unsafe { waitpid(pid, &mut status, WNOHANG) } != 0 {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
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
