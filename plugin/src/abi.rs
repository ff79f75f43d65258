//! The plugin execution-provider ABI of ONNX Runtime, declared from
//! `include/onnxruntime/core/session/onnxruntime_ep_c_api.h` of microsoft/onnxruntime at
//! commits 016cf7e10b97472e7f1b630bb74c55ead6a93e4e and 6d8eef2a63eb311b2c9a76bf0691e64d0b13734f
//! (development snapshots between the 1.23 and 1.24 releases; the 1.31.1 tag itself was not
//! retrievable here). The layouts below are the API-23 layouts (every member "since 1.23" or
//! older, identical in both snapshots), and every struct we hand to ORT says
//! `ort_version_supported = 23` ([`EP_API_VERSION`]). ORT only ever appends members and checks
//! this version before calling newer ones, so ORT 1.31 treats Bolt as a version-23 plugin.
//! (Declaring the snapshots' "since 1.24" members with version 24 crashed ORT 1.31.1 in
//! `add_provider_for_devices`: the 1.24 release has more factory members than the snapshots.)
//!
//! Every function member of a struct Bolt fills is an `Option`: `None` is the C null pointer
//! (same layout), and members Bolt does not implement stay null so that ORT takes its
//! documented default instead of calling a stub. The `OrtEpApi` table is ORT's own (never
//! null), so its members are plain function pointers.
//!
//! The base `OrtApi` function table comes from `ort-sys` (ORT 1.31 bindings, table declared up
//! to API 23); `ort-sys` leaves the plugin structs opaque, hence this file.

#![allow(non_snake_case, non_camel_case_types, dead_code)]

use ort_sys::{
    c_char, OrtAllocator, OrtApiBase, OrtCompiledModelCompatibility, OrtGraph, OrtHardwareDevice, OrtKernelContext,
    OrtKeyValuePairs, OrtLogger, OrtMemoryInfo, OrtNode, OrtRunOptions, OrtSessionOptions, OrtValue,
};
use std::ffi::c_void;

/// The API version whose struct layouts this file declares (see the module doc).
pub const EP_API_VERSION: u32 = 23;

/// ORT's status pointer (null = success), `#[repr(transparent)]` over `*mut OrtStatus`.
pub type Status = ort_sys::OrtStatusPtr;

// Opaque ORT classes of the EP API.
#[repr(C)]
pub struct OrtEpGraphSupportInfo {
    _p: [u8; 0],
}
#[repr(C)]
pub struct OrtMemoryDevice {
    _p: [u8; 0],
}
#[repr(C)]
pub struct OrtNodeComputeContext {
    _p: [u8; 0],
}
#[repr(C)]
pub struct OrtSyncStream {
    _p: [u8; 0],
}
#[repr(C)]
pub struct OrtKernelRegistry {
    _p: [u8; 0],
}
#[repr(C)]
pub struct OrtEpDevice {
    _p: [u8; 0],
}

/// `OrtEpDataLayout`.
pub const ORT_EP_DATA_LAYOUT_NCHW: i32 = 0;

/// `OrtDataTransferImpl` (since 1.23). Made for the test device ([`crate::host_gpu`]); the
/// reference device uses CPU memory and gets none.
#[repr(C)]
pub struct OrtDataTransferImpl {
    pub ort_version_supported: u32,
    pub Release: Option<unsafe extern "system" fn(this: *mut OrtDataTransferImpl)>,
    pub CanCopy: Option<
        unsafe extern "system" fn(
            this: *const OrtDataTransferImpl,
            src: *const OrtMemoryDevice,
            dst: *const OrtMemoryDevice,
        ) -> bool,
    >,
    pub CopyTensors: Option<
        unsafe extern "system" fn(
            this: *mut OrtDataTransferImpl,
            src: *const *const OrtValue,
            dst: *mut *mut OrtValue,
            streams: *mut *mut OrtSyncStream,
            num_tensors: usize,
        ) -> Status,
    >,
}

/// `OrtSyncNotificationImpl` (since 1.23).
#[repr(C)]
pub struct OrtSyncNotificationImpl {
    pub ort_version_supported: u32,
    pub Release: Option<unsafe extern "system" fn(this: *mut OrtSyncNotificationImpl)>,
    pub Activate: Option<unsafe extern "system" fn(this: *mut OrtSyncNotificationImpl) -> Status>,
    pub WaitOnDevice:
        Option<unsafe extern "system" fn(this: *mut OrtSyncNotificationImpl, consumer: *mut OrtSyncStream) -> Status>,
    pub WaitOnHost: Option<unsafe extern "system" fn(this: *mut OrtSyncNotificationImpl) -> Status>,
}

/// `OrtSyncStreamImpl` (since 1.23). Made for the test device; none on the reference device.
#[repr(C)]
pub struct OrtSyncStreamImpl {
    pub ort_version_supported: u32,
    pub Release: Option<unsafe extern "system" fn(this: *mut OrtSyncStreamImpl)>,
    pub GetHandle: Option<unsafe extern "system" fn(this: *mut OrtSyncStreamImpl) -> *mut c_void>,
    pub CreateNotification: Option<
        unsafe extern "system" fn(this: *mut OrtSyncStreamImpl, out: *mut *mut OrtSyncNotificationImpl) -> Status,
    >,
    pub Flush: Option<unsafe extern "system" fn(this: *mut OrtSyncStreamImpl) -> Status>,
    pub OnSessionRunEnd: Option<unsafe extern "system" fn(this: *mut OrtSyncStreamImpl) -> Status>,
}

