//! Bolt as an ONNX Runtime plugin execution provider.
//!
//! ORT loads this library (`onnxruntime.register_execution_provider_library`), calls
//! [`CreateEpFactories`], and from then on talks to the structs in [`abi`]:
//! - the factory offers one device, the CPU reference device (CPU memory, ORT's CPU
//!   allocator, no data transfer or streams), with EP option `device=reference`; or, when
//!   `BOLT_ORT_TEST_DEVICE=host_gpu` is set, the test device of [`host_gpu`] (host memory
//!   typed as GPU memory, with allocator, data transfer and streams);
//! - GetCapability reads the OrtGraph into Bolt IR, runs Bolt's partitioner and claims every
//!   GEMM/Conv-centric partition as one fused node; all other nodes stay with ORT;
//! - Compile copies each claimed subgraph out of ORT and plans it (`bolt::plan`); compute runs
//!   the plan with Bolt's reference executor, with the shapes of each call.
//!
//! No Rust panic crosses into ORT: every entry point runs under `catch_unwind` and reports
//! failures as an OrtStatus naming the entry point.

pub mod abi;
pub mod api;
pub mod capi;
pub mod cuda;
pub mod ep;
pub mod graph;
pub mod host_gpu;
pub mod options;

use abi::*;
use api::{check, cstr, guard, guard_value, Res};
use ort_sys::{
    c_char, OrtAllocator, OrtApiBase, OrtCompiledModelCompatibility, OrtHardwareDevice, OrtHardwareDeviceType,
    OrtKeyValuePairs, OrtLogger, OrtMemoryInfo, OrtSessionOptions,
};
use std::ffi::CString;
use std::path::Path;

/// The execution provider's name (what ORT reports for the nodes it runs).
pub const EP_NAME: &str = "BoltExecutionProvider";
pub const VENDOR: &str = "Bolt";
/// The oldest ONNX Runtime C API the plugin runs on (ONNX Runtime 1.23: plugin EPs).
const MIN_API_VERSION: u32 = 23;

#[repr(C)]
struct Factory {
    base: OrtEpFactory,
    name: CString,
    vendor: CString,
    version: CString,
    /// The test device's memory info, when `BOLT_ORT_TEST_DEVICE=host_gpu` offers it.
    host_gpu: Option<host_gpu::MemInfo>,
    /// The CUDA devices offered (ordinal and its memory), or why ORT's GPUs are not.
    cuda: Vec<(usize, cuda::MemInfo)>,
    no_cuda: Option<String>,
}

unsafe fn factory<'a>(f: *const OrtEpFactory) -> &'a Factory {
    &*(f as *const Factory)
}

/// ORT's entry point: creates Bolt's one factory.
///
/// # Safety
/// Called by ONNX Runtime with the arguments its plugin ABI specifies.
#[no_mangle]
pub unsafe extern "system" fn CreateEpFactories(
    _registered_name: *const c_char,
    api_base: *const OrtApiBase,
    _default_logger: *const OrtLogger,
    factories: *mut *mut OrtEpFactory,
    max_factories: usize,
    num_factories: *mut usize,
) -> Status {
    let got = std::panic::catch_unwind(|| {
        if api_base.is_null() || factories.is_null() || num_factories.is_null() {
            return Err(None);
        }
        *num_factories = 0;
        // The table is declared up to API 24; members past 23 are used only when the runtime
        // provides them.
        let ort = ((*api_base).GetApi)(MIN_API_VERSION);
        let has_shape_api = !((*api_base).GetApi)(24).is_null();
        if ort.is_null() {
            eprintln!(
                "[bolt-plugin] this ONNX Runtime does not provide C API version {MIN_API_VERSION} (Bolt needs ONNX Runtime >= 1.23)"
            );
            return Err(None);
        }
        let ort = &*ort;
        let ep = (ort.GetEpApi)();
        if ep.is_null() {
            return Err(Some("ONNX Runtime returned no OrtEpApi".to_string()));
        }
        api::init(ort, &*(ep as *const OrtEpApi), has_shape_api);
        if max_factories < 1 {
            return Err(Some("ONNX Runtime left no room for a factory".to_string()));
        }
        *factories = Box::into_raw(new_factory()) as *mut OrtEpFactory;
        *num_factories = 1;
        Ok(())
    });
    match got {
        Ok(Ok(())) | Ok(Err(None)) => Status::default(),
        Ok(Err(Some(msg))) => api::status(ort_sys::OrtErrorCode::ORT_FAIL, &format!("Bolt EP: {msg}")),
        Err(p) => api::status(
            ort_sys::OrtErrorCode::ORT_FAIL,
            &format!("Bolt EP CreateEpFactories: internal error (panic: {})", api::panic_text(&p)),
        ),
    }
}

