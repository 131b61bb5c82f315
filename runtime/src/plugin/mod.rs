//! Finding a PJRT plugin: an explicit path, or a known package fetched into a local cache.
//!
//! XLA's plugins ship as Python wheels. A named plugin (`cpu`, `cpu-0.115`, `tpu`, `cuda`)
//! resolves to a directory under the cache (`$STACKSCAN_CACHE`, else `$XDG_CACHE_HOME/stackscan`,
//! else `~/.cache/stackscan`) holding the unpacked wheel. When it is missing, the wheel is
//! downloaded with the machine's own `python3 -m pip download`, checked against its pinned
//! sha256, and unpacked to a temporary directory that is renamed into place, so a crash or a
//! concurrent fetch never leaves a half-written plugin behind.
//!
//! ```no_run
//! let path = stackscan_runtime::plugin::resolve("cpu")?;
//! let plugin = stackscan_runtime::Plugin::load(path)?;
//! # Ok::<(), stackscan_runtime::Error>(())
//! ```

use std::io::Read;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

mod accelerator;
mod load;

pub use accelerator::SKIP_DEVICE_CHECK_ENV;
pub(crate) use accelerator::check_accelerator;

/// Environment variable naming a plugin file; it wins over a plugin name.
pub const PLUGIN_ENV: &str = "STACKSCAN_PJRT_PLUGIN";
/// Environment variable naming the cache directory.
pub const CACHE_ENV: &str = "STACKSCAN_CACHE";

/// A wheel that carries a PJRT plugin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PluginPackage {
    /// The name stackscan accepts for it (`cpu`).
    pub name: &'static str,
    /// The package name for `pip`.
    pub package: &'static str,
    /// Pinned version, if any.
    pub version: Option<&'static str>,
    /// The wheel file `pip download` writes, when pinned.
    pub wheel: Option<&'static str>,
    /// sha256 of that wheel, when pinned.
    pub sha256: Option<&'static str>,
    /// Path of the shared library inside the wheel.
    pub library: &'static str,
    /// Path of `pjrt_c_api.h` inside the wheel, if it ships one.
    pub header: Option<&'static str>,
    /// Approximate download size, to tell the user what is coming.
    pub approx_mb: u32,
    /// The Python version whose wheel is pinned, for packages that publish one wheel per
    /// Python version (the library inside is the same; pip would otherwise pick the wheel of
    /// whatever Python runs it, whose hash is another).
    pub python_version: Option<&'static str>,
}

/// XLA's CPU plugin, PJRT API 0.81: the default.
pub const CPU: PluginPackage = PluginPackage {
    name: "cpu",
    package: "xla-cpu-pjrt",
    version: Some("0.0.1"),
    wheel: Some("xla_cpu_pjrt-0.0.1-py3-none-manylinux_2_27_x86_64.whl"),
    sha256: Some("55837b6b7b47daa717f2d9a5a03563ea0ceaa338d06a81a1e2d3f060d960decc"),
    library: "xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so",
    header: Some("xla_plugins/xla_cpu_pjrt/include/pjrt_c_api.h"),
    approx_mb: 63,
    python_version: None,
};

/// A newer build of XLA's CPU plugin (PJRT API 0.115), shipped by LAMMPS.
pub const CPU_0115: PluginPackage = PluginPackage {
    name: "cpu-0.115",
    package: "lammps-jax-pjrt-cpu",
    version: Some("0.11.2"),
    wheel: Some("lammps_jax_pjrt_cpu-0.11.2-py3-none-manylinux_2_27_x86_64.whl"),
    sha256: Some("1319390d948b39f69f7dade496b7c385149d9ca6097a6b62114da113216d9ad1"),
    library: "lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so",
    header: None,
    approx_mb: 63,
    python_version: None,
};

