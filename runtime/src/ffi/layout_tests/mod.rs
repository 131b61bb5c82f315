//! The `#[repr(C)]` structs of [`crate::ffi`] are written by hand, and the plugin
//! reads and writes them through the layout of `pjrt_c_api.h`. Nothing in Rust ties the two
//! together: a field skipped, reordered or given the wrong width still compiles, and then the
//! plugin reads garbage. This test compiles a C program against the header that ships in the
//! CPU plugin wheel and compares, field by field, `offset_of!`/`size_of` with the C compiler's
//! `offsetof`/`sizeof`, `Args::struct_size()` with the header's `*_STRUCT_SIZE`, and the enum
//! constants with the header's values.
//!
//! The structs and their fields are listed once, in [`layout_table!`]; the Rust values and the
//! C program both come from that list, and `coverage::table_covers_ffi_module` checks it against
//! the source of every file of `ffi/` so that a struct or field added there cannot be left out.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::ffi;
use crate::plugin;

mod coverage;

/// One number computed on both sides.
#[derive(Debug)]
struct Check {
    /// What is compared, for the failure message.
    what: String,
    /// The value on the Rust side.
    rust: i64,
    /// A C expression of the same value, printed by the generated program.
    c_expr: String,
}

/// One struct of the table, as data for `table_covers_ffi_module`.
#[derive(Debug)]
struct Entry {
    rust: &'static str,
    has_args_impl: bool,
    fields: Vec<&'static str>,
}

fn to_i64(value: usize) -> i64 {
    i64::try_from(value).expect("a size or offset fits in i64")
}

/// Size of the field a projection closure points at.
fn field_size<T, F>(_: impl FnOnce(&T) -> &F) -> usize {
    std::mem::size_of::<F>()
}

/// The C name of a field: the Rust name unless the table gives one.
macro_rules! c_field {
    ($field:ident) => {
        stringify!($field)
    };
    ($field:ident $c_name:literal) => {
        $c_name
    };
}

/// The whole-struct checks, by kind of struct.
macro_rules! size_checks {
    // An argument struct: `sizeof` and `PJRT_STRUCT_SIZE` (via `Args::struct_size`).
    (args, $checks:ident, $rust:ident, $c:ident) => {
        $checks.push(Check {
            what: format!("{} (C {}): sizeof", stringify!($rust), stringify!($c)),
            rust: to_i64(std::mem::size_of::<ffi::$rust>()),
            c_expr: format!("sizeof({})", stringify!($c)),
        });
        $checks.push(Check {
            what: format!("{} (C {}): struct_size", stringify!($rust), stringify!($c)),
            rust: to_i64(<ffi::$rust as ffi::Args>::struct_size()),
            c_expr: format!("{}_STRUCT_SIZE", stringify!($c)),
        });
    };
    // A struct without an `Args` impl: `sizeof` only.
    (plain, $checks:ident, $rust:ident, $c:ident) => {
        $checks.push(Check {
            what: format!("{} (C {}): sizeof", stringify!($rust), stringify!($c)),
            rust: to_i64(std::mem::size_of::<ffi::$rust>()),
            c_expr: format!("sizeof({})", stringify!($c)),
        });
    };
    // A leading part of the C struct: the Rust struct ends where C field `$next` begins.
    ((prefix_until $next:ident), $checks:ident, $rust:ident, $c:ident) => {
        $checks.push(Check {
            what: format!(
                "{} (C {}): size_of vs offsetof({})",
                stringify!($rust),
                stringify!($c),
                stringify!($next)
            ),
            rust: to_i64(std::mem::size_of::<ffi::$rust>()),
            c_expr: format!("offsetof({}, {})", stringify!($c), stringify!($next)),
        });
    };
}

/// The checks of one struct of the table, against each C struct it stands for.
macro_rules! struct_checks {
    ($checks:ident, $kind:tt, $rust:ident, [$($c:ident),+], $fields:tt) => {
        $(
            size_checks!($kind, $checks, $rust, $c);
            field_checks!($checks, $rust, $c, $fields);
        )+
    };
}

