//! Whether this machine has the accelerator a plugin drives, checked before the plugin is
//! fetched or initialised where initialising it without one would not fail cleanly.

use std::path::Path;

use crate::error::{Error, Result};

/// Environment variable that skips the check for accelerator devices before a TPU plugin is
/// initialised (for machines that expose them under names the check does not know).
pub const SKIP_DEVICE_CHECK_ENV: &str = "STACKSCAN_SKIP_DEVICE_CHECK";

/// Refuses to initialise a plugin whose accelerator this machine does not have, when that
/// initialisation would not fail cleanly on its own.
///
/// libtpu, initialised on a machine without TPU chips, asks the cloud metadata server for its
/// topology, retrying each key for a long while before it gives up: a job that loads it by
/// mistake hangs for minutes and sends requests off the machine. TPU VMs expose their chips as
/// `/dev/accel*` (v2–v4) or VFIO groups `/dev/vfio/<n>` (v5e and later), so their absence is a
/// reliable sign. The CUDA plugin needs no such check: without a driver or a GPU its client
/// creation fails at once with a PJRT error.
pub(crate) fn check_accelerator(path: &Path) -> Result<()> {
    let is_tpu = path
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("libtpu"));
    if !is_tpu || std::env::var_os(SKIP_DEVICE_CHECK_ENV).is_some_and(|v| v == "1") {
        return Ok(());
    }
    if tpu_devices_present(Path::new("/dev")) {
        return Ok(());
    }
    Err(Error::NoAccelerator {
        path: path.to_path_buf(),
        kind: "TPU",
        looked_for: "no /dev/accel* and no /dev/vfio/<group>".to_owned(),
        override_env: SKIP_DEVICE_CHECK_ENV,
    })
}

/// Whether `dev` (normally `/dev`) holds TPU device nodes.
fn tpu_devices_present(dev: &Path) -> bool {
    let any = |dir: &Path, keep: &dyn Fn(&str) -> bool| {
        std::fs::read_dir(dir).is_ok_and(|entries| {
            entries
                .filter_map(|e| e.ok())
                .any(|e| e.file_name().to_str().is_some_and(keep))
        })
    };
    any(dev, &|n| {
        n.strip_prefix("accel")
            .is_some_and(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
    }) || any(&dev.join("vfio"), &|n| {
        !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory name no other test run uses.
    fn unique(prefix: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(super::super::unique_name(prefix))
    }

    #[test]
    fn tpu_device_nodes_are_recognised() {
        let dev = unique("stackscan-dev");
        std::fs::create_dir_all(dev.join("vfio")).unwrap();
        std::fs::write(dev.join("accelerometer"), b"").unwrap();
        std::fs::write(dev.join("vfio").join("vfio"), b"").unwrap();
        assert!(!tpu_devices_present(&dev));
        std::fs::write(dev.join("vfio").join("0"), b"").unwrap();
        assert!(tpu_devices_present(&dev));
        std::fs::remove_file(dev.join("vfio").join("0")).unwrap();
        std::fs::write(dev.join("accel3"), b"").unwrap();
        assert!(tpu_devices_present(&dev));
        std::fs::remove_dir_all(dev).unwrap();
    }

    #[test]
    fn only_tpu_plugins_need_their_devices() {
        assert!(check_accelerator(Path::new("/x/xla_cpu_pjrt.so")).is_ok());
        assert!(check_accelerator(Path::new("/x/xla_cuda_plugin.so")).is_ok());
        if !tpu_devices_present(Path::new("/dev")) {
            let err = check_accelerator(Path::new("/x/libtpu/libtpu.so")).unwrap_err();
            assert!(
                matches!(err, Error::NoAccelerator { kind: "TPU", .. }),
                "{err:?}"
            );
            assert!(err.to_string().contains(SKIP_DEVICE_CHECK_ENV), "{err}");
        }
    }
}
