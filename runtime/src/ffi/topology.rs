//! The argument structs of topologies (a set of devices described without a client) and of
//! the client-less compile against one; split from the rest of the mirror only to keep files
//! short. Same rules as the parent module: field names follow `pjrt_c_api.h`, no logic.
#![allow(
    non_camel_case_types,
    non_snake_case,
    reason = "names mirror pjrt_c_api.h so each item can be found in the header"
)]

use std::ffi::c_char;

use super::{
    PJRT_Client, PJRT_DeviceDescription, PJRT_Executable, PJRT_Extension_Base, PJRT_NamedValue,
    PJRT_Program, PJRT_TopologyDescription,
};

#[repr(C)]
#[derive(Debug)]
pub struct PJRT_TopologyDescription_Create_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub topology_name: *const c_char,
    pub topology_name_size: usize,
    pub create_options: *const PJRT_NamedValue,
    pub num_options: usize,
    pub topology: *mut PJRT_TopologyDescription,
}

#[repr(C)]
#[derive(Debug)]
pub struct PJRT_TopologyDescription_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub topology: *mut PJRT_TopologyDescription,
}

#[repr(C)]
#[derive(Debug)]
pub struct PJRT_TopologyDescription_PlatformName_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub topology: *mut PJRT_TopologyDescription,
    pub platform_name: *const c_char,
    pub platform_name_size: usize,
}

#[repr(C)]
#[derive(Debug)]
pub struct PJRT_TopologyDescription_PlatformVersion_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub topology: *mut PJRT_TopologyDescription,
    pub platform_version: *const c_char,
    pub platform_version_size: usize,
}

#[repr(C)]
#[derive(Debug)]
pub struct PJRT_TopologyDescription_GetDeviceDescriptions_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub topology: *mut PJRT_TopologyDescription,
    pub descriptions: *const *mut PJRT_DeviceDescription,
    pub num_descriptions: usize,
}

#[repr(C)]
#[derive(Debug)]
pub struct PJRT_TopologyDescription_Attributes_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub topology: *mut PJRT_TopologyDescription,
    pub attributes: *const PJRT_NamedValue,
    pub num_attributes: usize,
}

#[repr(C)]
#[derive(Debug)]
pub struct PJRT_DeviceDescription_Attributes_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device_description: *mut PJRT_DeviceDescription,
    pub num_attributes: usize,
    pub attributes: *const PJRT_NamedValue,
}

#[repr(C)]
#[derive(Debug)]
pub struct PJRT_Compile_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub topology: *const PJRT_TopologyDescription,
    pub program: *const PJRT_Program,
    pub compile_options: *const c_char,
    pub compile_options_size: usize,
    pub client: *mut PJRT_Client,
    pub executable: *mut PJRT_Executable,
}