/// ORT's entry point: releases a factory made by [`CreateEpFactories`].
///
/// # Safety
/// `factory` came from [`CreateEpFactories`] and is not used afterwards.
#[no_mangle]
pub unsafe extern "system" fn ReleaseEpFactory(factory: *mut OrtEpFactory) -> Status {
    guard("ReleaseEpFactory", || {
        if !factory.is_null() {
            drop(Box::from_raw(factory as *mut Factory));
        }
        Ok(())
    })
}

fn new_factory() -> Box<Factory> {
    Box::new(Factory {
        base: OrtEpFactory {
            ort_version_supported: EP_API_VERSION,
            GetName: Some(f_get_name),
            GetVendor: Some(f_get_vendor),
            GetSupportedDevices: Some(f_get_supported_devices),
            CreateEp: Some(f_create_ep),
            ReleaseEp: Some(f_release_ep),
            GetVendorId: Some(f_get_vendor_id),
            GetVersion: Some(f_get_version),
            ValidateCompiledModelCompatibilityInfo: Some(f_validate_compiled_model_compatibility_info),
            CreateAllocator: Some(f_create_allocator),
            ReleaseAllocator: Some(f_release_allocator),
            CreateDataTransfer: Some(f_create_data_transfer),
            IsStreamAware: Some(f_is_stream_aware),
            CreateSyncStreamForDevice: Some(f_create_sync_stream_for_device),
        },
        name: CString::new(EP_NAME).expect("no NUL"),
        vendor: CString::new(VENDOR).expect("no NUL"),
        version: CString::new(env!("CARGO_PKG_VERSION")).expect("no NUL"),
        host_gpu: None,
        cuda: Vec::new(),
        no_cuda: None,
    })
}

unsafe extern "system" fn f_get_name(f: *const OrtEpFactory) -> *const c_char {
    guard_value(std::ptr::null(), || factory(f).name.as_ptr())
}

unsafe extern "system" fn f_get_vendor(f: *const OrtEpFactory) -> *const c_char {
    guard_value(std::ptr::null(), || factory(f).vendor.as_ptr())
}

unsafe extern "system" fn f_get_vendor_id(_f: *const OrtEpFactory) -> u32 {
    0
}

unsafe extern "system" fn f_get_version(f: *const OrtEpFactory) -> *const c_char {
    guard_value(std::ptr::null(), || factory(f).version.as_ptr())
}

/// Key-value pairs for ORT (which copies them).
struct Kvp(*mut OrtKeyValuePairs);

impl Kvp {
    unsafe fn new(pairs: &[(&str, &str)]) -> Kvp {
        let ort = api::api().ort;
        let mut p = std::ptr::null_mut();
        (ort.CreateKeyValuePairs)(&mut p);
        for (k, v) in pairs {
            let (k, v) = (CString::new(*k).expect("no NUL"), CString::new(*v).expect("no NUL"));
            (ort.AddKeyValuePair)(p, k.as_ptr(), v.as_ptr());
        }
        Kvp(p)
    }
}

impl Drop for Kvp {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: made by CreateKeyValuePairs, released once.
            unsafe { (api::api().ort.ReleaseKeyValuePairs)(self.0) }
        }
    }
}

