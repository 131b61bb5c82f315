//! A persistent compile cache: executables the plugin serialized, kept on disk between runs so
//! a second start of the same job loads its programs instead of compiling them (seconds here,
//! minutes on TPU for a real model).
//!
//! An entry is keyed by a SHA-256 over everything that decides what XLA builds: the program
//! text, the compile options (serialized, so device assignment and partitioning are in it),
//! and the plugin's identity (platform and its version, PJRT API version, the plugin file's
//! path, size and modification time, the client's devices). A serialized executable is only
//! valid for the plugin build that wrote it, so a new plugin file gives new keys and the old
//! entries are simply never read again.
//!
//! Nothing read from disk is trusted: an entry begins with a magic, its key, the payload's
//! length and the payload's SHA-256, and an entry that is truncated, corrupt, written under
//! another key, or that the plugin refuses to load is compiled again and replaced. Entries are
//! written with [`write_atomic`](crate::checkpoint::write_atomic) (temporary file, rename), so
//! concurrent writers of one entry, threads or processes, each leave a whole entry and readers
//! never see half of one. A cache that cannot be read or written never fails a compile: the
//! executable says what happened ([`Executable::cache_outcome`]).

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::compile_options::CompileOptions;
use crate::error::Result;
use crate::pjrt::{CacheOutcome, Client, Executable};
use crate::signature::Signature;

/// Environment variable for the cache: `0`, `off`, `false` or `no` turn it off; a path puts it
/// there; unset, empty, `1` or `on` mean the default directory
/// (`<stackscan cache>/executables`, see [`plugin::cache_dir`](crate::plugin::cache_dir)).
pub const COMPILE_CACHE_ENV: &str = "STACKSCAN_COMPILE_CACHE";

/// The first bytes of every entry, with the format's version.
const MAGIC: &[u8; 8] = b"STKSXC1\n";
/// Magic, key, payload length, payload checksum.
const HEADER: usize = 8 + 32 + 8 + 32;

/// A directory of serialized executables (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompileCache {
    dir: PathBuf,
}

impl Client {
    /// This client (and the clones made from it) with `cache` for compiles, or none.
    ///
    /// With a cache, [`compile`](Self::compile) and [`compile_program`](Self::compile_program)
    /// first look for the program's executable there, keyed by the program text, this
    /// plugin's identity and the compile options, and store what they compile.
    pub fn with_compile_cache(mut self, cache: Option<CompileCache>) -> Client {
        self.cache_dir = cache.map(|c| c.dir);
        self
    }

    /// The compile cache, if one was given.
    pub fn compile_cache(&self) -> Option<CompileCache> {
        self.cache_dir.clone().map(CompileCache::new)
    }
}

impl CompileCache {
    /// A cache in `dir` (created on the first store).
    pub fn new(dir: impl Into<PathBuf>) -> CompileCache {
        CompileCache { dir: dir.into() }
    }

    /// The cache [`COMPILE_CACHE_ENV`] asks for: `None` when it turns the cache off, else
    /// the directory it names or the default one.
    pub fn from_env() -> Option<CompileCache> {
        let value = std::env::var_os(COMPILE_CACHE_ENV).unwrap_or_default();
        CompileCache::from_setting(&value, || crate::plugin::cache_dir().join("executables"))
    }

    /// The cache a value of [`COMPILE_CACHE_ENV`] asks for, `default` giving the default
    /// directory.
    fn from_setting(
        value: &std::ffi::OsStr,
        default: impl FnOnce() -> PathBuf,
    ) -> Option<CompileCache> {
        match value.to_string_lossy().to_ascii_lowercase().as_str() {
            "0" | "off" | "false" | "no" => None,
            "" | "1" | "on" | "true" | "yes" => Some(CompileCache::new(default())),
            _ => Some(CompileCache::new(PathBuf::from(value))),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of the entry for `key`.
    pub fn entry_path(&self, key: &[u8; 32]) -> PathBuf {
        self.dir.join(format!("{}.xla", hex(key)))
    }

    /// Reads the entry for `key`: `Ok(None)` when there is none, `Err(reason)` when there is
    /// one that cannot be trusted.
    fn read(&self, key: &[u8; 32]) -> Result<Option<Vec<u8>>, String> {
        let path = self.entry_path(key);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("reading `{}`: {e}", path.display())),
        };
        decode(&bytes, key).map(Some)
    }

    /// Writes the entry for `key` atomically.
    fn write(&self, key: &[u8; 32], payload: &[u8]) -> Result<()> {
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| crate::Error::io(format!("creating `{}`", self.dir.display()), e))?;
        crate::checkpoint::write_atomic(&self.entry_path(key), &encode(key, payload))
    }
}

/// Environment variables a plugin reads its compiler flags from (XLA's and libtpu's): their
/// values change the executable as much as the options do, so they are part of the key.
pub const COMPILER_ENV: [&str; 2] = ["XLA_FLAGS", "LIBTPU_INIT_ARGS"];

/// [`COMPILER_ENV`]'s values in this process, one `NAME=value` line each (empty when unset).
pub fn compiler_environment() -> String {
    COMPILER_ENV
        .iter()
        .map(|name| {
            let value = std::env::var_os(name).unwrap_or_default();
            format!("{name}={}\n", value.to_string_lossy())
        })
        .collect()
}

/// The cache key of compiling `program` with `options` on `client` in this process's
/// compiler environment ([`compiler_environment`]), with the options the plugin's workarounds
/// add (see `workarounds`) and the client's own XLA options, since those change the
/// executable.
pub fn key(client: &Client, program: &str, options: &CompileOptions) -> [u8; 32] {
    key_in(client, program, options, &compiler_environment())
}

