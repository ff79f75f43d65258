//! The `cuda` device: Bolt's kernels on an NVIDIA GPU, in ORT's terms.
//!
//! - Each GPU hardware device ORT reports is mapped to a CUDA ordinal by its PCI address (never
//!   by position: ORT enumerates DRM cards, CUDA orders by its own rules), and offered as one
//!   OrtEpDevice with GPU memory of that ordinal registered on it.
//! - [`Allocator`]: Bolt's own pool of device memory (ORT's device-allocator type, never the
//!   arena type).
//! - [`DataTransfer`]: CPU <-> GPU and GPU <-> GPU copies, queued on the stream ORT passes,
//!   synchronous when it passes none.
//! - [`Stream`]: an OrtSyncStreamImpl over a CUDA stream; notifications are CUDA events.
//! - Compute (in `ep.rs`) runs the fused node's artifact with the runtime's CUDA executor on
//!   ORT's compute stream ([`bolt::runtime::cuda::CudaExecutor::enqueue`]).
//!
//! Every entry point binds the device's primary context first: ORT calls from any thread.
//! Everything here loads the driver at run time; on a machine without one the factory offers
//! no CUDA device and `device=cuda` fails session creation with the reason.

use crate::abi::*;
use crate::api::{api, check, guard, guard_value, Res};
use cudarc::driver::{result, sys, CudaContext};
use ort_sys::{OrtAllocator, OrtAllocatorType, OrtDeviceMemoryType, OrtMemoryInfo, OrtMemoryInfoDeviceType, OrtValue};
use std::collections::{HashMap, HashSet};
use std::ffi::c_void;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// NVIDIA's PCI vendor id: the vendor of the GPUs Bolt runs on and of their memory.
pub const NVIDIA: u32 = 0x10DE;
/// Alignment of every allocation (what cuMemAlloc guarantees).
const ALIGN: usize = 256;

fn drv<T>(what: &str, r: Result<T, cudarc::driver::DriverError>) -> Res<T> {
    r.map_err(|e| format!("CUDA {what}: {e}"))
}

// ------------------------------------------------------------------------- device mapping

/// A PCI address: domain, bus, device (slot), function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PciAddress {
    pub domain: u32,
    pub bus: u32,
    pub device: u32,
    pub function: u32,
}

impl PciAddress {
    /// Parses `[domain:]bus:device[.function]` in hex, as sysfs (`0000:65:00.0`), NVML
    /// (`00000000:65:00.0`) and CUDA (`0000:65:00.0`) write it; the function defaults to 0.
    pub fn parse(s: &str) -> Option<PciAddress> {
        let s = s.trim();
        let (rest, function) = match s.rsplit_once('.') {
            Some((r, f)) => (r, u32::from_str_radix(f, 16).ok()?),
            None => (s, 0),
        };
        let parts: Vec<&str> = rest.split(':').collect();
        let hex = |p: &str| (!p.is_empty() && p.len() <= 8).then(|| u32::from_str_radix(p, 16).ok()).flatten();
        let (domain, bus, device) = match parts.as_slice() {
            [d, b, v] => (hex(d)?, hex(b)?, hex(v)?),
            [b, v] => (0, hex(b)?, hex(v)?),
            _ => return None,
        };
        // PCI: 8-bit bus, 5-bit device, 3-bit function.
        (bus <= 0xff && device <= 0x1f && function <= 7).then_some(PciAddress { domain, bus, device, function })
    }
}

/// The PCI address of a GPU hardware device from its ORT metadata: `pci_bus_id` when ORT
/// gives it, else the DRM card (`card_idx`) resolved through sysfs (`<sysfs>/class/drm/cardN/
/// device` links to the PCI device's directory, named by its address).
pub fn hardware_pci_address(metadata: &HashMap<String, String>, sysfs: &Path) -> Option<PciAddress> {
    if let Some(a) = metadata.get("pci_bus_id").and_then(|s| PciAddress::parse(s)) {
        return Some(a);
    }
    let card: u32 = metadata.get("card_idx")?.trim().parse().ok()?;
    let link = std::fs::canonicalize(sysfs.join("class/drm").join(format!("card{card}")).join("device")).ok()?;
    PciAddress::parse(link.file_name()?.to_str()?)
}