unsafe extern "system" fn f_get_supported_devices(
    f: *mut OrtEpFactory,
    devices: *const *const OrtHardwareDevice,
    num_devices: usize,
    ep_devices: *mut *mut OrtEpDevice,
    max_ep_devices: usize,
    num_ep_devices: *mut usize,
) -> Status {
    guard("GetSupportedDevices", || {
        *num_ep_devices = 0;
        let a = api::api();
        let me = &mut *(f as *mut Factory);
        // NVIDIA GPUs: the cuda device, one per GPU CUDA can open.
        let mut cuda_pci: Option<Res<Vec<cuda::PciAddress>>> = None;
        for i in 0..num_devices {
            let dev = *devices.add(i);
            if (a.ort.HardwareDevice_Type)(dev) != OrtHardwareDeviceType::OrtHardwareDeviceType_GPU
                || (a.ort.HardwareDevice_VendorId)(dev) != cuda::NVIDIA
                || *num_ep_devices >= max_ep_devices
            {
                continue;
            }
            let pcis = match cuda_pci.get_or_insert_with(cuda::cuda_pci_addresses) {
                Ok(p) => p,
                Err(e) => {
                    me.no_cuda = Some(e.clone());
                    api::verbose(|| format!("NVIDIA GPU not offered: {e}"));
                    continue;
                }
            };
            let meta = hardware_metadata(dev);
            let ordinal = cuda::hardware_pci_address(&meta, Path::new("/sys")).and_then(|p| cuda::ordinal_of(p, pcis));
            let Some(ordinal) = ordinal else {
                let why = format!("an NVIDIA GPU (metadata {meta:?}) has no PCI address CUDA knows ({pcis:?})");
                api::verbose(|| why.clone());
                me.no_cuda = Some(why);
                continue;
            };
            let id = ordinal.to_string();
            let metadata = Kvp::new(&[("bolt.device", "cuda"), ("bolt.cuda_ordinal", &id)]);
            let options = Kvp::new(&[("device", "cuda"), ("device_id", &id)]);
            let mut out = std::ptr::null_mut();
            check((a.ep.CreateEpDevice)(f, dev, metadata.0, options.0, &mut out))?;
            if !me.cuda.iter().any(|(o, _)| *o == ordinal) {
                me.cuda.push((ordinal, cuda::MemInfo::new(ordinal)?));
            }
            let info = me.cuda.iter().find(|(o, _)| *o == ordinal).map_or(std::ptr::null_mut(), |(_, m)| m.0);
            check((a.ep.EpDevice_AddAllocatorInfo)(out, info))?;
            *ep_devices.add(*num_ep_devices) = out;
            *num_ep_devices += 1;
        }
        if me.cuda.is_empty() && me.no_cuda.is_none() {
            me.no_cuda = Some("ONNX Runtime reports no NVIDIA GPU on this machine".into());
        }
        // The reference device runs on the CPU with CPU memory (CPU machines, CI, and next to
        // the GPUs as the oracle).
        for i in 0..num_devices {
            let dev = *devices.add(i);
            if (a.ort.HardwareDevice_Type)(dev) != OrtHardwareDeviceType::OrtHardwareDeviceType_CPU {
                continue;
            }
            if *num_ep_devices >= max_ep_devices {
                break;
            }
            let device = if host_gpu::enabled() { "host_gpu" } else { "reference" };
            let metadata = Kvp::new(&[("bolt.device", device)]);
            let options = Kvp::new(&[("device", device)]);
            let mut out = std::ptr::null_mut();
            check((a.ep.CreateEpDevice)(f, dev, metadata.0, options.0, &mut out))?;
            if host_gpu::enabled() {
                if me.host_gpu.is_none() {
                    me.host_gpu = Some(host_gpu::MemInfo::new()?);
                }
                let info = me.host_gpu.as_ref().map_or(std::ptr::null_mut(), |m| m.0);
                check((a.ep.EpDevice_AddAllocatorInfo)(out, info))?;
            }
            *ep_devices.add(*num_ep_devices) = out;
            *num_ep_devices += 1;
            break;
        }
        Ok(())
    })
}