/// Offset and size of every field of Rust struct `$rust` against C struct `$c`.
macro_rules! field_checks {
    ($checks:ident, $rust:ident, $c:ident, [$($field:ident $(= $c_name:literal)?),*]) => {
        $(
            $checks.push(Check {
                what: format!(
                    "{}.{} (C {}.{}): offset",
                    stringify!($rust),
                    stringify!($field),
                    stringify!($c),
                    c_field!($field $($c_name)?)
                ),
                rust: to_i64(std::mem::offset_of!(ffi::$rust, $field)),
                c_expr: format!("offsetof({}, {})", stringify!($c), c_field!($field $($c_name)?)),
            });
            $checks.push(Check {
                what: format!(
                    "{}.{} (C {}.{}): size",
                    stringify!($rust),
                    stringify!($field),
                    stringify!($c),
                    c_field!($field $($c_name)?)
                ),
                rust: to_i64(field_size(|s: &ffi::$rust| &s.$field)),
                c_expr: format!(
                    "sizeof((({}*)0)->{})",
                    stringify!($c),
                    c_field!($field $($c_name)?)
                ),
            });
        )*
    };
}

macro_rules! has_args_impl {
    (args) => {
        true
    };
    ($other:tt) => {
        false
    };
}

/// The table. Each struct line: kind, Rust name, `=>` the C struct(s) it stands for, then its
/// fields in declaration order, each optionally `= "c_name"` where the header spells it
/// otherwise. `consts` lists the enum constants. Generates `checks()` and `table()`.
macro_rules! layout_table {
    (
        structs {
            $(
                $kind:tt $rust:ident => [$($c:ident),+ $(,)?] {
                    $($field:ident $(= $c_name:literal)?),* $(,)?
                }
            )*
        }
        consts { $($constant:ident),* $(,)? }
    ) => {
        fn checks() -> Vec<Check> {
            let mut checks = Vec::new();
            $(
                struct_checks!(checks, $kind, $rust, [$($c),+], [$($field $(= $c_name)?),*]);
            )*
            $(
                checks.push(Check {
                    what: format!("constant {}", stringify!($constant)),
                    rust: i64::from(ffi::$constant),
                    c_expr: stringify!($constant).to_owned(),
                });
            )*
            checks
        }

        fn table() -> Vec<Entry> {
            vec![$(
                Entry {
                    rust: stringify!($rust),
                    has_args_impl: has_args_impl!($kind),
                    fields: vec![$(stringify!($field)),*],
                },
            )*]
        }
    };
}