/// Google's TPU plugin. Pinned for compiling against TPU topologies on machines without a
/// TPU ([`crate::Topology`]): 0.0.52 describes and compiles for TPU7x, v6e, v5p and v5e
/// slices deviceless through the PJRT C API (API 0.117, which fills every slot this binding
/// reads); a newer build moves the compiler and so every figure read from its programs.
pub const TPU: PluginPackage = PluginPackage {
    name: "tpu",
    package: "libtpu",
    version: Some("0.0.52"),
    wheel: Some("libtpu-0.0.52-cp311-cp311-manylinux_2_31_x86_64.whl"),
    sha256: Some("f5e2e596eaea9357fbb5a6755a7a9007c6ab75bfde4a55191b03eff402971140"),
    library: "libtpu/libtpu.so",
    header: None,
    approx_mb: 137,
    python_version: Some("3.11"),
};

/// XLA's CUDA 13 plugin (unpinned: resolved, never tested here).
pub const CUDA: PluginPackage = PluginPackage {
    name: "cuda",
    package: "jax-cuda13-pjrt",
    version: None,
    wheel: None,
    sha256: None,
    library: "jax_plugins/xla_cuda13/xla_cuda_plugin.so",
    header: None,
    approx_mb: 150,
    python_version: None,
};

/// Every named plugin.
pub const KNOWN: [PluginPackage; 4] = [CPU, CPU_0115, TPU, CUDA];

impl PluginPackage {
    /// Looks a plugin up by its stackscan name.
    pub fn named(name: &str) -> Result<PluginPackage> {
        KNOWN
            .into_iter()
            .find(|p| p.name == name)
            .ok_or_else(|| Error::UnknownPlugin(name.to_owned()))
    }

    /// `package==version`, or the bare package when unpinned.
    pub fn requirement(&self) -> String {
        match self.version {
            Some(v) => format!("{}=={v}", self.package),
            None => self.package.to_owned(),
        }
    }

    /// Where the unpacked wheel lives under `cache`.
    pub fn install_dir(&self, cache: &Path) -> PathBuf {
        let version = self.version.unwrap_or("unpinned");
        cache
            .join("plugins")
            .join(format!("{}-{version}", self.package))
    }

    /// Where the downloaded wheel is kept under `cache`.
    pub fn wheel_dir(cache: &Path) -> PathBuf {
        cache.join("wheels")
    }

    /// The command that downloads the wheel by hand into the cache.
    pub fn fetch_command(&self, cache: &Path) -> String {
        let python = self
            .python_version
            .map(|v| format!("--python-version {v} "))
            .unwrap_or_default();
        format!(
            "python3 -m pip download --no-deps --only-binary=:all: {python}--dest {} {}",
            PluginPackage::wheel_dir(cache).display(),
            self.requirement()
        )
    }
}

/// The cache directory: `$STACKSCAN_CACHE`, else `$XDG_CACHE_HOME/stackscan`, else
/// `$HOME/.cache/stackscan`, else a directory under the system temp dir.
pub fn cache_dir() -> PathBuf {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    env(CACHE_ENV)
        .or_else(|| env("XDG_CACHE_HOME").map(|p| p.join("stackscan")))
        .or_else(|| env("HOME").map(|p| p.join(".cache").join("stackscan")))
        .unwrap_or_else(|| std::env::temp_dir().join("stackscan-cache"))
}

/// Resolves a plugin name or path to a shared library, fetching a named plugin if needed.
///
/// `spec` is a path (contains `/` or ends in `.so`), or one of the names in [`KNOWN`]. A path,
/// given here or in `$STACKSCAN_PJRT_PLUGIN`, wins over a name.
pub fn resolve(spec: &str) -> Result<PathBuf> {
    resolve_as(spec, true)
}

/// [`resolve`] for a compile-only use ([`Plugin::load_compile_only`](crate::Plugin)): the
/// plugin is fetched whether or not this machine has its accelerator.
pub fn resolve_compile_only(spec: &str) -> Result<PathBuf> {
    resolve_as(spec, false)
}