/// Why CUDA cannot be used here, or `Ok` once the driver is loaded and initialised.
pub fn driver() -> Res<()> {
    // SAFETY: only tries to dlopen libcuda (cudarc's loader panics when it is absent).
    if !unsafe { sys::is_culib_present() } {
        return Err("no CUDA driver library (libcuda.so) on this machine".into());
    }
    drv("cuInit", result::init())
}

/// Every CUDA device's PCI address, by ordinal.
pub fn cuda_pci_addresses() -> Res<Vec<PciAddress>> {
    use sys::CUdevice_attribute_enum::*;
    driver()?;
    let n = drv("device count", result::device::get_count())?;
    (0..n)
        .map(|i| {
            let dev = drv("device", result::device::get(i))?;
            // SAFETY: a valid device handle and attributes every driver knows.
            let attr = |a| drv("device attribute", unsafe { result::device::get_attribute(dev, a) }).map(|v| v as u32);
            Ok(PciAddress {
                domain: attr(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?,
                bus: attr(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?,
                device: attr(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?,
                function: 0,
            })
        })
        .collect()
}

/// The CUDA ordinal of the device at `pci` among `cuda` (CUDA reports no PCI function: a GPU
/// is function 0 of its slot).
pub fn ordinal_of(pci: PciAddress, cuda: &[PciAddress]) -> Option<usize> {
    cuda.iter().position(|c| (c.domain, c.bus, c.device) == (pci.domain, pci.bus, pci.device))
}

/// Contexts by ordinal: each device's primary context, retained once per process.
fn context(ordinal: usize) -> Res<Arc<CudaContext>> {
    static CONTEXTS: Mutex<Vec<(usize, Arc<CudaContext>)>> = Mutex::new(Vec::new());
    let mut all = CONTEXTS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, c)) = all.iter().find(|(o, _)| *o == ordinal) {
        return Ok(c.clone());
    }
    driver()?;
    let c = drv(&format!("cannot open GPU {ordinal}"), CudaContext::new(ordinal))?;
    all.push((ordinal, c.clone()));
    Ok(c)
}

/// Binds GPU `ordinal`'s primary context to the calling thread.
pub fn bind(ordinal: usize) -> Res<Arc<CudaContext>> {
    let c = context(ordinal)?;
    drv("bind context", c.bind_to_thread())?;
    Ok(c)
}

/// GPU memory of `ordinal` as ORT sees it (device allocator type: never ORT's arena).
pub struct MemInfo(pub *mut OrtMemoryInfo);

// SAFETY: an immutable ORT object, released once.
unsafe impl Send for MemInfo {}

impl MemInfo {
    pub fn new(ordinal: usize) -> Res<MemInfo> {
        let mut p = std::ptr::null_mut();
        // SAFETY: ORT copies the name; `p` is released in Drop.
        unsafe {
            check((api().ort.CreateMemoryInfo_V2)(
                c"BoltCuda".as_ptr(),
                OrtMemoryInfoDeviceType::OrtMemoryInfoDeviceType_GPU,
                NVIDIA,
                ordinal as i32,
                OrtDeviceMemoryType::OrtDeviceMemoryType_DEFAULT,
                ALIGN,
                OrtAllocatorType::OrtDeviceAllocator,
                &mut p,
            ))?;
        }
        Ok(MemInfo(p))
    }
}

impl Drop for MemInfo {
    fn drop(&mut self) {
        // SAFETY: made by CreateMemoryInfo_V2, released once.
        unsafe { (api().ort.ReleaseMemoryInfo)(self.0) }
    }
}

/// The CUDA ordinal of `d` if it is NVIDIA GPU memory.
///
/// # Safety
/// `d` is null or a live OrtMemoryDevice.
pub unsafe fn ordinal_of_memory(d: *const OrtMemoryDevice) -> Option<usize> {
    let ep = api().ep;
    (!d.is_null()
        && (ep.MemoryDevice_GetDeviceType)(d) == OrtMemoryInfoDeviceType::OrtMemoryInfoDeviceType_GPU as i32
        && (ep.MemoryDevice_GetVendorId)(d) == NVIDIA)
        .then(|| (ep.MemoryDevice_GetDeviceId)(d) as usize)
}

// ----------------------------------------------------------------------------- allocator

/// Bolt's pool of device memory: freed blocks are kept by size and handed out again; all of
/// it goes back to the driver when ORT releases the allocator.
#[repr(C)]
pub struct Allocator {
    base: OrtAllocator,
    info: *const OrtMemoryInfo,
    ordinal: usize,
    pool: Mutex<Pool>,
}

#[derive(Default)]
struct Pool {
    live: HashMap<u64, usize>,
    free: HashMap<usize, Vec<u64>>,
}

impl Allocator {
    pub fn new(info: *const OrtMemoryInfo, ordinal: usize) -> Res<*mut OrtAllocator> {
        context(ordinal)?;
        // SAFETY: a zeroed table with every member set below (or left null where optional).
        let mut base = unsafe { OrtAllocator::default() };
        base.version = EP_API_VERSION;
        base.Alloc = Some(a_alloc);
        base.Free = Some(a_free);
        base.Info = Some(a_info);
        base.Reserve = Some(a_alloc_const);
        Ok(Box::into_raw(Box::new(Allocator { base, info, ordinal, pool: Mutex::default() })) as *mut OrtAllocator)
    }

    /// Whether `a` (one of Bolt's allocators) is one of these: its memory is NVIDIA GPU memory.
    ///
    /// # Safety
    /// `a` is a live allocator made by this library.
    pub unsafe fn is(a: *const OrtAllocator) -> bool {
        let info = (*a).Info.map_or(std::ptr::null(), |f| f(a));
        !info.is_null() && ordinal_of_memory((api().ep.MemoryInfo_GetMemoryDevice)(info)).is_some()
    }

    /// # Safety
    /// `a` came from [`Allocator::new`] and is not used afterwards.
    pub unsafe fn release(a: *mut OrtAllocator) {
        drop(Box::from_raw(a as *mut Allocator));
    }

    fn alloc(&self, size: usize) -> Res<u64> {
        let size = size.max(1).next_multiple_of(ALIGN);
        let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        let p = match pool.free.get_mut(&size).and_then(Vec::pop) {
            Some(p) => p,
            None => {
                bind(self.ordinal)?;
                // SAFETY: a bound context; freed in Drop.
                drv("alloc", unsafe { result::malloc_sync(size) })?
            }
        };
        pool.live.insert(p, size);
        Ok(p)
    }

    /// Like `cudaFree`, waits for the device's queued work first: ORT frees a buffer once its
    /// last reader is *queued*, and the block may next go to work on another stream.
    fn free(&self, p: u64) -> Res<()> {
        let ctx = bind(self.ordinal)?;
        drv("synchronize before free", ctx.synchronize())?;
        let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(size) = pool.live.remove(&p) {
            pool.free.entry(size).or_default().push(p);
        }
        Ok(())
    }
}

impl Drop for Allocator {
    fn drop(&mut self) {
        let pool = self.pool.get_mut().unwrap_or_else(|e| e.into_inner());
        let blocks: Vec<u64> =
            pool.live.drain().map(|(p, _)| p).chain(pool.free.drain().flat_map(|(_, v)| v)).collect();
        if blocks.is_empty() || bind(self.ordinal).is_err() {
            return;
        }
        for p in blocks {
            // SAFETY: allocated by malloc_sync in this context, freed once.
            unsafe {
                let _ = result::free_sync(p);
            }
        }
    }
}

unsafe extern "system" fn a_alloc(a: *mut OrtAllocator, size: usize) -> *mut c_void {
    guard_value(std::ptr::null_mut(), || {
        (*(a as *const Allocator)).alloc(size).map_or(std::ptr::null_mut(), |p| p as *mut c_void)
    })
}

unsafe extern "system" fn a_alloc_const(a: *const OrtAllocator, size: usize) -> *mut c_void {
    a_alloc(a as *mut OrtAllocator, size)
}

unsafe extern "system" fn a_free(a: *mut OrtAllocator, p: *mut c_void) {
    guard_value((), || {
        let _ = (*(a as *const Allocator)).free(p as u64);
    })
}

unsafe extern "system" fn a_info(a: *const OrtAllocator) -> *const OrtMemoryInfo {
    guard_value(std::ptr::null(), || (*(a as *const Allocator)).info)
}

// -------------------------------------------------------------------------------- streams

/// `OrtSyncStreamImpl` over a CUDA stream of GPU `ordinal`; its native handle (what Compute
/// receives from ORT) is the `CUstream`.
#[repr(C)]
pub struct Stream {
    base: OrtSyncStreamImpl,
    ordinal: usize,
    stream: sys::CUstream,
}

/// The live Bolt streams (their impl addresses), so a notification can tell a Bolt stream
/// from another EP's.
static STREAMS: Mutex<Option<HashSet<usize>>> = Mutex::new(None);

impl Stream {
    pub fn new(ordinal: usize) -> Res<*mut OrtSyncStreamImpl> {
        bind(ordinal)?;
        let stream = drv("create stream", result::stream::create(result::stream::StreamKind::NonBlocking))?;
        let p = Box::into_raw(Box::new(Stream {
            base: OrtSyncStreamImpl {
                ort_version_supported: EP_API_VERSION,
                Release: Some(s_release),
                GetHandle: Some(s_get_handle),
                CreateNotification: Some(s_create_notification),
                Flush: Some(s_flush),
                OnSessionRunEnd: Some(s_synchronize),
            },
            ordinal,
            stream,
        }));
        STREAMS.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(HashSet::new).insert(p as usize);
        Ok(p as *mut OrtSyncStreamImpl)
    }
}

/// The Bolt stream behind an ORT stream, if it is one.
///
/// # Safety
/// `s` is null or a live OrtSyncStream.
unsafe fn stream_of(s: *const OrtSyncStream) -> Option<(usize, sys::CUstream)> {
    if s.is_null() {
        return None;
    }
    let imp = (api().ep.SyncStream_GetImpl)(s) as usize;
    let ours = STREAMS.lock().unwrap_or_else(|e| e.into_inner()).as_ref().is_some_and(|m| m.contains(&imp));
    ours.then(|| {
        let st = &*(imp as *const Stream);
        (st.ordinal, st.stream)
    })
}

unsafe extern "system" fn s_release(s: *mut OrtSyncStreamImpl) {
    guard_value((), || {
        if let Some(m) = STREAMS.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            m.remove(&(s as usize));
        }
        let st = Box::from_raw(s as *mut Stream);
        if bind(st.ordinal).is_ok() {
            let _ = result::stream::synchronize(st.stream);
            let _ = result::stream::destroy(st.stream);
        }
    })
}

