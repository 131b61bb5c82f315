//! Raw `#[repr(C)]` mirror of the parts of `pjrt_c_api.h` (PJRT C API 0.81) that stackscan
//! calls. No logic lives here: the safe layer in `crate::pjrt` fills these structs and checks
//! every result. Field names follow the header so that the layout test
//! (`layout_tests`, inside this private module) can compare `offset_of!` against the C compiler field by field.
//!
//! Enums of the header are plain `c_int` here: a plugin may return a value this binding does
//! not know, and a Rust `enum` holding it would be undefined behaviour.
#![allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    reason = "names mirror pjrt_c_api.h so each item can be found in the header"
)]

use std::ffi::{c_char, c_int, c_void};

mod executable;
#[cfg(test)]
mod layout_tests;
mod topology;
pub use executable::*;
pub use topology::*;

/// An argument struct of the API: plain C data (integers, raw pointers, optional function
/// pointers) for which all-zero bytes are a valid value, whose first field is `struct_size`.
///
/// Implemented only in this module, for the structs below.
pub trait Args: Sized + sealed::Sealed {
    /// `PJRT_STRUCT_SIZE(T, last_field)`: the end of the last field this binding knows about
    /// (not `sizeof`, which may add tail padding). The plugin reads no field past it.
    fn struct_size() -> usize;
    /// The `struct_size` field, which the constructor in the safe layer sets.
    fn struct_size_mut(&mut self) -> &mut usize;
}

mod sealed {
    pub trait Sealed {}
}

/// Size of the field a projection closure points at.
fn field_size<T, F>(_: impl FnOnce(&T) -> &F) -> usize {
    std::mem::size_of::<F>()
}

macro_rules! args {
    ($($t:ident => $last:ident),* $(,)?) => {$(
        impl sealed::Sealed for $t {}
        impl Args for $t {
            fn struct_size() -> usize {
                std::mem::offset_of!($t, $last) + field_size(|s: &$t| &s.$last)
            }
            fn struct_size_mut(&mut self) -> &mut usize {
                &mut self.struct_size
            }
        }
    )*};
}

/// Opaque handles: only ever used behind pointers the plugin hands out.
macro_rules! opaque {
    ($($name:ident),* $(,)?) => {$(
        #[repr(C)]
        #[derive(Debug)]
        pub struct $name {
            _private: [u8; 0],
        }
    )*};
}

opaque!(
    PJRT_Error,
    PJRT_Client,
    PJRT_Device,
    PJRT_DeviceDescription,
    PJRT_Memory,
    PJRT_Buffer,
    PJRT_Event,
    PJRT_Executable,
    PJRT_LoadedExecutable,
    PJRT_ExecuteContext,
    PJRT_SendCallbackInfo,
    PJRT_RecvCallbackInfo,
    PJRT_SerializedExecutable,
    PJRT_TopologyDescription,
);

/// `PJRT_Error_Code`.
pub type PJRT_Error_Code = c_int;
/// `PJRT_Buffer_Type`.
pub type PJRT_Buffer_Type = c_int;
/// `PJRT_NamedValue_Type`.
pub type PJRT_NamedValue_Type = c_int;
/// `PJRT_HostBufferSemantics`.
pub type PJRT_HostBufferSemantics = c_int;

pub const PJRT_Buffer_Type_INVALID: PJRT_Buffer_Type = 0;
pub const PJRT_Buffer_Type_PRED: PJRT_Buffer_Type = 1;
pub const PJRT_Buffer_Type_S32: PJRT_Buffer_Type = 4;
pub const PJRT_Buffer_Type_S64: PJRT_Buffer_Type = 5;
pub const PJRT_Buffer_Type_F32: PJRT_Buffer_Type = 11;
pub const PJRT_Buffer_Type_F64: PJRT_Buffer_Type = 12;
pub const PJRT_Buffer_Type_BF16: PJRT_Buffer_Type = 13;