/// A hardware device's metadata (ORT's discovery: `card_idx`, maybe `pci_bus_id`).
unsafe fn hardware_metadata(dev: *const OrtHardwareDevice) -> std::collections::HashMap<String, String> {
    let ort = api::api().ort;
    let kvp = (ort.HardwareDevice_Metadata)(dev);
    if kvp.is_null() {
        return Default::default();
    }
    let (mut keys, mut values, mut n) = (std::ptr::null(), std::ptr::null(), 0usize);
    (ort.GetKeyValuePairs)(kvp, &mut keys, &mut values, &mut n);
    (0..n).map(|i| (cstr(*keys.add(i)), cstr(*values.add(i)))).collect()
}

/// The session's config entries (`ep.<name>.<option>` among them).
unsafe fn session_entries(so: *const OrtSessionOptions) -> Res<Vec<(String, String)>> {
    let ort = api::api().ort;
    let mut kvp: *mut OrtKeyValuePairs = std::ptr::null_mut();
    check((ort.GetSessionOptionsConfigEntries)(so, &mut kvp))?;
    let kvp = Kvp(kvp);
    let (mut keys, mut values, mut n) = (std::ptr::null(), std::ptr::null(), 0usize);
    (ort.GetKeyValuePairs)(kvp.0, &mut keys, &mut values, &mut n);
    Ok((0..n).map(|i| (cstr(*keys.add(i)), cstr(*values.add(i)))).collect())
}

unsafe extern "system" fn f_create_ep(
    f: *mut OrtEpFactory,
    _devices: *const *const OrtHardwareDevice,
    _ep_metadata: *const *const OrtKeyValuePairs,
    _num_devices: usize,
    session_options: *const OrtSessionOptions,
    logger: *const ort_sys::OrtLogger,
    ep: *mut *mut OrtEp,
) -> Status {
    guard("CreateEp", || {
        *ep = std::ptr::null_mut();
        let name = factory(f).name.to_string_lossy().into_owned();
        let entries = session_entries(session_options)?;
        api::verbose(|| format!("session config: {entries:?}"));
        let opts = options::from_session_config(&name, entries.iter().map(|(k, v)| (k.as_str(), v.as_str())))?;
        let mut opts = opts;
        opts.context = options::context_from_session_config(entries.iter().map(|(k, v)| (k.as_str(), v.as_str())))?;
        if opts.device == options::Device::HostGpu && factory(f).host_gpu.is_none() {
            return Err(format!(
                "EP option device=host_gpu: the test device is offered only when {}=host_gpu is set before the \
                 library is registered",
                host_gpu::ENV
            ));
        }
        if opts.device == options::Device::Cuda {
            let me = factory(f);
            if !me.cuda.iter().any(|(o, _)| *o == opts.device_id as usize) {
                let offered: Vec<usize> = me.cuda.iter().map(|(o, _)| *o).collect();
                return Err(match (&me.no_cuda, offered.is_empty()) {
                    (Some(why), true) => format!("EP option device=cuda: no CUDA device: {why}"),
                    _ => format!(
                        "EP option device_id={}: no such CUDA device (Bolt offers ordinals {offered:?})",
                        opts.device_id
                    ),
                });
            }
        } else if opts.device_id != 0 {
            // The reference and test devices are the host: one device, ordinal 0.
            return Err(format!(
                "EP option device_id={}: no such device (the {} device has only device 0)",
                opts.device_id, opts.device
            ));
        }
        *ep = ep::BoltEp::new(&name, opts, logger).into_raw();
        Ok(())
    })
}

unsafe extern "system" fn f_release_ep(_f: *mut OrtEpFactory, ep: *mut OrtEp) {
    let _ = std::panic::catch_unwind(|| {
        if !ep.is_null() {
            drop(ep::BoltEp::from_raw(ep));
        }
    });
}