unsafe extern "system" fn s_get_handle(s: *mut OrtSyncStreamImpl) -> *mut c_void {
    guard_value(std::ptr::null_mut(), || (*(s as *const Stream)).stream as *mut c_void)
}

/// Work is submitted as it is queued: nothing to flush.
unsafe extern "system" fn s_flush(_s: *mut OrtSyncStreamImpl) -> Status {
    Status::default()
}

unsafe extern "system" fn s_synchronize(s: *mut OrtSyncStreamImpl) -> Status {
    guard("stream synchronise", || {
        let st = &*(s as *const Stream);
        bind(st.ordinal)?;
        drv("stream synchronize", result::stream::synchronize(st.stream))
    })
}

// ------------------------------------------------------------------------- notifications

#[repr(C)]
struct Notification {
    base: OrtSyncNotificationImpl,
    ordinal: usize,
    producer: sys::CUstream,
    event: sys::CUevent,
}

unsafe extern "system" fn s_create_notification(
    s: *mut OrtSyncStreamImpl,
    out: *mut *mut OrtSyncNotificationImpl,
) -> Status {
    guard("CreateNotification", || {
        let st = &*(s as *const Stream);
        bind(st.ordinal)?;
        let event = drv("create event", result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING))?;
        *out = Box::into_raw(Box::new(Notification {
            base: OrtSyncNotificationImpl {
                ort_version_supported: EP_API_VERSION,
                Release: Some(n_release),
                Activate: Some(n_activate),
                WaitOnDevice: Some(n_wait_on_device),
                WaitOnHost: Some(n_wait_on_host),
            },
            ordinal: st.ordinal,
            producer: st.stream,
            event,
        })) as *mut OrtSyncNotificationImpl;
        Ok(())
    })
}