/// `OrtNodeFusionOptions` (since 1.23).
#[repr(C)]
pub struct OrtNodeFusionOptions {
    pub ort_version_supported: u32,
    pub drop_constant_initializers: bool,
}

/// `OrtNodeComputeInfo` (since 1.23).
#[repr(C)]
pub struct OrtNodeComputeInfo {
    pub ort_version_supported: u32,
    pub CreateState: Option<
        unsafe extern "system" fn(
            this: *mut OrtNodeComputeInfo,
            ctx: *mut OrtNodeComputeContext,
            state: *mut *mut c_void,
        ) -> Status,
    >,
    pub Compute: Option<
        unsafe extern "system" fn(
            this: *mut OrtNodeComputeInfo,
            state: *mut c_void,
            kernel_context: *mut OrtKernelContext,
        ) -> Status,
    >,
    pub ReleaseState: Option<unsafe extern "system" fn(this: *mut OrtNodeComputeInfo, state: *mut c_void)>,
}

/// `OrtEpApi`: the members up to API 23, in the header's order (a prefix of the table ORT
/// hands out; later members are not used).
#[repr(C)]
pub struct OrtEpApi {
    pub CreateEpDevice: unsafe extern "system" fn(
        factory: *mut OrtEpFactory,
        hardware_device: *const OrtHardwareDevice,
        ep_metadata: *const OrtKeyValuePairs,
        ep_options: *const OrtKeyValuePairs,
        ep_device: *mut *mut OrtEpDevice,
    ) -> Status,
    pub ReleaseEpDevice: unsafe extern "system" fn(device: *mut OrtEpDevice),
    pub EpGraphSupportInfo_AddNodesToFuse: unsafe extern "system" fn(
        info: *mut OrtEpGraphSupportInfo,
        nodes: *const *const OrtNode,
        num_nodes: usize,
        options: *const OrtNodeFusionOptions,
    ) -> Status,
    pub EpGraphSupportInfo_AddSingleNode:
        unsafe extern "system" fn(info: *mut OrtEpGraphSupportInfo, node: *const OrtNode) -> Status,
    pub NodeComputeContext_NodeName: unsafe extern "system" fn(ctx: *const OrtNodeComputeContext) -> *const c_char,
    pub EpDevice_AddAllocatorInfo:
        unsafe extern "system" fn(device: *mut OrtEpDevice, info: *const OrtMemoryInfo) -> Status,
    pub MemoryInfo_GetMemoryDevice: unsafe extern "system" fn(info: *const OrtMemoryInfo) -> *const OrtMemoryDevice,
    pub Value_GetMemoryDevice: unsafe extern "system" fn(value: *const OrtValue) -> *const OrtMemoryDevice,
    pub MemoryDevice_AreEqual: unsafe extern "system" fn(a: *const OrtMemoryDevice, b: *const OrtMemoryDevice) -> bool,
    pub MemoryDevice_GetDeviceType: unsafe extern "system" fn(d: *const OrtMemoryDevice) -> i32,
    pub MemoryDevice_GetMemoryType: unsafe extern "system" fn(d: *const OrtMemoryDevice) -> i32,
    pub MemoryDevice_GetVendorId: unsafe extern "system" fn(d: *const OrtMemoryDevice) -> u32,
    pub MemoryDevice_GetDeviceId: unsafe extern "system" fn(d: *const OrtMemoryDevice) -> u32,
    pub SyncStream_GetImpl: unsafe extern "system" fn(s: *const OrtSyncStream) -> *const OrtSyncStreamImpl,
    pub SyncStream_GetSyncId: unsafe extern "system" fn(s: *const OrtSyncStream) -> u64,
    pub GetSyncIdForLastWaitOnSyncStream:
        unsafe extern "system" fn(producer: *const OrtSyncStream, consumer: *const OrtSyncStream) -> u64,
}