/// [`resolve`] (`to_run`: refused before fetching a plugin whose accelerator this machine
/// lacks) or [`resolve_compile_only`].
fn resolve_as(spec: &str, to_run: bool) -> Result<PathBuf> {
    if looks_like_path(spec) {
        return Ok(PathBuf::from(spec));
    }
    let package = PluginPackage::named(spec)?;
    if let Some(path) = std::env::var_os(PLUGIN_ENV).filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    if to_run {
        // Before fetching a plugin that could not be used here anyway.
        check_accelerator(Path::new(package.library))?;
    }
    Ok(ensure_installed(&package, &cache_dir(), true)?.join(package.library))
}

fn looks_like_path(spec: &str) -> bool {
    spec.contains('/') || spec.ends_with(".so") || spec.ends_with(".dylib")
}

/// The unpacked wheel of `package` under `cache`, installing it from a downloaded wheel or,
/// when `fetch` is true, downloading it first. Returns the install directory.
pub fn ensure_installed(package: &PluginPackage, cache: &Path, fetch: bool) -> Result<PathBuf> {
    // One fetch at a time in this process (threads of a test binary all resolving `cpu` on a
    // fresh machine); other processes are handled by the atomic renames below.
    static FETCHING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = FETCHING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = package.install_dir(cache);
    if installed_intact(package, &dir) {
        return Ok(dir);
    }
    if dir.exists() {
        // A damaged or foreign install (a truncated library crashes the process that loads
        // it): replace it rather than trust it.
        tracing::warn!(
            "the plugin in {} is incomplete or damaged; reinstalling it",
            dir.display()
        );
        std::fs::remove_dir_all(&dir)
            .map_err(|e| Error::io(format!("removing the damaged `{}`", dir.display()), e))?;
    }
    let (wheel, cached) = match find_wheel(package, cache) {
        Some(w) => (w, true),
        None if fetch => (download(package, cache, "python3")?, false),
        None => {
            return Err(Error::Fetch {
                package: package.requirement(),
                reason: format!("it is not in the cache `{}`", cache.display()),
                command: package.fetch_command(cache),
            });
        }
    };
    match install_wheel(package, &wheel, cache) {
        // A corrupt wheel left in the cache: fetch a fresh one once.
        Err(Error::HashMismatch { .. }) if cached && fetch => {
            tracing::warn!(
                "the cached wheel {} does not match its pinned hash; fetching it again",
                wheel.display()
            );
            std::fs::remove_file(&wheel)
                .map_err(|e| Error::io(format!("removing `{}`", wheel.display()), e))?;
            let fresh = download(package, cache, "python3")?;
            install_wheel(package, &fresh, cache)
        }
        other => other,
    }
}

/// The file recording an install's library size, written last before the install is renamed
/// into place.
const MARKER: &str = ".stackscan-installed";

/// Whether `dir` holds a complete install: the library exists with the size recorded when it
/// was unpacked.
fn installed_intact(package: &PluginPackage, dir: &Path) -> bool {
    let recorded = std::fs::read_to_string(dir.join(MARKER))
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok());
    let actual = std::fs::metadata(dir.join(package.library))
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.len());
    recorded.is_some() && recorded == actual
}

/// A wheel of `package` already downloaded into the cache.
fn find_wheel(package: &PluginPackage, cache: &Path) -> Option<PathBuf> {
    let dir = PluginPackage::wheel_dir(cache);
    if let Some(name) = package.wheel {
        let p = dir.join(name);
        return p.is_file().then_some(p);
    }
    let prefix = format!("{}-", package.package.replace('-', "_"));
    std::fs::read_dir(&dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".whl"))
        })
        .max()
}

/// Whether [`download`] lets pip draw its own progress bar on this process's stderr.
static FETCH_PROGRESS: AtomicBool = AtomicBool::new(false);

/// Lets a plugin download show pip's progress bar on this process's stderr (pip draws it only
/// when stderr is a terminal), for binaries that want the user to see a large download
/// advance.
/// Off by default: a library does not write to the terminal unasked, and pip's output is then
/// captured and only its last lines reported in [`Error::Fetch`].
pub fn show_fetch_progress(on: bool) {
    FETCH_PROGRESS.store(on, Ordering::Relaxed);
}