unsafe extern "system" fn n_release(n: *mut OrtSyncNotificationImpl) {
    guard_value((), || {
        let n = Box::from_raw(n as *mut Notification);
        if bind(n.ordinal).is_ok() {
            let _ = result::event::destroy(n.event);
        }
    })
}

/// Records the event on the producer stream.
unsafe extern "system" fn n_activate(n: *mut OrtSyncNotificationImpl) -> Status {
    guard("Notification Activate", || {
        let n = &*(n as *const Notification);
        bind(n.ordinal)?;
        drv("event record", result::event::record(n.event, n.producer))
    })
}

/// A Bolt consumer stream waits for the event on the device; any other consumer (ORT's CPU
/// stream) runs on the host, so the host waits.
unsafe extern "system" fn n_wait_on_device(n: *mut OrtSyncNotificationImpl, consumer: *mut OrtSyncStream) -> Status {
    guard("Notification WaitOnDevice", || {
        let n = &*(n as *const Notification);
        match stream_of(consumer) {
            Some((ordinal, stream)) => {
                bind(ordinal)?;
                drv(
                    "stream wait event",
                    result::stream::wait_event(stream, n.event, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT),
                )
            }
            None => {
                bind(n.ordinal)?;
                drv("event synchronize", result::event::synchronize(n.event))
            }
        }
    })
}