layout_table! {
    structs {
        plain PJRT_Extension_Base => [PJRT_Extension_Base] {
            struct_size, type_ = "type", next,
        }
        args PJRT_Api_Version => [PJRT_Api_Version] {
            struct_size, extension_start, major_version, minor_version,
        }
        args PJRT_Error_Destroy_Args => [PJRT_Error_Destroy_Args] {
            struct_size, extension_start, error,
        }
        args PJRT_Error_Message_Args => [PJRT_Error_Message_Args] {
            struct_size, extension_start, error, message, message_size,
        }
        args PJRT_Error_GetCode_Args => [PJRT_Error_GetCode_Args] {
            struct_size, extension_start, error, code,
        }
        args PJRT_NamedValue => [PJRT_NamedValue] {
            struct_size, extension_start, name, name_size, type_ = "type",
            value = "int64_value", value_size,
        }
        args PJRT_Plugin_Initialize_Args => [PJRT_Plugin_Initialize_Args] {
            struct_size, extension_start,
        }
        args PJRT_Event_Args => [PJRT_Event_Await_Args, PJRT_Event_Destroy_Args] {
            struct_size, extension_start, event,
        }
        args PJRT_Event_OnReady_Args => [PJRT_Event_OnReady_Args] {
            struct_size, extension_start, event, callback, user_arg,
        }
        args PJRT_Client_Create_Args => [PJRT_Client_Create_Args] {
            struct_size, extension_start, create_options, num_options, kv_get_callback,
            kv_get_user_arg, kv_put_callback, kv_put_user_arg, client, kv_try_get_callback,
            kv_try_get_user_arg,
        }
        args PJRT_Client_Destroy_Args => [PJRT_Client_Destroy_Args] {
            struct_size, extension_start, client,
        }
        args PJRT_Client_PlatformName_Args => [PJRT_Client_PlatformName_Args] {
            struct_size, extension_start, client, platform_name, platform_name_size,
        }
        args PJRT_Client_AddressableDevices_Args => [PJRT_Client_AddressableDevices_Args] {
            struct_size, extension_start, client, addressable_devices, num_addressable_devices,
        }
        args PJRT_Program => [PJRT_Program] {
            struct_size, extension_start, code, code_size, format, format_size,
        }
        args PJRT_Client_Compile_Args => [PJRT_Client_Compile_Args] {
            struct_size, extension_start, client, program, compile_options,
            compile_options_size, executable,
        }
        args PJRT_Client_BufferFromHostBuffer_Args => [PJRT_Client_BufferFromHostBuffer_Args] {
            struct_size, extension_start, client, data, type_ = "type", dims, num_dims,
            byte_strides, num_byte_strides, host_buffer_semantics, device, memory,
            device_layout, done_with_host_buffer, buffer,
        }
        args PJRT_Device_GetDescription_Args => [PJRT_Device_GetDescription_Args] {
            struct_size, extension_start, device, device_description,
        }
        args PJRT_Device_MemoryStats_Args => [PJRT_Device_MemoryStats_Args] {
            struct_size, extension_start, device, bytes_in_use, peak_bytes_in_use,
            peak_bytes_in_use_is_set, num_allocs, num_allocs_is_set, largest_alloc_size,
            largest_alloc_size_is_set, bytes_limit, bytes_limit_is_set, bytes_reserved,
            bytes_reserved_is_set, peak_bytes_reserved, peak_bytes_reserved_is_set,
            bytes_reservable_limit, bytes_reservable_limit_is_set, largest_free_block_bytes,
            largest_free_block_bytes_is_set, pool_bytes, pool_bytes_is_set, peak_pool_bytes,
            peak_pool_bytes_is_set,
        }
        args PJRT_DeviceDescription_Id_Args => [PJRT_DeviceDescription_Id_Args] {
            struct_size, extension_start, device_description, id,
        }
        args PJRT_DeviceDescription_Kind_Args => [PJRT_DeviceDescription_Kind_Args] {
            struct_size, extension_start, device_description, device_kind, device_kind_size,
        }
        args PJRT_Executable_Destroy_Args => [PJRT_Executable_Destroy_Args] {
            struct_size, extension_start, executable,
        }
        args PJRT_Executable_NumOutputs_Args => [PJRT_Executable_NumOutputs_Args] {
            struct_size, extension_start, executable, num_outputs,
        }
        args PJRT_Executable_OutputElementTypes_Args => [PJRT_Executable_OutputElementTypes_Args] {
            struct_size, extension_start, executable, output_types, num_output_types,
        }
        args PJRT_Executable_OutputDimensions_Args => [PJRT_Executable_OutputDimensions_Args] {
            struct_size, extension_start, executable, num_outputs, dims, dim_sizes,
        }
        args PJRT_Executable_GetCompiledMemoryStats_Args
            => [PJRT_Executable_GetCompiledMemoryStats_Args] {
            struct_size, extension_start, executable, generated_code_size_in_bytes,
            argument_size_in_bytes, output_size_in_bytes, alias_size_in_bytes,
            temp_size_in_bytes, host_generated_code_size_in_bytes, host_argument_size_in_bytes,
            host_output_size_in_bytes, host_alias_size_in_bytes, host_temp_size_in_bytes,
            peak_memory_in_bytes,
        }
        args PJRT_LoadedExecutable_Destroy_Args => [PJRT_LoadedExecutable_Destroy_Args] {
            struct_size, extension_start, executable,
        }
        args PJRT_LoadedExecutable_GetExecutable_Args
            => [PJRT_LoadedExecutable_GetExecutable_Args] {
            struct_size, extension_start, loaded_executable, executable,
        }
        args PJRT_LoadedExecutable_AddressableDevices_Args
            => [PJRT_LoadedExecutable_AddressableDevices_Args] {
            struct_size, extension_start, executable, addressable_devices,
            num_addressable_devices,
        }
        args PJRT_ExecuteOptions => [PJRT_ExecuteOptions] {
            struct_size, extension_start, send_callbacks, recv_callbacks, num_send_ops,
            num_recv_ops, launch_id, non_donatable_input_indices,
            num_non_donatable_input_indices, context, call_location, num_tasks, task_ids,
            incarnation_ids,
        }
        args PJRT_LoadedExecutable_Execute_Args => [PJRT_LoadedExecutable_Execute_Args] {
            struct_size, extension_start, executable, options, argument_lists, num_devices,
            num_args, output_lists, device_complete_events, execute_device,
        }
        args PJRT_Buffer_Destroy_Args => [PJRT_Buffer_Destroy_Args] {
            struct_size, extension_start, buffer,
        }
        args PJRT_Buffer_ElementType_Args => [PJRT_Buffer_ElementType_Args] {
            struct_size, extension_start, buffer, type_ = "type",
        }
        args PJRT_Buffer_Dimensions_Args => [PJRT_Buffer_Dimensions_Args] {
            struct_size, extension_start, buffer, dims, num_dims,
        }
        args PJRT_Buffer_IsDeleted_Args => [PJRT_Buffer_IsDeleted_Args] {
            struct_size, extension_start, buffer, is_deleted,
        }
        args PJRT_Executable_OptimizedProgram_Args
            => [PJRT_Executable_OptimizedProgram_Args] {
            struct_size, extension_start, executable, program,
        }
        args PJRT_Executable_Serialize_Args => [PJRT_Executable_Serialize_Args] {
            struct_size, extension_start, executable, serialized_bytes, serialized_bytes_size,
            serialized_executable, serialized_executable_deleter,
        }
        args PJRT_Executable_DeserializeAndLoad_Args
            => [PJRT_Executable_DeserializeAndLoad_Args] {
            struct_size, extension_start, client, serialized_executable,
            serialized_executable_size, loaded_executable, overridden_serialized_compile_options,
            overridden_serialized_compile_options_size,
        }
        args PJRT_Client_PlatformVersion_Args => [PJRT_Client_PlatformVersion_Args] {
            struct_size, extension_start, client, platform_version, platform_version_size,
        }
        args PJRT_Buffer_ToHostBuffer_Args => [PJRT_Buffer_ToHostBuffer_Args] {
            struct_size, extension_start, src, host_layout, dst, dst_size, event,
        }
        args PJRT_TopologyDescription_Create_Args => [PJRT_TopologyDescription_Create_Args] {
            struct_size, extension_start, topology_name, topology_name_size, create_options,
            num_options, topology,
        }
        args PJRT_TopologyDescription_Destroy_Args => [PJRT_TopologyDescription_Destroy_Args] {
            struct_size, extension_start, topology,
        }
        args PJRT_TopologyDescription_PlatformName_Args
            => [PJRT_TopologyDescription_PlatformName_Args] {
            struct_size, extension_start, topology, platform_name, platform_name_size,
        }
        args PJRT_TopologyDescription_PlatformVersion_Args
            => [PJRT_TopologyDescription_PlatformVersion_Args] {
            struct_size, extension_start, topology, platform_version, platform_version_size,
        }
        args PJRT_TopologyDescription_GetDeviceDescriptions_Args
            => [PJRT_TopologyDescription_GetDeviceDescriptions_Args] {
            struct_size, extension_start, topology, descriptions, num_descriptions,
        }
        args PJRT_TopologyDescription_Attributes_Args
            => [PJRT_TopologyDescription_Attributes_Args] {
            struct_size, extension_start, topology, attributes, num_attributes,
        }
        args PJRT_DeviceDescription_Attributes_Args => [PJRT_DeviceDescription_Attributes_Args] {
            struct_size, extension_start, device_description, num_attributes, attributes,
        }
        args PJRT_Compile_Args => [PJRT_Compile_Args] {
            struct_size, extension_start, topology, program, compile_options,
            compile_options_size, client, executable,
        }
        (prefix_until PJRT_Memory_Kind_Id) PJRT_Api => [PJRT_Api] {
            struct_size, extension_start, pjrt_api_version,
            PJRT_Error_Destroy, PJRT_Error_Message, PJRT_Error_GetCode,
            PJRT_Plugin_Initialize, PJRT_Plugin_Attributes,
            PJRT_Event_Destroy, PJRT_Event_IsReady, PJRT_Event_Error, PJRT_Event_Await,
            PJRT_Event_OnReady,
            PJRT_Client_Create, PJRT_Client_Destroy, PJRT_Client_PlatformName,
            PJRT_Client_ProcessIndex, PJRT_Client_PlatformVersion, PJRT_Client_Devices,
            PJRT_Client_AddressableDevices, PJRT_Client_LookupDevice,
            PJRT_Client_LookupAddressableDevice, PJRT_Client_AddressableMemories,
            PJRT_Client_Compile, PJRT_Client_DefaultDeviceAssignment,
            PJRT_Client_BufferFromHostBuffer,
            PJRT_DeviceDescription_Id, PJRT_DeviceDescription_ProcessIndex,
            PJRT_DeviceDescription_Attributes, PJRT_DeviceDescription_Kind,
            PJRT_DeviceDescription_DebugString, PJRT_DeviceDescription_ToString,
            PJRT_Device_GetDescription, PJRT_Device_IsAddressable, PJRT_Device_LocalHardwareId,
            PJRT_Device_AddressableMemories, PJRT_Device_DefaultMemory, PJRT_Device_MemoryStats,
            PJRT_Memory_Id, PJRT_Memory_Kind, PJRT_Memory_DebugString, PJRT_Memory_ToString,
            PJRT_Memory_AddressableByDevices,
            PJRT_Executable_Destroy, PJRT_Executable_Name, PJRT_Executable_NumReplicas,
            PJRT_Executable_NumPartitions, PJRT_Executable_NumOutputs,
            PJRT_Executable_SizeOfGeneratedCodeInBytes, PJRT_Executable_GetCostAnalysis,
            PJRT_Executable_OutputMemoryKinds, PJRT_Executable_OptimizedProgram,
            PJRT_Executable_Serialize,
            PJRT_LoadedExecutable_Destroy, PJRT_LoadedExecutable_GetExecutable,
            PJRT_LoadedExecutable_AddressableDevices, PJRT_LoadedExecutable_Delete,
            PJRT_LoadedExecutable_IsDeleted, PJRT_LoadedExecutable_Execute,
            PJRT_Executable_DeserializeAndLoad, PJRT_LoadedExecutable_Fingerprint,
            PJRT_Buffer_Destroy, PJRT_Buffer_ElementType, PJRT_Buffer_Dimensions,
            PJRT_Buffer_UnpaddedDimensions, PJRT_Buffer_DynamicDimensionIndices,
            PJRT_Buffer_GetMemoryLayout, PJRT_Buffer_OnDeviceSizeInBytes, PJRT_Buffer_Device,
            PJRT_Buffer_Memory, PJRT_Buffer_Delete, PJRT_Buffer_IsDeleted,
            PJRT_Buffer_CopyToDevice, PJRT_Buffer_ToHostBuffer, PJRT_Buffer_IsOnCpu,
            PJRT_Buffer_ReadyEvent, PJRT_Buffer_UnsafePointer,
            PJRT_Buffer_IncreaseExternalReferenceCount,
            PJRT_Buffer_DecreaseExternalReferenceCount,
            PJRT_Buffer_OpaqueDeviceMemoryDataPointer,
            PJRT_CopyToDeviceStream_Destroy, PJRT_CopyToDeviceStream_AddChunk,
            PJRT_CopyToDeviceStream_TotalBytes, PJRT_CopyToDeviceStream_GranuleSize,
            PJRT_CopyToDeviceStream_CurrentBytes,
            PJRT_TopologyDescription_Create, PJRT_TopologyDescription_Destroy,
            PJRT_TopologyDescription_PlatformName, PJRT_TopologyDescription_PlatformVersion,
            PJRT_TopologyDescription_GetDeviceDescriptions, PJRT_TopologyDescription_Serialize,
            PJRT_TopologyDescription_Attributes,
            PJRT_Compile,
            PJRT_Executable_OutputElementTypes, PJRT_Executable_OutputDimensions,
            PJRT_Buffer_CopyToMemory, PJRT_Client_CreateViewOfDeviceBuffer,
            PJRT_Executable_Fingerprint, PJRT_Client_TopologyDescription,
            PJRT_Executable_GetCompiledMemoryStats,
        }
    }
    consts {
        PJRT_Buffer_Type_INVALID,
        PJRT_Buffer_Type_PRED,
        PJRT_Buffer_Type_S32,
        PJRT_Buffer_Type_S64,
        PJRT_Buffer_Type_F32,
        PJRT_Buffer_Type_F64,
        PJRT_Buffer_Type_BF16,
        PJRT_NamedValue_kString,
        PJRT_NamedValue_kInt64,
        PJRT_NamedValue_kInt64List,
        PJRT_NamedValue_kFloat,
        PJRT_NamedValue_kBool,
        PJRT_HostBufferSemantics_kImmutableOnlyDuringCall,
    }
}