pub const PJRT_NamedValue_kString: PJRT_NamedValue_Type = 0;
pub const PJRT_NamedValue_kInt64: PJRT_NamedValue_Type = 1;
pub const PJRT_NamedValue_kInt64List: PJRT_NamedValue_Type = 2;
pub const PJRT_NamedValue_kFloat: PJRT_NamedValue_Type = 3;
pub const PJRT_NamedValue_kBool: PJRT_NamedValue_Type = 4;

pub const PJRT_HostBufferSemantics_kImmutableOnlyDuringCall: PJRT_HostBufferSemantics = 0;

/// Every argument struct begins with these two fields.
#[repr(C)]
#[derive(Debug)]
pub struct PJRT_Extension_Base {
    pub struct_size: usize,
    pub type_: c_int,
    pub next: *mut PJRT_Extension_Base,
}

#[repr(C)]
#[derive(Debug)]
pub struct PJRT_Api_Version {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub major_version: c_int,
    pub minor_version: c_int,
}

#[repr(C)]
#[derive(Debug)]
pub struct PJRT_Error_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub error: *mut PJRT_Error,
}

#[repr(C)]
#[derive(Debug)]
pub struct PJRT_Error_Message_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub error: *const PJRT_Error,
    pub message: *const c_char,
    pub message_size: usize,
}

#[repr(C)]
#[derive(Debug)]
pub struct PJRT_Error_GetCode_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub error: *const PJRT_Error,
    pub code: PJRT_Error_Code,
}

/// The anonymous union inside `PJRT_NamedValue`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union PJRT_NamedValue_Value {
    pub string_value: *const c_char,
    pub int64_value: i64,
    pub int64_array_value: *const i64,
    pub float_value: f32,
    pub bool_value: bool,
}

impl std::fmt::Debug for PJRT_NamedValue_Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PJRT_NamedValue_Value { .. }")
    }
}

#[repr(C)]
#[derive(Debug)]
pub struct PJRT_NamedValue {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub name: *const c_char,
    pub name_size: usize,
    pub type_: PJRT_NamedValue_Type,
    pub value: PJRT_NamedValue_Value,
    pub value_size: usize,
}

#[repr(C)]
#[derive(Debug)]
pub struct PJRT_Plugin_Initialize_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
}

/// Shape of `PJRT_Event_Destroy_Args`, `PJRT_Event_Await_Args` and `PJRT_Event_Error_Args`.
#[repr(C)]
#[derive(Debug)]
pub struct PJRT_Event_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub event: *mut PJRT_Event,
}
pub type PJRT_Event_Destroy_Args = PJRT_Event_Args;
pub type PJRT_Event_Await_Args = PJRT_Event_Args;

/// `PJRT_Event_OnReadyCallback`: called once the event is ready, with its error (owned by the
/// callback, which must destroy it) and the caller's `user_arg`.
pub type PJRT_Event_OnReadyCallback =
    unsafe extern "C" fn(error: *mut PJRT_Error, user_arg: *mut c_void);

#[repr(C)]
#[derive(Debug)]
pub struct PJRT_Event_OnReady_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub event: *mut PJRT_Event,
    pub callback: Option<PJRT_Event_OnReadyCallback>,
    pub user_arg: *mut c_void,
}

#[repr(C)]
#[derive(Debug)]
pub struct PJRT_Client_Create_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub create_options: *const PJRT_NamedValue,
    pub num_options: usize,
    pub kv_get_callback: *mut c_void,
    pub kv_get_user_arg: *mut c_void,
    pub kv_put_callback: *mut c_void,
    pub kv_put_user_arg: *mut c_void,
    pub client: *mut PJRT_Client,
    pub kv_try_get_callback: *mut c_void,
    pub kv_try_get_user_arg: *mut c_void,
}

#[repr(C)]
#[derive(Debug)]
pub struct PJRT_Client_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
}

#[repr(C)]
#[derive(Debug)]
pub struct PJRT_Client_PlatformName_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub platform_name: *const c_char,
    pub platform_name_size: usize,
}

#[repr(C)]
#[derive(Debug)]
pub struct PJRT_Client_PlatformVersion_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub platform_version: *const c_char,
    pub platform_version_size: usize,
}

