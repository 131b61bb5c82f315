//! Bad input gives a typed error, never a crash: malformed programs, wrong arguments, device
//! counts the plugin cannot provide, missing or foreign plugin files, corrupt wheels.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan_runtime::testing as common;

use std::path::PathBuf;
use std::process::Command;

use stackscan_runtime::{
    Client, ClientOptions, CompileOptions, DType, Error, ErrorCode, MAX_CPU_DEVICES, Mesh, Plugin,
    TensorType, plugin,
};

const ADD: &str = r#"
func.func public @main(%a: tensor<2x2xf32>, %b: tensor<2x2xf32>) -> tensor<2x2xf32> {
  %0 = stablehlo.add %a, %b : tensor<2x2xf32>
  return %0 : tensor<2x2xf32>
}"#;

fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("stackscan-errors-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

#[test]
fn malformed_mlir_is_a_compile_error() {
    let client = common::cpu_client(1);
    let err = client
        .compile(
            "func.func @main( this is not mlir",
            &CompileOptions::default(),
        )
        .unwrap_err();
    match err {
        Error::Pjrt {
            call,
            code,
            message,
        } => {
            assert_eq!(call, "PJRT_Client_Compile");
            // XLA reports MLIR parse failures as UNKNOWN or INVALID_ARGUMENT depending on the
            // build; either way the message carries the parser's diagnostic.
            assert!(
                matches!(code, ErrorCode::Unknown | ErrorCode::InvalidArgument),
                "{code}: {message}"
            );
            assert!(message.contains("error"), "{message}");
        }
        other => panic!("expected a PJRT compile error, got {other:?}"),
    }
}

#[test]
fn wrong_argument_count_is_rejected_before_running() {
    let client = common::cpu_client(1);
    let dev = &client.devices()[0];
    let exe = client.compile(ADD, &CompileOptions::default()).unwrap();
    let a = client.buffer(&[0f32; 4], &[2, 2], dev).unwrap();
    let err = exe.execute(&[[&a]]).unwrap_err();
    assert!(
        matches!(
            err,
            Error::ArgumentCount {
                device: 0,
                expected: 2,
                actual: 1
            }
        ),
        "{err:?}"
    );
    let err = exe.execute::<[&_; 2]>(&[]).unwrap_err();
    assert!(
        matches!(
            err,
            Error::DeviceLists {
                expected: 1,
                actual: 0
            }
        ),
        "{err:?}"
    );
}

#[test]
fn wrong_shape_or_dtype_names_the_argument() {
    let client = common::cpu_client(1);
    let dev = &client.devices()[0];
    let exe = client.compile(ADD, &CompileOptions::default()).unwrap();
    let good = client.buffer(&[0f32; 4], &[2, 2], dev).unwrap();
    let flat = client.buffer(&[0f32; 4], &[4], dev).unwrap();
    let ints = client.buffer(&[0i32; 4], &[2, 2], dev).unwrap();
    let err = exe.execute(&[[&good, &flat]]).unwrap_err();
    match err {
        Error::ArgumentType {
            device: 0,
            index: 1,
            expected,
            actual,
        } => {
            assert_eq!(expected, TensorType::new(DType::F32, vec![2, 2]));
            assert_eq!(actual, TensorType::new(DType::F32, vec![4]));
        }
        other => panic!("expected a shape error, got {other:?}"),
    }
    // Same byte size, other element type: PJRT alone would not notice.
    let err = exe.execute(&[[&ints, &good]]).unwrap_err();
    assert!(
        matches!(&err, Error::ArgumentType { index: 0, actual, .. } if actual.dtype == DType::I32),
        "{err:?}"
    );
    assert!(err.to_string().contains("tensor<2x2xi32>"), "{err}");
}

#[test]
fn host_data_and_readback_types_are_checked() {
    let client = common::cpu_client(1);
    let dev = &client.devices()[0];
    let err = client.buffer(&[1f32; 3], &[2, 2], dev).unwrap_err();
    assert!(
        matches!(
            err,
            Error::HostDataLength {
                expected: 4,
                actual: 3,
                ..
            }
        ),
        "{err:?}"
    );
    let err = client.buffer(&[1f32; 3], &[-3], dev).unwrap_err();
    assert!(matches!(err, Error::InvalidDims(_)), "{err:?}");
    let b = client.buffer(&[1i64, 2], &[2], dev).unwrap();
    let err = b.to_host::<f64>().unwrap_err();
    assert!(
        matches!(
            err,
            Error::ElementType {
                expected: DType::F64,
                actual: DType::I64
            }
        ),
        "{err:?}"
    );
    assert_eq!(b.to_host::<i64>().unwrap(), vec![1, 2]);
}

#[test]
fn buffers_of_another_client_are_refused() {
    let one = common::cpu_client(1);
    let other = common::cpu_client(1);
    let exe = one.compile(ADD, &CompileOptions::default()).unwrap();
    let a = one.buffer(&[0f32; 4], &[2, 2], &one.devices()[0]).unwrap();
    let b = other
        .buffer(&[0f32; 4], &[2, 2], &other.devices()[0])
        .unwrap();
    let err = exe.execute(&[[&a, &b]]).unwrap_err();
    assert!(
        matches!(
            err,
            Error::ForeignBuffer {
                device: 0,
                index: 1
            }
        ),
        "{err:?}"
    );
}

#[test]
fn device_counts_the_plugin_cannot_provide() {
    let client = common::cpu_client(4);
    let err = Mesh::new(&client, "fsdp", 8).unwrap_err();
    assert!(
        matches!(
            err,
            Error::DeviceCount {
                requested: 8,
                available: 4
            }
        ),
        "{err:?}"
    );
    assert!(matches!(
        Mesh::new(&client, "fsdp", 0),
        Err(Error::DeviceCount { .. })
    ));
    // Eight replicas compiled for a four-device client.
    let program = ADD.replace(
        "func.func",
        "module attributes {mhlo.num_replicas = 8 : i32} {\nfunc.func",
    ) + "\n}";
    let err = client
        .compile(
            &program,
            &CompileOptions::replicas(&[0, 1, 2, 3, 4, 5, 6, 7]).unwrap(),
        )
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Pjrt {
                call: "PJRT_Client_Compile",
                ..
            }
        ),
        "{err:?}"
    );
    // Clients asked for no devices, a negative count (which aborts newer plugins), or counts
    // the plugins read as 32 bits (2^31 gave a client with no devices, 2^32 + 2 one with two).
    for n in [0, -1, 1 << 31, (1 << 32) + 2, MAX_CPU_DEVICES + 1] {
        let options = ClientOptions::default().int("cpu_device_count", n);
        let err = Client::new(&common::cpu_plugin(), &options).unwrap_err();
        assert!(
            matches!(&err, Error::InvalidOption { name, .. } if name == "cpu_device_count"),
            "{err:?}"
        );
    }
}