unsafe extern "system" fn n_wait_on_host(n: *mut OrtSyncNotificationImpl) -> Status {
    guard("Notification WaitOnHost", || {
        let n = &*(n as *const Notification);
        bind(n.ordinal)?;
        drv("event synchronize", result::event::synchronize(n.event))
    })
}

// ------------------------------------------------------------------------- data transfer

#[repr(C)]
pub struct DataTransfer {
    base: OrtDataTransferImpl,
}

impl DataTransfer {
    pub fn new() -> *mut OrtDataTransferImpl {
        Box::into_raw(Box::new(DataTransfer {
            base: OrtDataTransferImpl {
                ort_version_supported: EP_API_VERSION,
                Release: Some(dt_release),
                CanCopy: Some(dt_can_copy),
                CopyTensors: Some(dt_copy_tensors),
            },
        })) as *mut OrtDataTransferImpl
    }
}

unsafe extern "system" fn dt_release(d: *mut OrtDataTransferImpl) {
    guard_value((), || drop(Box::from_raw(d as *mut DataTransfer)))
}

/// CPU <-> GPU and GPU <-> GPU.
unsafe extern "system" fn dt_can_copy(
    _d: *const OrtDataTransferImpl,
    src: *const OrtMemoryDevice,
    dst: *const OrtMemoryDevice,
) -> bool {
    guard_value(false, || {
        let (s, d) = (ordinal_of_memory(src), ordinal_of_memory(dst));
        (s.is_some() && (d.is_some() || crate::host_gpu::is_cpu(dst))) || (crate::host_gpu::is_cpu(src) && d.is_some())
    })
}