#[repr(C)]
#[derive(Debug)]
pub struct PJRT_Client_AddressableDevices_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub addressable_devices: *const *mut PJRT_Device,
    pub num_addressable_devices: usize,
}

#[repr(C)]
#[derive(Debug)]
pub struct PJRT_Program {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub code: *mut c_char,
    pub code_size: usize,
    pub format: *const c_char,
    pub format_size: usize,
}

#[repr(C)]
#[derive(Debug)]
pub struct PJRT_Client_Compile_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub program: *const PJRT_Program,
    pub compile_options: *const c_char,
    pub compile_options_size: usize,
    pub executable: *mut PJRT_LoadedExecutable,
}

#[repr(C)]
#[derive(Debug)]
pub struct PJRT_Client_BufferFromHostBuffer_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub data: *const c_void,
    pub type_: PJRT_Buffer_Type,
    pub dims: *const i64,
    pub num_dims: usize,
    pub byte_strides: *const i64,
    pub num_byte_strides: usize,
    pub host_buffer_semantics: PJRT_HostBufferSemantics,
    pub device: *mut PJRT_Device,
    pub memory: *mut PJRT_Memory,
    pub device_layout: *mut c_void,
    pub done_with_host_buffer: *mut PJRT_Event,
    pub buffer: *mut PJRT_Buffer,
}

#[repr(C)]
#[derive(Debug)]
pub struct PJRT_Device_GetDescription_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device: *mut PJRT_Device,
    pub device_description: *mut PJRT_DeviceDescription,
}

#[repr(C)]
#[derive(Debug)]
pub struct PJRT_Device_MemoryStats_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device: *mut PJRT_Device,
    pub bytes_in_use: i64,
    pub peak_bytes_in_use: i64,
    pub peak_bytes_in_use_is_set: bool,
    pub num_allocs: i64,
    pub num_allocs_is_set: bool,
    pub largest_alloc_size: i64,
    pub largest_alloc_size_is_set: bool,
    pub bytes_limit: i64,
    pub bytes_limit_is_set: bool,
    pub bytes_reserved: i64,
    pub bytes_reserved_is_set: bool,
    pub peak_bytes_reserved: i64,
    pub peak_bytes_reserved_is_set: bool,
    pub bytes_reservable_limit: i64,
    pub bytes_reservable_limit_is_set: bool,
    pub largest_free_block_bytes: i64,
    pub largest_free_block_bytes_is_set: bool,
    pub pool_bytes: i64,
    pub pool_bytes_is_set: bool,
    pub peak_pool_bytes: i64,
    pub peak_pool_bytes_is_set: bool,
}

#[repr(C)]
#[derive(Debug)]
pub struct PJRT_DeviceDescription_Id_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device_description: *mut PJRT_DeviceDescription,
    pub id: c_int,
}

#[repr(C)]
#[derive(Debug)]
pub struct PJRT_DeviceDescription_Kind_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device_description: *mut PJRT_DeviceDescription,
    pub device_kind: *const c_char,
    pub device_kind_size: usize,
}