#[test]
fn missing_plugin_path() {
    let err = Plugin::load("/nonexistent/dir/pjrt_plugin.so").unwrap_err();
    assert!(matches!(err, Error::PluginNotFound { .. }), "{err:?}");
    assert!(err.to_string().contains("/nonexistent/dir/pjrt_plugin.so"));
}

#[test]
fn a_shared_library_without_get_pjrt_api_is_not_a_plugin() {
    let dir = scratch_dir("notaplugin");
    let src = dir.join("lib.c");
    std::fs::write(&src, "int stackscan_not_a_plugin(void) { return 42; }\n").unwrap();
    let so = dir.join("libnotaplugin.so");
    let compiler = cc::Build::new()
        .opt_level(0)
        .host("x86_64-unknown-linux-gnu")
        .target("x86_64-unknown-linux-gnu")
        .cargo_metadata(false)
        .try_get_compiler()
        .expect("a C compiler");
    let status = Command::new(compiler.path())
        .args(["-shared", "-fPIC", "-o"])
        .arg(&so)
        .arg(&src)
        .status()
        .expect("run the C compiler");
    assert!(status.success());
    let err = Plugin::load(&so).unwrap_err();
    match &err {
        Error::NotAPlugin { reason, .. } => assert!(reason.contains("GetPjrtApi"), "{reason}"),
        other => panic!("expected NotAPlugin, got {other:?}"),
    }
    // A file that is not a shared library at all.
    let text = dir.join("plain.so");
    std::fs::write(&text, "not an ELF file").unwrap();
    assert!(matches!(Plugin::load(&text), Err(Error::NotAPlugin { .. })));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_wheel_whose_hash_does_not_match_is_refused_and_nothing_is_installed() {
    let cache = scratch_dir("hash");
    let wheel = cache.join(plugin::CPU.wheel.unwrap());
    std::fs::write(&wheel, b"PK\x05\x06 definitely not the pinned wheel").unwrap();
    let err = plugin::install_wheel(&plugin::CPU, &wheel, &cache).unwrap_err();
    match &err {
        Error::HashMismatch {
            expected, actual, ..
        } => {
            assert_eq!(expected, plugin::CPU.sha256.unwrap());
            assert_ne!(actual, expected);
        }
        other => panic!("expected HashMismatch, got {other:?}"),
    }
    assert!(!plugin::CPU.install_dir(&cache).exists());
    // Without the wheel and without fetching, the error gives the command to run by hand.
    std::fs::remove_file(&wheel).unwrap();
    let err = plugin::ensure_installed(&plugin::CPU, &cache, false).unwrap_err();
    match &err {
        Error::Fetch { command, .. } => {
            assert!(command.starts_with("python3 -m pip download"), "{command}");
            assert!(command.contains("xla-cpu-pjrt==0.0.1"), "{command}");
        }
        other => panic!("expected Fetch, got {other:?}"),
    }
    std::fs::remove_dir_all(cache).unwrap();
}

#[test]
fn unknown_plugin_names_list_the_choices() {
    let err = plugin::resolve("gpu").unwrap_err();
    assert!(matches!(err, Error::UnknownPlugin(_)), "{err:?}");
}

#[test]
fn a_missing_python_gives_the_command_to_run_by_hand() {
    let cache = scratch_dir("nopython");
    let err = plugin::download(&plugin::CPU, &cache, "/nonexistent/python3").unwrap_err();
    match &err {
        Error::Fetch {
            reason, command, ..
        } => {
            assert!(reason.contains("/nonexistent/python3"), "{reason}");
            assert!(command.contains("pip download") && command.contains("xla-cpu-pjrt==0.0.1"));
        }
        other => panic!("expected Fetch, got {other:?}"),
    }
    // Nothing half-downloaded is left behind.
    let leftovers = std::fs::read_dir(plugin::PluginPackage::wheel_dir(&cache))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(leftovers, 0);
    std::fs::remove_dir_all(cache).unwrap();
}

#[test]
fn byte_sizes_that_overflow_are_invalid_dims() {
    let client = common::cpu_client(1);
    let err = client
        .buffer_from_bytes(&[], DType::F32, &[1 << 61, 2], &client.devices()[0])
        .unwrap_err();
    assert!(matches!(err, Error::InvalidDims(_)), "{err:?}");
}