/// Downloads the wheel with `<python> -m pip download` into the cache's wheel directory and
/// returns its path. [`ensure_installed`] calls this with `python3`.
pub fn download(package: &PluginPackage, cache: &Path, python: &str) -> Result<PathBuf> {
    let fetch_error = |reason: String| Error::Fetch {
        package: package.requirement(),
        reason,
        command: package.fetch_command(cache),
    };
    let wheels = PluginPackage::wheel_dir(cache);
    let staging = wheels.join(unique_name(".download"));
    std::fs::create_dir_all(&staging)
        .map_err(|e| Error::io(format!("creating `{}`", staging.display()), e))?;
    tracing::info!(
        "fetching the `{}` PJRT plugin: {} (about {} MB) into {}",
        package.name,
        package.requirement(),
        package.approx_mb,
        wheels.display()
    );
    if package.sha256.is_none() {
        tracing::warn!(
            "`{}` has no pinned hash; pip's choice of version is trusted",
            package.package
        );
    }
    let mut pip = Command::new(python);
    pip.args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"]);
    if let Some(version) = package.python_version {
        pip.args(["--python-version", version]);
    }
    pip.args(["--disable-pip-version-check", "--dest"])
        .arg(&staging)
        .arg(package.requirement());
    let shown = FETCH_PROGRESS.load(Ordering::Relaxed);
    let output = if shown {
        // pip's progress and messages go to our stderr (its stdout too, so that they do not
        // mix with a binary's report on stdout).
        let to_stderr = std::io::stderr()
            .as_fd()
            .try_clone_to_owned()
            .map(Stdio::from);
        match to_stderr {
            Ok(out) => pip
                .arg("--progress-bar=on")
                .stdout(out)
                .status()
                .map(|status| std::process::Output {
                    status,
                    stdout: Vec::new(),
                    stderr: b"(its output is above)".to_vec(),
                }),
            Err(e) => Err(e),
        }
    } else {
        pip.arg("--quiet").output()
    };
    let result = match output {
        Err(e) => Err(fetch_error(format!("cannot run `{python}`: {e}"))),
        Ok(out) if !out.status.success() => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = stderr.lines().rev().take(3).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            Err(fetch_error(format!(
                "pip exited with {}: {}",
                out.status,
                tail.join(" / ")
            )))
        }
        Ok(_) => first_wheel(&staging)
            .ok_or_else(|| fetch_error("pip finished but wrote no wheel".into()))
            .and_then(|w| {
                let name = w.file_name().map(PathBuf::from).unwrap_or_default();
                let dest = wheels.join(name);
                std::fs::rename(&w, &dest)
                    .map_err(|e| Error::io(format!("moving the wheel to `{}`", dest.display()), e))
                    .map(|()| dest)
            }),
    };
    let _ = std::fs::remove_dir_all(&staging);
    result
}

fn first_wheel(dir: &Path) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
}

/// Checks `wheel` against the package's pinned hash and unpacks it atomically into the cache.
/// Returns the install directory.
pub fn install_wheel(package: &PluginPackage, wheel: &Path, cache: &Path) -> Result<PathBuf> {
    if let Some(expected) = package.sha256 {
        let actual = sha256_file(wheel)?;
        if actual != expected {
            return Err(Error::HashMismatch {
                path: wheel.to_path_buf(),
                expected: expected.to_owned(),
                actual,
            });
        }
    }
    let dir = package.install_dir(cache);
    let parent = dir.parent().unwrap_or(cache);
    std::fs::create_dir_all(parent)
        .map_err(|e| Error::io(format!("creating `{}`", parent.display()), e))?;
    let staging = parent.join(unique_name(".unpack"));
    let unpacked = unpack(wheel, &staging).and_then(|()| {
        let library = std::fs::metadata(staging.join(package.library))
            .ok()
            .filter(|m| m.is_file())
            .ok_or_else(|| Error::Wheel {
                path: wheel.to_path_buf(),
                message: format!("it holds no `{}`", package.library),
            })?;
        std::fs::write(staging.join(MARKER), library.len().to_string())
            .map_err(|e| Error::io(format!("writing `{}`", staging.join(MARKER).display()), e))
    });
    if let Err(e) = unpacked {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(e);
    }
    match std::fs::rename(&staging, &dir) {
        Ok(()) => {}
        // Another process installed it first; theirs is as good as ours.
        Err(_) if installed_intact(package, &dir) => {
            let _ = std::fs::remove_dir_all(&staging);
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(Error::io(
                format!("moving the plugin to `{}`", dir.display()),
                e,
            ));
        }
    }
    tracing::info!(
        "installed the `{}` PJRT plugin in {}",
        package.name,
        dir.display()
    );
    Ok(dir)
}