args! {
    PJRT_Api_Version => minor_version,
    PJRT_Error_Destroy_Args => error,
    PJRT_Error_Message_Args => message_size,
    PJRT_Error_GetCode_Args => code,
    PJRT_NamedValue => value_size,
    PJRT_Plugin_Initialize_Args => extension_start,
    PJRT_Event_Args => event,
    PJRT_Event_OnReady_Args => user_arg,
    PJRT_Client_Create_Args => kv_try_get_user_arg,
    PJRT_Client_Destroy_Args => client,
    PJRT_Client_PlatformName_Args => platform_name_size,
    PJRT_Client_PlatformVersion_Args => platform_version_size,
    PJRT_Client_AddressableDevices_Args => num_addressable_devices,
    PJRT_Program => format_size,
    PJRT_Client_Compile_Args => executable,
    PJRT_Client_BufferFromHostBuffer_Args => buffer,
    PJRT_Device_GetDescription_Args => device_description,
    PJRT_Device_MemoryStats_Args => peak_pool_bytes_is_set,
    PJRT_DeviceDescription_Id_Args => id,
    PJRT_DeviceDescription_Kind_Args => device_kind_size,
    PJRT_Executable_Destroy_Args => executable,
    PJRT_Executable_NumOutputs_Args => num_outputs,
    PJRT_Executable_OutputElementTypes_Args => num_output_types,
    PJRT_Executable_OutputDimensions_Args => dim_sizes,
    PJRT_Executable_GetCompiledMemoryStats_Args => peak_memory_in_bytes,
    PJRT_Executable_OptimizedProgram_Args => program,
    PJRT_Executable_Serialize_Args => serialized_executable_deleter,
    PJRT_Executable_DeserializeAndLoad_Args => overridden_serialized_compile_options_size,
    PJRT_LoadedExecutable_Destroy_Args => executable,
    PJRT_LoadedExecutable_GetExecutable_Args => executable,
    PJRT_LoadedExecutable_AddressableDevices_Args => num_addressable_devices,
    PJRT_ExecuteOptions => incarnation_ids,
    PJRT_LoadedExecutable_Execute_Args => execute_device,
    PJRT_Buffer_Destroy_Args => buffer,
    PJRT_Buffer_ElementType_Args => type_,
    PJRT_Buffer_Dimensions_Args => num_dims,
    PJRT_Buffer_IsDeleted_Args => is_deleted,
    PJRT_Buffer_ToHostBuffer_Args => event,
    PJRT_TopologyDescription_Create_Args => topology,
    PJRT_TopologyDescription_Destroy_Args => topology,
    PJRT_TopologyDescription_PlatformName_Args => platform_name_size,
    PJRT_TopologyDescription_PlatformVersion_Args => platform_version_size,
    PJRT_TopologyDescription_GetDeviceDescriptions_Args => num_descriptions,
    PJRT_TopologyDescription_Attributes_Args => num_attributes,
    PJRT_DeviceDescription_Attributes_Args => attributes,
    PJRT_Compile_Args => executable,
}

/// A PJRT entry point: every function of the API takes one argument struct and returns an
/// owned error or null.
pub type PjrtFn<A> = unsafe extern "C" fn(args: *mut A) -> *mut PJRT_Error;
/// `PJRT_Error_Destroy` and `PJRT_Error_Message` return nothing.
pub type PjrtVoidFn<A> = unsafe extern "C" fn(args: *mut A);
/// A slot of the function table stackscan does not call; kept so later slots line up.
pub type Unused = Option<unsafe extern "C" fn()>;

/// `PJRT_Api`: the function table `GetPjrtApi` returns. Slots are append-only across minor
/// versions, so a plugin's `struct_size` tells which of them it fills; the safe layer checks
/// it before reading any slot.
#[repr(C)]
#[derive(Debug)]
pub struct PJRT_Api {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub pjrt_api_version: PJRT_Api_Version,

    pub PJRT_Error_Destroy: Option<PjrtVoidFn<PJRT_Error_Destroy_Args>>,
    pub PJRT_Error_Message: Option<PjrtVoidFn<PJRT_Error_Message_Args>>,
    pub PJRT_Error_GetCode: Option<PjrtFn<PJRT_Error_GetCode_Args>>,

    pub PJRT_Plugin_Initialize: Option<PjrtFn<PJRT_Plugin_Initialize_Args>>,
    pub PJRT_Plugin_Attributes: Unused,

    pub PJRT_Event_Destroy: Option<PjrtFn<PJRT_Event_Destroy_Args>>,
    pub PJRT_Event_IsReady: Unused,
    pub PJRT_Event_Error: Unused,
    pub PJRT_Event_Await: Option<PjrtFn<PJRT_Event_Await_Args>>,
    pub PJRT_Event_OnReady: Option<PjrtFn<PJRT_Event_OnReady_Args>>,