/// Copies each tensor (unified addressing tells host from device pointers): queued on its
/// stream when ORT gives one, else completed before returning.
unsafe extern "system" fn dt_copy_tensors(
    _d: *mut OrtDataTransferImpl,
    src: *const *const OrtValue,
    dst: *mut *mut OrtValue,
    streams: *mut *mut OrtSyncStream,
    num: usize,
) -> Status {
    guard("CopyTensors", || {
        for i in 0..num {
            let ((s, n), (d, m)) = (crate::graph::tensor_bytes(*src.add(i))?, crate::graph::tensor_bytes(*dst.add(i))?);
            let gpu = |v: *const OrtValue| ordinal_of_memory((api().ep.Value_GetMemoryDevice)(v));
            let (so, dor) = (gpu(*src.add(i)), gpu(*dst.add(i)));
            if n != m {
                return Err(format!("tensor {i}: source has {n} bytes, destination {m}"));
            }
            if n == 0 {
                continue;
            }
            let ordinal = dor.or(so).ok_or_else(|| format!("tensor {i}: neither side is GPU memory"))?;
            bind(ordinal)?;
            let stream = if streams.is_null() { None } else { stream_of(*streams.add(i)) };
            match stream {
                Some((_, stream)) => drv("copy", sys::cuMemcpyAsync(d as u64, s as u64, n, stream).result())?,
                None => drv("copy", sys::cuMemcpy(d as u64, s as u64, n).result())?,
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_addresses_parse_in_every_spelling() {
        let a = PciAddress { domain: 0, bus: 0x65, device: 0, function: 0 };
        assert_eq!(PciAddress::parse("0000:65:00.0"), Some(a));
        assert_eq!(PciAddress::parse("00000000:65:00.0"), Some(a));
        assert_eq!(PciAddress::parse("65:00.0"), Some(a));
        assert_eq!(
            PciAddress::parse("0001:b3:1f.3\n"),
            Some(PciAddress { domain: 1, bus: 0xb3, device: 0x1f, function: 3 })
        );
        for bad in ["", "card0", "0000:65", "zz:00.0", "0000:65:00.x", "1:2:3:4"] {
            assert_eq!(PciAddress::parse(bad), None, "{bad}");
        }
    }

    /// ORT on Linux names a GPU by its DRM card; the card's sysfs link names its PCI address,
    /// and CUDA ordinals follow CUDA's own order, not the cards'.
    #[test]
    fn hardware_devices_map_to_cuda_ordinals_by_pci_address_not_position() {
        let root = std::env::temp_dir().join(format!("bolt-sysfs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for (card, pci) in [(0, "0000:b3:00.0"), (1, "0000:17:00.0")] {
            let dev = root.join("devices/pci0000:00").join(pci);
            std::fs::create_dir_all(&dev).unwrap();
            let drm = root.join("class/drm").join(format!("card{card}"));
            std::fs::create_dir_all(&drm).unwrap();
            std::os::unix::fs::symlink(&dev, drm.join("device")).unwrap();
        }
        let meta = |k: &str, v: &str| HashMap::from([(k.to_string(), v.to_string())]);
        // CUDA's order: the 0x17 GPU first.
        let cuda = [PciAddress::parse("0000:17:00.0").unwrap(), PciAddress::parse("0000:b3:00.0").unwrap()];
        let card0 = hardware_pci_address(&meta("card_idx", "0"), &root).unwrap();
        assert_eq!(ordinal_of(card0, &cuda), Some(1));
        let card1 = hardware_pci_address(&meta("card_idx", "1"), &root).unwrap();
        assert_eq!(ordinal_of(card1, &cuda), Some(0));
        // ORT's pci_bus_id, when given, wins.
        let by_id = hardware_pci_address(&meta("pci_bus_id", "00000000:B3:00.0"), &root).unwrap();
        assert_eq!(ordinal_of(by_id, &cuda), Some(1));
        assert_eq!(hardware_pci_address(&meta("card_idx", "7"), &root), None, "no such card");
        assert_eq!(hardware_pci_address(&HashMap::new(), &root), None);
        let other = PciAddress::parse("0000:3b:00.0").unwrap();
        assert_eq!(ordinal_of(other, &cuda), None, "a GPU CUDA does not see");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn without_a_driver_every_cuda_call_says_why() {
        if Path::new("/dev/nvidia0").exists() {
            return; // a GPU machine: covered by the GPU runs (bench/results)
        }
        let e = cuda_pci_addresses().unwrap_err();
        assert!(e.contains("no CUDA driver") || e.contains("cuInit"), "{e}");
        let e = bind(0).unwrap_err();
        assert!(e.contains("no CUDA driver") || e.contains("cuInit"), "{e}");
    }
}
