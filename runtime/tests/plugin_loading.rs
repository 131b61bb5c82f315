//! Loading plugins: what used to kill the process (unloading XLA at exit, loading it twice, a
//! truncated library) and what used to be lost (the loader's reason), and the accelerator
//! plugins on a machine without their accelerator.
//!
//! A crash takes the whole test binary down, so the cases that used to crash run in a child
//! process — this same binary, running one `#[ignore]`d test — and the parent checks how the
//! child ended: a signal fails the test with its name instead of killing the run.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use stackscan_runtime::{
    AcceleratorOptions, Client, ClientOptions, CompileOptions, Error, Plugin, plugin,
};

/// Runs the ignored test `name` of this binary in a child process and requires it to pass.
fn run_child(name: &str) {
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = Command::new(exe)
        .args([
            name,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .output()
        .expect("start the child test");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    match (out.status.code(), out.status.signal()) {
        (Some(0), _) => assert!(
            stdout.contains("1 passed"),
            "the child ran no test `{name}`:\n{stdout}"
        ),
        (_, Some(sig)) => panic!("the child `{name}` was killed by signal {sig}:\n{stderr}"),
        (code, None) => panic!("the child `{name}` exited with {code:?}:\n{stdout}\n{stderr}"),
    }
}

fn cpu_plugin_path() -> PathBuf {
    plugin::resolve("cpu").expect("resolve the cpu plugin")
}

/// Adds 1 to a vector on one device and reads it back.
fn add_one(client: &Client) -> Vec<f32> {
    let program = r#"
func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {
  %one = stablehlo.constant dense<1.0> : tensor<3xf32>
  %y = stablehlo.add %x, %one : tensor<3xf32>
  return %y : tensor<3xf32>
}"#;
    let exe = client
        .compile(program, &CompileOptions::default())
        .expect("compile");
    let x = client
        .buffer(&[1.0f32, 2.0, 3.0], &[3], &client.devices()[0])
        .expect("upload");
    let out = exe.execute(&[[&x]]).expect("execute");
    out[0][0].to_host::<f32>().expect("download")
}

#[test]
fn a_plugin_loaded_dropped_and_loaded_again_exits_cleanly() {
    run_child("child_load_drop_load");
}

#[test]
#[ignore = "run in a child process by a_plugin_loaded_dropped_and_loaded_again_exits_cleanly"]
fn child_load_drop_load() {
    let path = cpu_plugin_path();
    {
        let plugin = Plugin::load(&path).expect("first load");
        let client = Client::new(&plugin, &ClientOptions::cpu(2)).expect("first client");
        assert_eq!(add_one(&client), vec![2.0, 3.0, 4.0]);
    }
    // Every handle of the first load is gone; a second load must neither unload nor
    // re-initialise XLA (a double free before), and the process must exit without running
    // exit handlers in unmapped code (SIGSEGV before).
    let plugin = Plugin::load(&path).expect("second load");
    let again = Plugin::load(
        path.parent()
            .expect("a directory")
            .join(".")
            .join(path.file_name().expect("a file name")),
    )
    .expect("a third load by another spelling of the path");
    assert_eq!(again.path(), plugin.path(), "one plugin per file");
    let client = Client::new(&again, &ClientOptions::cpu(1)).expect("second client");
    assert_eq!(add_one(&client), vec![2.0, 3.0, 4.0]);
}

#[test]
fn a_client_error_after_loading_exits_cleanly() {
    run_child("child_error_after_loading");
}

#[test]
#[ignore = "run in a child process by a_client_error_after_loading_exits_cleanly"]
fn child_error_after_loading() {
    // What `train --devices 3` did: load, create a client, fail, drop everything, exit.
    let plugin = Plugin::load(cpu_plugin_path()).expect("load");
    let client = Client::new(&plugin, &ClientOptions::cpu(3)).expect("client");
    let err = stackscan_runtime::Mesh::new(&client, "fsdp", 4).unwrap_err();
    assert!(matches!(err, Error::DeviceCount { .. }), "{err:?}");
}

/// A copy of the CPU plugin cut to `len` bytes, in a fresh directory.
fn truncated_copy(len: u64, tag: &str) -> PathBuf {
    let source = cpu_plugin_path();
    let dir = std::env::temp_dir().join(format!("stackscan-trunc-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let dest = dir.join("xla_cpu_pjrt.so");
    std::fs::copy(&source, &dest).expect("copy the plugin");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&dest)
        .and_then(|f| f.set_len(len))
        .expect("truncate the copy");
    dest
}

#[test]
fn a_truncated_plugin_is_a_typed_error() {
    run_child("child_truncated_plugin");
}

#[test]
#[ignore = "run in a child process by a_truncated_plugin_is_a_typed_error"]
fn child_truncated_plugin() {
    let full = std::fs::metadata(cpu_plugin_path())
        .expect("plugin size")
        .len();
    // Cut inside the code (SIGBUS in dlopen before), in the headers, and to nothing.
    for (len, expect) in [
        (full / 5, "truncated"),
        (100, "truncated"),
        (0, "not an ELF"),
    ] {
        let path = truncated_copy(len, &len.to_string());
        match Plugin::load(&path) {
            Err(Error::NotAPlugin { reason, .. }) => {
                assert!(reason.contains(expect), "cut to {len} bytes: {reason}");
            }
            other => panic!("cut to {len} bytes: expected NotAPlugin, got {other:?}"),
        }
        std::fs::remove_dir_all(path.parent().expect("its directory")).expect("clean up");
    }
}

/// Builds a shared library that needs another one, then removes that one: a file `dlopen`
/// refuses for a reason only the loader knows.
fn library_with_missing_dependency(dir: &Path) -> Option<PathBuf> {
    std::fs::create_dir_all(dir).expect("temp dir");
    std::fs::write(dir.join("dep.c"), "int stackscan_dep(void) { return 1; }\n").expect("write");
    std::fs::write(
        dir.join("plug.c"),
        "int stackscan_dep(void);\nint uses_dep(void) { return stackscan_dep(); }\n",
    )
    .expect("write");
    let cc = |args: &[&str]| {
        Command::new("cc")
            .current_dir(dir)
            .args(args)
            .status()
            .is_ok_and(|s| s.success())
    };
    let built = cc(&["-shared", "-fPIC", "-o", "libstackscan_dep.so", "dep.c"])
        && cc(&[
            "-shared",
            "-fPIC",
            "-o",
            "plug.so",
            "plug.c",
            "-L.",
            "-lstackscan_dep",
        ]);
    if !built {
        return None;
    }
    std::fs::remove_file(dir.join("libstackscan_dep.so")).expect("remove the dependency");
    Some(dir.join("plug.so"))
}

#[test]
fn the_loader_s_reason_is_kept() {
    let dir = std::env::temp_dir().join(format!("stackscan-dep-{}", std::process::id()));
    let Some(path) = library_with_missing_dependency(&dir) else {
        eprintln!("skipped: no C compiler (`cc`) to build the test library");
        return;
    };
    let err = Plugin::load(&path).unwrap_err();
    let message = err.to_string();
    assert!(
        matches!(err, Error::NotAPlugin { .. })
            && message.contains("libstackscan_dep.so")
            && message.contains("cannot open shared object file"),
        "{message}"
    );
    std::fs::remove_dir_all(dir).expect("clean up");
}

/// The library of an accelerator plugin whose wheel is in the cache (`.ci/run` fetches them),
/// or `None` with the reason printed.
fn cached_accelerator_plugin(package: plugin::PluginPackage) -> Option<PathBuf> {
    match plugin::ensure_installed(&package, &plugin::cache_dir(), false) {
        Ok(dir) => Some(dir.join(package.library)),
        Err(e) => {
            eprintln!(
                "skipped: the `{}` plugin is not in the cache ({e})",
                package.name
            );
            None
        }
    }
}

/// Every command's client: a CPU plugin exposes exactly the devices asked for, by name or by
/// a path the loader cannot tell from its name.
#[test]
fn a_cpu_client_for_devices_has_exactly_those_devices() {
    let plugin = Plugin::load(cpu_plugin_path()).unwrap();
    for n in [1, 3] {
        assert_eq!(Client::for_devices(&plugin, n).unwrap().devices().len(), n);
    }
    assert!(matches!(
        Client::for_devices(&plugin, 0),
        Err(Error::DeviceCount { requested: 0, .. })
    ));
    run_child("child_renamed_cpu_plugin");
}

#[test]
#[ignore = "run in a child process by a_cpu_client_for_devices_has_exactly_those_devices"]
fn child_renamed_cpu_plugin() {
    // A copy whose name says nothing: created with its defaults, found to be a CPU plugin,
    // and made again with the device count (alone in its process: one copy of XLA loaded).
    let dir = std::env::temp_dir().join(format!("stackscan-renamed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let renamed = dir.join("libplugin.so");
    std::fs::copy(cpu_plugin_path(), &renamed).unwrap();
    let plugin = Plugin::load(&renamed).unwrap();
    let client = Client::for_devices(&plugin, 4).unwrap();
    assert_eq!((client.platform(), client.devices().len()), ("cpu", 4));
    drop((client, plugin));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_tpu_plugin_without_a_tpu_is_refused_before_it_starts() {
    if Path::new("/dev/accel0").exists() || Path::new("/dev/vfio/0").exists() {
        eprintln!("skipped: this machine has TPU device nodes");
        return;
    }
    // Resolving by name refuses before anything is fetched.
    let err = plugin::resolve("tpu").unwrap_err();
    assert!(
        matches!(err, Error::NoAccelerator { kind: "TPU", .. }),
        "{err:?}"
    );
    let Some(path) = cached_accelerator_plugin(plugin::TPU) else {
        return;
    };
    // Loading the real library by path is refused before it is initialised (which would ask
    // a cloud metadata server for its topology, for minutes).
    let err = Plugin::load(&path).unwrap_err();
    assert!(
        matches!(err, Error::NoAccelerator { kind: "TPU", .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("no TPU device"), "{err}");
}

#[test]
fn the_cuda_plugin_without_a_gpu_is_a_typed_error() {
    run_child("child_cuda_without_gpu");
}

#[test]
#[ignore = "run in a child process by the_cuda_plugin_without_a_gpu_is_a_typed_error"]
fn child_cuda_without_gpu() {
    if Path::new("/dev/nvidia0").exists() {
        eprintln!("skipped: this machine has an NVIDIA GPU");
        return;
    }
    let Some(path) = cached_accelerator_plugin(plugin::CUDA) else {
        return;
    };
    let plugin = match Plugin::load(&path) {
        // Without the CUDA libraries the plugin cannot even be mapped: the loader says which.
        Err(Error::NotAPlugin { reason, .. }) => {
            assert!(reason.contains("cannot open shared object"), "{reason}");
            return;
        }
        other => other.expect("the CUDA plugin loads without a GPU"),
    };
    // The client every command makes: the CUDA plugin gets its own defaults (it refuses the
    // CPU plugins' `cpu_device_count` by name), so it fails only for want of a GPU.
    let err = Client::for_devices(&plugin, 1).unwrap_err();
    assert!(
        matches!(err, Error::Pjrt { .. } | Error::DeviceCount { .. }),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(!message.contains("option"), "{message}");
    assert!(message.contains("GPU"), "{message}");
    eprintln!("the CUDA plugin without a GPU: {err}");
    let refused = Client::new(&plugin, &ClientOptions::cpu(1)).unwrap_err();
    assert!(
        refused.to_string().contains("cpu_device_count"),
        "{refused}"
    );
    // The options stackscan gives the CUDA plugin itself (visible devices, an integer list;
    // the memory share, a float; preallocation, a bool) are all accepted by name and type:
    // the plugin still fails only for want of a GPU, as it does for an option it does not
    // know.
    let accelerator = AcceleratorOptions {
        memory_fraction: Some(0.5),
        preallocate: Some(false),
    };
    let err = Client::new(&plugin, &ClientOptions::cuda(2, accelerator)).unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("GPU") && !message.contains("option"),
        "{message}"
    );
    let err = Client::for_devices_with(&plugin, 1, accelerator).unwrap_err();
    assert!(err.to_string().contains("GPU"), "{err}");
    // A share outside (0, 1] is refused before the plugin sees it.
    let bad = AcceleratorOptions {
        memory_fraction: Some(1.5),
        preallocate: None,
    };
    let err = Client::new(&plugin, &ClientOptions::cuda(1, bad)).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidOption { name, .. } if name == "memory_fraction"),
        "{err:?}"
    );
}