    pub PJRT_Client_Create: Option<PjrtFn<PJRT_Client_Create_Args>>,
    pub PJRT_Client_Destroy: Option<PjrtFn<PJRT_Client_Destroy_Args>>,
    pub PJRT_Client_PlatformName: Option<PjrtFn<PJRT_Client_PlatformName_Args>>,
    pub PJRT_Client_ProcessIndex: Unused,
    pub PJRT_Client_PlatformVersion: Option<PjrtFn<PJRT_Client_PlatformVersion_Args>>,
    pub PJRT_Client_Devices: Unused,
    pub PJRT_Client_AddressableDevices: Option<PjrtFn<PJRT_Client_AddressableDevices_Args>>,
    pub PJRT_Client_LookupDevice: Unused,
    pub PJRT_Client_LookupAddressableDevice: Unused,
    pub PJRT_Client_AddressableMemories: Unused,
    pub PJRT_Client_Compile: Option<PjrtFn<PJRT_Client_Compile_Args>>,
    pub PJRT_Client_DefaultDeviceAssignment: Unused,
    pub PJRT_Client_BufferFromHostBuffer: Option<PjrtFn<PJRT_Client_BufferFromHostBuffer_Args>>,

    pub PJRT_DeviceDescription_Id: Option<PjrtFn<PJRT_DeviceDescription_Id_Args>>,
    pub PJRT_DeviceDescription_ProcessIndex: Unused,
    pub PJRT_DeviceDescription_Attributes: Option<PjrtFn<PJRT_DeviceDescription_Attributes_Args>>,
    pub PJRT_DeviceDescription_Kind: Option<PjrtFn<PJRT_DeviceDescription_Kind_Args>>,
    pub PJRT_DeviceDescription_DebugString: Unused,
    pub PJRT_DeviceDescription_ToString: Unused,

    pub PJRT_Device_GetDescription: Option<PjrtFn<PJRT_Device_GetDescription_Args>>,
    pub PJRT_Device_IsAddressable: Unused,
    pub PJRT_Device_LocalHardwareId: Unused,
    pub PJRT_Device_AddressableMemories: Unused,
    pub PJRT_Device_DefaultMemory: Unused,
    pub PJRT_Device_MemoryStats: Option<PjrtFn<PJRT_Device_MemoryStats_Args>>,

    pub PJRT_Memory_Id: Unused,
    pub PJRT_Memory_Kind: Unused,
    pub PJRT_Memory_DebugString: Unused,
    pub PJRT_Memory_ToString: Unused,
    pub PJRT_Memory_AddressableByDevices: Unused,

    pub PJRT_Executable_Destroy: Option<PjrtFn<PJRT_Executable_Destroy_Args>>,
    pub PJRT_Executable_Name: Unused,
    pub PJRT_Executable_NumReplicas: Unused,
    pub PJRT_Executable_NumPartitions: Unused,
    pub PJRT_Executable_NumOutputs: Option<PjrtFn<PJRT_Executable_NumOutputs_Args>>,
    pub PJRT_Executable_SizeOfGeneratedCodeInBytes: Unused,
    pub PJRT_Executable_GetCostAnalysis: Unused,
    pub PJRT_Executable_OutputMemoryKinds: Unused,
    pub PJRT_Executable_OptimizedProgram: Option<PjrtFn<PJRT_Executable_OptimizedProgram_Args>>,
    pub PJRT_Executable_Serialize: Option<PjrtFn<PJRT_Executable_Serialize_Args>>,

    pub PJRT_LoadedExecutable_Destroy: Option<PjrtFn<PJRT_LoadedExecutable_Destroy_Args>>,
    pub PJRT_LoadedExecutable_GetExecutable:
        Option<PjrtFn<PJRT_LoadedExecutable_GetExecutable_Args>>,
    pub PJRT_LoadedExecutable_AddressableDevices:
        Option<PjrtFn<PJRT_LoadedExecutable_AddressableDevices_Args>>,
    pub PJRT_LoadedExecutable_Delete: Unused,
    pub PJRT_LoadedExecutable_IsDeleted: Unused,
    pub PJRT_LoadedExecutable_Execute: Option<PjrtFn<PJRT_LoadedExecutable_Execute_Args>>,
    pub PJRT_Executable_DeserializeAndLoad: Option<PjrtFn<PJRT_Executable_DeserializeAndLoad_Args>>,
    pub PJRT_LoadedExecutable_Fingerprint: Unused,