/// The target triple of the machine running the test, for `cc`.
fn host_triple() -> String {
    use std::env::consts::{ARCH, OS};
    match OS {
        "linux" => format!("{ARCH}-unknown-linux-gnu"),
        "macos" => format!("{ARCH}-apple-darwin"),
        other => panic!("layout test: no target triple known for OS {other}"),
    }
}

/// The header that ships in the CPU plugin wheel (installed, or fetched, into the cache).
fn header_path() -> PathBuf {
    let dir = plugin::ensure_installed(&plugin::CPU, &plugin::cache_dir(), true)
        .expect("the CPU plugin can be installed into the cache");
    let header = dir.join(
        plugin::CPU
            .header
            .expect("the CPU package names its header"),
    );
    assert!(
        header.is_file(),
        "{} is not in the installed CPU plugin",
        header.display()
    );
    header
}

/// The C program that reports `index value` for every check, in order (`report.h`).
fn c_program(checks: &[Check]) -> String {
    let mut src = String::from(include_str!("report.h"));
    src.push_str("#include \"pjrt_c_api.h\"\n\nint main(void) {\n");
    for (i, check) in checks.iter().enumerate() {
        src.push_str(&format!("  REPORT({i}, {});\n", check.c_expr));
    }
    src.push_str("  return 0;\n}\n");
    src
}