fn unpack(wheel: &Path, dest: &Path) -> Result<()> {
    let file = std::fs::File::open(wheel)
        .map_err(|e| Error::io(format!("opening `{}`", wheel.display()), e))?;
    let wheel_error = |message: String| Error::Wheel {
        path: wheel.to_path_buf(),
        message,
    };
    let mut archive = zip::ZipArchive::new(file).map_err(|e| wheel_error(e.to_string()))?;
    // `extract` refuses entries that would escape `dest` (absolute paths, `..`).
    archive
        .extract(dest)
        .map_err(|e| wheel_error(e.to_string()))
}

/// Lower-case hex sha256 of a file.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut file = std::fs::File::open(path)
        .map_err(|e| Error::io(format!("opening `{}`", path.display()), e))?;
    let mut hasher = Sha256::new();
    let mut chunk = vec![0u8; 1 << 20];
    loop {
        let n = file
            .read(&mut chunk)
            .map_err(|e| Error::io(format!("reading `{}`", path.display()), e))?;
        if n == 0 {
            break;
        }
        hasher.update(&chunk[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// A name no other process or call picks: prefix, pid and a timestamp.
fn unique_name(prefix: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{prefix}-{}-{nanos}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve_and_unknown_names_list_choices() {
        assert_eq!(PluginPackage::named("cpu").unwrap(), CPU);
        let err = PluginPackage::named("gpu").unwrap_err().to_string();
        assert!(err.contains("`gpu`") && err.contains("`cuda`"), "{err}");
    }

    #[test]
    fn paths_are_taken_as_given() {
        assert_eq!(resolve("./x.so").unwrap(), PathBuf::from("./x.so"));
    }

    #[test]
    fn damaged_installs_are_not_trusted() {
        let cache = std::env::temp_dir().join(unique_name("stackscan-damaged"));
        let dir = CPU_0115.install_dir(&cache);
        let lib = dir.join(CPU_0115.library);
        std::fs::create_dir_all(lib.parent().unwrap()).unwrap();
        std::fs::write(&lib, b"truncated").unwrap();
        // No marker: not trusted.
        assert!(!installed_intact(&CPU_0115, &dir));
        // A marker recording another size: not trusted.
        std::fs::write(dir.join(MARKER), "100000").unwrap();
        assert!(!installed_intact(&CPU_0115, &dir));
        std::fs::write(dir.join(MARKER), "9").unwrap();
        assert!(installed_intact(&CPU_0115, &dir));
        // Without a wheel and without fetching, the damaged install is removed and the error
        // says how to get the plugin.
        std::fs::write(dir.join(MARKER), "1").unwrap();
        let err = ensure_installed(&CPU_0115, &cache, false).unwrap_err();
        assert!(matches!(err, Error::Fetch { .. }), "{err:?}");
        assert!(!dir.exists());
        std::fs::remove_dir_all(cache).unwrap();
    }

    #[test]
    fn sha256_of_known_bytes() {
        let dir = std::env::temp_dir().join(unique_name("stackscan-sha"));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("abc");
        std::fs::write(&f, b"abc").unwrap();
        assert_eq!(
            sha256_file(&f).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