unsafe extern "system" fn f_validate_compiled_model_compatibility_info(
    _f: *mut OrtEpFactory,
    _devices: *const *const OrtHardwareDevice,
    _num_devices: usize,
    info: *const c_char,
    out: *mut OrtCompiledModelCompatibility,
) -> Status {
    guard("ValidateCompiledModelCompatibilityInfo", || {
        // A model compiled by this build runs as is; one from another Bolt version points at
        // artifacts whose format its reader checks, so ORT is told to recompile it.
        let info = if info.is_null() { String::new() } else { cstr(info) };
        let ours = format!("{}{} ", ep::COMPAT_PREFIX, env!("CARGO_PKG_VERSION"));
        *out = if info.starts_with(&ours) {
            OrtCompiledModelCompatibility::EP_SUPPORTED_OPTIMAL
        } else if info.starts_with(ep::COMPAT_PREFIX) {
            OrtCompiledModelCompatibility::EP_SUPPORTED_PREFER_RECOMPILATION
        } else {
            OrtCompiledModelCompatibility::EP_NOT_APPLICABLE
        };
        Ok(())
    })
}

unsafe extern "system" fn f_create_allocator(
    f: *mut OrtEpFactory,
    memory_info: *const OrtMemoryInfo,
    _allocator_options: *const OrtKeyValuePairs,
    allocator: *mut *mut OrtAllocator,
) -> Status {
    guard("CreateAllocator", || {
        *allocator = std::ptr::null_mut();
        // The reference device uses ORT's CPU allocator; the cuda and test devices their own.
        if !memory_info.is_null() {
            let asked = (api::api().ep.MemoryInfo_GetMemoryDevice)(memory_info);
            if let Some(ordinal) = cuda::ordinal_of_memory(asked) {
                let me = factory(f);
                let info = me.cuda.iter().find(|(o, _)| *o == ordinal).map(|(_, m)| m.0 as *const OrtMemoryInfo);
                let info =
                    info.ok_or_else(|| format!("asked for memory of GPU {ordinal}, which Bolt did not offer"))?;
                *allocator = cuda::Allocator::new(info, ordinal)?;
                return Ok(());
            }
        }
        if let Some(mine) = &factory(f).host_gpu {
            if !memory_info.is_null() {
                let ep = api::api().ep;
                let asked = (ep.MemoryInfo_GetMemoryDevice)(memory_info);
                if !host_gpu::is_mine(asked) {
                    return Err("asked for an allocator of memory Bolt did not register".into());
                }
                *allocator = host_gpu::Allocator::new(mine.0);
            }
        }
        Ok(())
    })
}

unsafe extern "system" fn f_release_allocator(_f: *mut OrtEpFactory, allocator: *mut OrtAllocator) {
    guard_value((), || {
        if allocator.is_null() {
        } else if cuda::Allocator::is(allocator) {
            cuda::Allocator::release(allocator)
        } else {
            host_gpu::Allocator::release(allocator)
        }
    })
}

unsafe extern "system" fn f_create_data_transfer(
    f: *mut OrtEpFactory,
    data_transfer: *mut *mut OrtDataTransferImpl,
) -> Status {
    guard("CreateDataTransfer", || {
        // The reference device is CPU memory: nothing to copy between devices.
        let me = factory(f);
        *data_transfer = if me.host_gpu.is_some() {
            host_gpu::DataTransfer::new()
        } else if !me.cuda.is_empty() {
            cuda::DataTransfer::new()
        } else {
            std::ptr::null_mut()
        };
        Ok(())
    })
}

unsafe extern "system" fn f_is_stream_aware(f: *const OrtEpFactory) -> bool {
    guard_value(false, || factory(f).host_gpu.is_some() || !factory(f).cuda.is_empty())
}

unsafe extern "system" fn f_create_sync_stream_for_device(
    f: *mut OrtEpFactory,
    memory_device: *const OrtMemoryDevice,
    _stream_options: *const OrtKeyValuePairs,
    stream: *mut *mut OrtSyncStreamImpl,
) -> Status {
    guard("CreateSyncStreamForDevice", || {
        *stream = if factory(f).host_gpu.is_some() && host_gpu::is_mine(memory_device) {
            host_gpu::Stream::new()
        } else if let Some(ordinal) = cuda::ordinal_of_memory(memory_device) {
            cuda::Stream::new(ordinal)?
        } else {
            std::ptr::null_mut()
        };
        Ok(())
    })
}