/// A fresh directory for the C source and executable.
fn scratch_dir() -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!("stackscan-layout-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("the scratch directory can be created");
    dir
}

/// Compiles and runs the C program; returns the value it printed for each check index.
fn run_c(src: &str, header_dir: &Path, dir: &Path) -> BTreeMap<usize, i64> {
    let triple = host_triple();
    let compiler = cc::Build::new()
        .opt_level(0)
        .host(&triple)
        .target(&triple)
        .cargo_metadata(false)
        .include(header_dir)
        .try_get_compiler()
        .expect("a C compiler is available");
    let c_file = dir.join("layout.c");
    let exe = dir.join("layout");
    std::fs::write(&c_file, src).expect("the C source can be written");
    let out = compiler
        .to_command()
        .arg(&c_file)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("the C compiler can be started");
    assert!(
        out.status.success(),
        "compiling {} failed:\n{}",
        c_file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe)
        .output()
        .expect("the compiled C program can be started");
    assert!(run.status.success(), "{} failed", exe.display());
    let stdout = String::from_utf8(run.stdout).expect("the C program prints UTF-8");
    stdout
        .lines()
        .map(|line| {
            let (index, value) = line
                .split_once(' ')
                .unwrap_or_else(|| panic!("unexpected line from the C program: {line:?}"));
            (
                index.parse().expect("the C program prints an index"),
                value.parse().expect("the C program prints an integer"),
            )
        })
        .collect()
}