/// `OrtEp`, API-23 layout.
#[repr(C)]
pub struct OrtEp {
    pub ort_version_supported: u32,
    pub GetName: Option<unsafe extern "system" fn(this: *const OrtEp) -> *const c_char>,
    pub GetCapability: Option<
        unsafe extern "system" fn(this: *mut OrtEp, graph: *const OrtGraph, info: *mut OrtEpGraphSupportInfo) -> Status,
    >,
    pub Compile: Option<
        unsafe extern "system" fn(
            this: *mut OrtEp,
            graphs: *const *const OrtGraph,
            fused_nodes: *const *const OrtNode,
            count: usize,
            node_compute_infos: *mut *mut OrtNodeComputeInfo,
            ep_context_nodes: *mut *mut OrtNode,
        ) -> Status,
    >,
    pub ReleaseNodeComputeInfos:
        Option<unsafe extern "system" fn(this: *mut OrtEp, infos: *mut *mut OrtNodeComputeInfo, num: usize)>,
    pub GetPreferredDataLayout: Option<unsafe extern "system" fn(this: *mut OrtEp, layout: *mut i32) -> Status>,
    pub ShouldConvertDataLayoutForOp: Option<
        unsafe extern "system" fn(
            this: *mut OrtEp,
            domain: *const c_char,
            op_type: *const c_char,
            target_layout: i32,
            should_convert: *mut i32,
        ) -> Status,
    >,
    pub SetDynamicOptions: Option<
        unsafe extern "system" fn(
            this: *mut OrtEp,
            keys: *const *const c_char,
            values: *const *const c_char,
            num: usize,
        ) -> Status,
    >,
    pub OnRunStart: Option<unsafe extern "system" fn(this: *mut OrtEp, run_options: *const OrtRunOptions) -> Status>,
    pub OnRunEnd: Option<
        unsafe extern "system" fn(this: *mut OrtEp, run_options: *const OrtRunOptions, sync_stream: bool) -> Status,
    >,
    pub CreateAllocator: Option<
        unsafe extern "system" fn(
            this: *mut OrtEp,
            memory_info: *const OrtMemoryInfo,
            allocator: *mut *mut OrtAllocator,
        ) -> Status,
    >,
    pub CreateSyncStreamForDevice: Option<
        unsafe extern "system" fn(
            this: *mut OrtEp,
            memory_device: *const OrtMemoryDevice,
            stream: *mut *mut OrtSyncStreamImpl,
        ) -> Status,
    >,
    pub GetCompiledModelCompatibilityInfo:
        Option<unsafe extern "system" fn(this: *mut OrtEp, graph: *const OrtGraph) -> *const c_char>,
}

/// `OrtEpFactory`, API-23 layout.
#[repr(C)]
pub struct OrtEpFactory {
    pub ort_version_supported: u32,
    pub GetName: Option<unsafe extern "system" fn(this: *const OrtEpFactory) -> *const c_char>,
    pub GetVendor: Option<unsafe extern "system" fn(this: *const OrtEpFactory) -> *const c_char>,
    pub GetSupportedDevices: Option<
        unsafe extern "system" fn(
            this: *mut OrtEpFactory,
            devices: *const *const OrtHardwareDevice,
            num_devices: usize,
            ep_devices: *mut *mut OrtEpDevice,
            max_ep_devices: usize,
            num_ep_devices: *mut usize,
        ) -> Status,
    >,
    pub CreateEp: Option<
        unsafe extern "system" fn(
            this: *mut OrtEpFactory,
            devices: *const *const OrtHardwareDevice,
            ep_metadata: *const *const OrtKeyValuePairs,
            num_devices: usize,
            session_options: *const OrtSessionOptions,
            logger: *const OrtLogger,
            ep: *mut *mut OrtEp,
        ) -> Status,
    >,
    pub ReleaseEp: Option<unsafe extern "system" fn(this: *mut OrtEpFactory, ep: *mut OrtEp)>,
    pub GetVendorId: Option<unsafe extern "system" fn(this: *const OrtEpFactory) -> u32>,
    pub GetVersion: Option<unsafe extern "system" fn(this: *const OrtEpFactory) -> *const c_char>,
    pub ValidateCompiledModelCompatibilityInfo: Option<
        unsafe extern "system" fn(
            this: *mut OrtEpFactory,
            devices: *const *const OrtHardwareDevice,
            num_devices: usize,
            compatibility_info: *const c_char,
            out: *mut OrtCompiledModelCompatibility,
        ) -> Status,
    >,
    pub CreateAllocator: Option<
        unsafe extern "system" fn(
            this: *mut OrtEpFactory,
            memory_info: *const OrtMemoryInfo,
            allocator_options: *const OrtKeyValuePairs,
            allocator: *mut *mut OrtAllocator,
        ) -> Status,
    >,
    pub ReleaseAllocator: Option<unsafe extern "system" fn(this: *mut OrtEpFactory, allocator: *mut OrtAllocator)>,
    pub CreateDataTransfer: Option<
        unsafe extern "system" fn(this: *mut OrtEpFactory, data_transfer: *mut *mut OrtDataTransferImpl) -> Status,
    >,
    pub IsStreamAware: Option<unsafe extern "system" fn(this: *const OrtEpFactory) -> bool>,
    pub CreateSyncStreamForDevice: Option<
        unsafe extern "system" fn(
            this: *mut OrtEpFactory,
            memory_device: *const OrtMemoryDevice,
            stream_options: *const OrtKeyValuePairs,
            stream: *mut *mut OrtSyncStreamImpl,
        ) -> Status,
    >,
}

/// `CreateEpApiFactoriesFn`, for reference (the exported `CreateEpFactories` has this type).
pub type CreateEpApiFactoriesFn = unsafe extern "system" fn(
    registered_name: *const c_char,
    api_base: *const OrtApiBase,
    logger: *const OrtLogger,
    factories: *mut *mut OrtEpFactory,
    max_factories: usize,
    num_factories: *mut usize,
) -> Status;