/// [`key`] under the compiler environment `environment` (as [`compiler_environment`] writes
/// it) rather than this process's.
pub fn key_in(
    client: &Client,
    program: &str,
    options: &CompileOptions,
    environment: &str,
) -> [u8; 32] {
    adjusted_key(
        client,
        program,
        &adjusted_options(client, options),
        environment,
    )
}

/// `options` as `client` compiles them: the client's own XLA options
/// ([`Client::with_xla_options`]) for the fields the compile leaves unset, then the
/// workarounds its plugin needs (see `workarounds`), which win over both.
fn adjusted_options(client: &Client, options: &CompileOptions) -> CompileOptions {
    let mut adjusted = options.clone();
    for (name, value) in client.xla_options() {
        if !options.overrides().any(|(set, _)| set == name) {
            adjusted = adjusted.with_override(name, value.clone());
        }
    }
    crate::workarounds::compile_options(client, &adjusted)
}

/// [`key_in`] of options already adjusted for the client (what [`compile`] holds).
fn adjusted_key(
    client: &Client,
    program: &str,
    options: &CompileOptions,
    environment: &str,
) -> [u8; 32] {
    let mut h = Sha256::new();
    let mut field = |bytes: &[u8]| {
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    field(MAGIC);
    field(client.identity().as_bytes());
    field(&options.encode());
    field(environment.as_bytes());
    field(program.as_bytes());
    h.finalize().into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn encode(key: &[u8; 32], payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + payload.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(key);
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&Sha256::digest(payload));
    out.extend_from_slice(payload);
    out
}

/// The payload of an entry, or why the entry cannot be trusted.
fn decode(bytes: &[u8], key: &[u8; 32]) -> Result<Vec<u8>, String> {
    if bytes.len() < HEADER {
        return Err(format!(
            "truncated: {} bytes, shorter than its header",
            bytes.len()
        ));
    }
    let (header, payload) = bytes.split_at(HEADER);
    if &header[..8] != MAGIC {
        return Err("not a stackscan cache entry of this format".into());
    }
    if &header[8..40] != key {
        return Err("written under another key".into());
    }
    let mut len = [0u8; 8];
    len.copy_from_slice(&header[40..48]);
    let len = u64::from_le_bytes(len);
    if len != payload.len() as u64 {
        return Err(format!(
            "truncated: the header promises {len} bytes of executable, the file holds {}",
            payload.len()
        ));
    }
    if Sha256::digest(payload).as_slice() != &header[48..] {
        return Err("checksum mismatch: the executable's bytes changed".into());
    }
    Ok(payload.to_vec())
}

/// Compiles through `client`'s cache, if it has one; see [`Executable::compile`] for the
/// arguments.
pub(crate) fn compile(
    client: &Client,
    program: &str,
    options: &CompileOptions,
    signature: impl Fn() -> Result<Signature>,
    donated: Option<Vec<usize>>,
) -> Result<Executable> {
    let options = &adjusted_options(client, options);
    let Some(cache) = client.compile_cache() else {
        return Executable::compile(client, program, options, &signature, donated);
    };
    let key = adjusted_key(client, program, options, &compiler_environment());
    let rejected = match cache.read(&key) {
        Ok(Some(payload)) => {
            match Executable::deserialize(client, &payload, &signature, donated.clone()) {
                Ok(mut exe) => {
                    exe.set_cache_outcome(CacheOutcome::Hit);
                    return Ok(exe);
                }
                Err(e) => Some(format!("the plugin could not load it: {e}")),
            }
        }
        Ok(None) => None,
        Err(reason) => Some(reason),
    };
    let mut exe = Executable::compile(client, program, options, &signature, donated)?;
    let stored = exe
        .serialize()
        .and_then(|payload| cache.write(&key, &payload));
    exe.set_cache_outcome(match (stored, rejected) {
        (Err(e), _) => CacheOutcome::NotStored(e.to_string()),
        (Ok(()), Some(reason)) => CacheOutcome::Replaced(reason),
        (Ok(()), None) => CacheOutcome::Miss,
    });
    Ok(exe)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setting_turns_the_cache_off_moves_it_or_keeps_the_default() {
        let setting = |v: &str| CompileCache::from_setting(v.as_ref(), || PathBuf::from("/d"));
        for off in ["0", "off", "OFF", "false", "no"] {
            assert_eq!(setting(off), None, "{off}");
        }
        for default in ["", "1", "on", "True", "yes"] {
            assert_eq!(setting(default), Some(CompileCache::new("/d")), "{default}");
        }
        assert_eq!(setting("/tmp/x"), Some(CompileCache::new("/tmp/x")));
    }

    #[test]
    fn an_entry_reads_back_and_every_damage_is_named() {
        let key = [7u8; 32];
        let payload = b"serialized executable".to_vec();
        let entry = encode(&key, &payload);
        assert_eq!(decode(&entry, &key), Ok(payload.clone()));

        let reason = |bytes: &[u8], key: &[u8; 32]| decode(bytes, key).expect_err("trusted");
        assert!(reason(&entry[..HEADER - 1], &key).starts_with("truncated"));
        assert!(reason(&entry[..entry.len() - 1], &key).contains("promises 21 bytes"));
        assert!(reason(&entry, &[8u8; 32]).contains("another key"));
        let mut flipped = entry.clone();
        *flipped.last_mut().expect("non-empty") ^= 1;
        assert!(reason(&flipped, &key).starts_with("checksum mismatch"));
        let mut foreign = entry;
        foreign[0] = b'X';
        assert!(reason(&foreign, &key).contains("not a stackscan cache entry"));
    }
}