#[test]
fn ffi_layout_matches_pjrt_c_api_header() {
    let header = header_path();
    let header_dir = header.parent().expect("the header has a parent directory");
    let checks = checks();
    let dir = scratch_dir();
    let c_values = run_c(&c_program(&checks), header_dir, &dir);
    // Best effort: a leftover scratch directory is harmless.
    let _ = std::fs::remove_dir_all(&dir);

    let mismatches: Vec<String> = checks
        .iter()
        .enumerate()
        .filter_map(|(i, check)| match c_values.get(&i) {
            Some(&c) if c == check.rust => None,
            Some(&c) => Some(format!("{}: Rust {}, C {c}", check.what, check.rust)),
            None => Some(format!(
                "{}: Rust {}, C printed nothing",
                check.what, check.rust
            )),
        })
        .collect();
    assert!(
        mismatches.is_empty(),
        "{} of {} layout checks against {} differ:\n  {}",
        mismatches.len(),
        checks.len(),
        header.display(),
        mismatches.join("\n  ")
    );
    // Every field's offset and every struct's size were among them.
    let fields: usize = table().iter().map(|entry| entry.fields.len()).sum();
    assert!(
        checks.len() >= fields + table().len(),
        "{} checks for {} structs of {fields} fields",
        checks.len(),
        table().len()
    );
}