    pub PJRT_Buffer_Destroy: Option<PjrtFn<PJRT_Buffer_Destroy_Args>>,
    pub PJRT_Buffer_ElementType: Option<PjrtFn<PJRT_Buffer_ElementType_Args>>,
    pub PJRT_Buffer_Dimensions: Option<PjrtFn<PJRT_Buffer_Dimensions_Args>>,
    pub PJRT_Buffer_UnpaddedDimensions: Unused,
    pub PJRT_Buffer_DynamicDimensionIndices: Unused,
    pub PJRT_Buffer_GetMemoryLayout: Unused,
    pub PJRT_Buffer_OnDeviceSizeInBytes: Unused,
    pub PJRT_Buffer_Device: Unused,
    pub PJRT_Buffer_Memory: Unused,
    pub PJRT_Buffer_Delete: Unused,
    pub PJRT_Buffer_IsDeleted: Option<PjrtFn<PJRT_Buffer_IsDeleted_Args>>,
    pub PJRT_Buffer_CopyToDevice: Unused,
    pub PJRT_Buffer_ToHostBuffer: Option<PjrtFn<PJRT_Buffer_ToHostBuffer_Args>>,
    pub PJRT_Buffer_IsOnCpu: Unused,
    pub PJRT_Buffer_ReadyEvent: Unused,
    pub PJRT_Buffer_UnsafePointer: Unused,
    pub PJRT_Buffer_IncreaseExternalReferenceCount: Unused,
    pub PJRT_Buffer_DecreaseExternalReferenceCount: Unused,
    pub PJRT_Buffer_OpaqueDeviceMemoryDataPointer: Unused,

    pub PJRT_CopyToDeviceStream_Destroy: Unused,
    pub PJRT_CopyToDeviceStream_AddChunk: Unused,
    pub PJRT_CopyToDeviceStream_TotalBytes: Unused,
    pub PJRT_CopyToDeviceStream_GranuleSize: Unused,
    pub PJRT_CopyToDeviceStream_CurrentBytes: Unused,

    pub PJRT_TopologyDescription_Create: Option<PjrtFn<PJRT_TopologyDescription_Create_Args>>,
    pub PJRT_TopologyDescription_Destroy: Option<PjrtFn<PJRT_TopologyDescription_Destroy_Args>>,
    pub PJRT_TopologyDescription_PlatformName:
        Option<PjrtFn<PJRT_TopologyDescription_PlatformName_Args>>,
    pub PJRT_TopologyDescription_PlatformVersion:
        Option<PjrtFn<PJRT_TopologyDescription_PlatformVersion_Args>>,
    pub PJRT_TopologyDescription_GetDeviceDescriptions:
        Option<PjrtFn<PJRT_TopologyDescription_GetDeviceDescriptions_Args>>,
    pub PJRT_TopologyDescription_Serialize: Unused,
    pub PJRT_TopologyDescription_Attributes:
        Option<PjrtFn<PJRT_TopologyDescription_Attributes_Args>>,

    pub PJRT_Compile: Option<PjrtFn<PJRT_Compile_Args>>,

    pub PJRT_Executable_OutputElementTypes: Option<PjrtFn<PJRT_Executable_OutputElementTypes_Args>>,
    pub PJRT_Executable_OutputDimensions: Option<PjrtFn<PJRT_Executable_OutputDimensions_Args>>,
    pub PJRT_Buffer_CopyToMemory: Unused,
    pub PJRT_Client_CreateViewOfDeviceBuffer: Unused,
    pub PJRT_Executable_Fingerprint: Unused,
    pub PJRT_Client_TopologyDescription: Unused,
    pub PJRT_Executable_GetCompiledMemoryStats:
        Option<PjrtFn<PJRT_Executable_GetCompiledMemoryStats_Args>>,
}

/// The symbol every PJRT plugin exports.
pub type GetPjrtApiFn = unsafe extern "C" fn() -> *const PJRT_Api;
pub const GET_PJRT_API_SYMBOL: &[u8] = b"GetPjrtApi\0";
