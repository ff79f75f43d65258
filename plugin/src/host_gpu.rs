//! A test-only device whose memory ORT sees as GPU memory but which lives on the host, with a
//! stream that runs its work later on a worker thread (the technique of ORT's own example
//! plugin EP). It exercises, without a GPU, everything a real device needs from the plugin ABI:
//! memory info registered on the OrtEpDevice, Bolt's allocator, ORT-inserted copies through
//! Bolt's data transfer, sync streams and notifications, and Compute queued on ORT's compute
//! stream. Because queued work runs late (after [`STREAM_DELAY`]), a missing synchronisation
//! shows up as a wrong result instead of passing by luck.
//!
//! Offered only when `BOLT_ORT_TEST_DEVICE=host_gpu` is set when the library is registered
//! (devices are created before any session option exists); the device carries EP option
//! `device=host_gpu`.

use crate::abi::*;
use crate::api::{api, guard, guard_value, Res};
use ort_sys::{OrtAllocator, OrtAllocatorType, OrtDeviceMemoryType, OrtMemoryInfo, OrtMemoryInfoDeviceType, OrtValue};
use std::alloc::Layout;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// The environment variable that makes the factory offer this device.
pub const ENV: &str = "BOLT_ORT_TEST_DEVICE";
/// The vendor id of the device's memory (not a PCI vendor: nothing real has it).
pub const VENDOR_ID: u32 = 0xB017;
/// How long each piece of queued work waits before it runs.
const STREAM_DELAY: Duration = Duration::from_millis(2);
/// Alignment of every allocation (what CUDA's allocator guarantees).
const ALIGN: usize = 256;

/// What the device did, for tests: copies queued on a stream, copies done at once, Compute
/// calls queued on ORT's compute stream, notifications activated, waits on a device stream.
pub static STATS: [AtomicU64; 5] = [const { AtomicU64::new(0) }; 5];
pub const COPIES_QUEUED: usize = 0;
pub const COPIES_NOW: usize = 1;
pub const COMPUTES_QUEUED: usize = 2;
pub const ACTIVATIONS: usize = 3;
pub const DEVICE_WAITS: usize = 4;

pub fn count(what: usize) {
    STATS[what].fetch_add(1, Ordering::Relaxed);
}

/// Copies the counters of [`STATS`] into `out` (up to `n` of them); returns how many there are.
///
/// # Safety
/// `out` is null or points at `n` writable u64.
#[no_mangle]
pub unsafe extern "C" fn bolt_ort_test_device_stats(out: *mut u64, n: usize) -> usize {
    if !out.is_null() {
        for (i, s) in STATS.iter().enumerate().take(n) {
            *out.add(i) = s.load(Ordering::Relaxed);
        }
    }
    STATS.len()
}

pub fn enabled() -> bool {
    std::env::var(ENV).is_ok_and(|v| v == "host_gpu")
}

/// The device's memory info (GPU, default memory, device allocator: never ORT's arena type).
pub struct MemInfo(pub *mut OrtMemoryInfo);

impl MemInfo {
    pub fn new() -> Res<MemInfo> {
        let mut p = std::ptr::null_mut();
        // SAFETY: ORT copies the name; `p` is released in Drop.
        unsafe {
            crate::api::check((api().ort.CreateMemoryInfo_V2)(
                c"BoltHostGpu".as_ptr(),
                OrtMemoryInfoDeviceType::OrtMemoryInfoDeviceType_GPU,
                VENDOR_ID,
                0,
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

/// Whether `d` is this device's memory.
///
/// # Safety
/// `d` is null or a live OrtMemoryDevice.
pub unsafe fn is_mine(d: *const OrtMemoryDevice) -> bool {
    let ep = api().ep;
    !d.is_null()
        && (ep.MemoryDevice_GetDeviceType)(d) == OrtMemoryInfoDeviceType::OrtMemoryInfoDeviceType_GPU as i32
        && (ep.MemoryDevice_GetVendorId)(d) == VENDOR_ID
}

/// Whether `d` is host (CPU) memory.
///
/// # Safety
/// `d` is null or a live OrtMemoryDevice.
pub unsafe fn is_cpu(d: *const OrtMemoryDevice) -> bool {
    !d.is_null()
        && (api().ep.MemoryDevice_GetDeviceType)(d) == OrtMemoryInfoDeviceType::OrtMemoryInfoDeviceType_CPU as i32
}

// ----------------------------------------------------------------------------- allocator

/// Bolt's own pool: freed blocks are kept by size and handed out again; all memory goes back
/// to the system when ORT releases the allocator.
#[repr(C)]
pub struct Allocator {
    base: OrtAllocator,
    info: *const OrtMemoryInfo,
    pool: Mutex<Pool>,
}

#[derive(Default)]
struct Pool {
    live: HashMap<usize, usize>,
    free: HashMap<usize, Vec<usize>>,
}

impl Allocator {
    pub fn new(info: *const OrtMemoryInfo) -> *mut OrtAllocator {
        // SAFETY: a zeroed table with every member set below (or left null where optional).
        let mut base = unsafe { OrtAllocator::default() };
        base.version = EP_API_VERSION;
        base.Alloc = Some(a_alloc);
        base.Free = Some(a_free);
        base.Info = Some(a_info);
        base.Reserve = Some(a_alloc_const);
        Box::into_raw(Box::new(Allocator { base, info, pool: Mutex::default() })) as *mut OrtAllocator
    }

    /// # Safety
    /// `a` came from [`Allocator::new`] and is not used afterwards.
    pub unsafe fn release(a: *mut OrtAllocator) {
        drop(Box::from_raw(a as *mut Allocator));
    }

    fn alloc(&self, size: usize) -> *mut c_void {
        let size = size.max(1).next_multiple_of(ALIGN);
        let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        let p = match pool.free.get_mut(&size).and_then(Vec::pop) {
            Some(p) => p,
            // SAFETY: non-zero size, valid alignment.
            None => unsafe { std::alloc::alloc(Layout::from_size_align(size, ALIGN).expect("valid layout")) as usize },
        };
        if p != 0 {
            pool.live.insert(p, size);
        }
        p as *mut c_void
    }

    /// Like `cudaFree`, waits for all work queued on the device first: ORT frees a buffer once
    /// its last reader is *queued*, and another run's stream may get the block next.
    fn free(&self, p: *mut c_void) {
        wait_device();
        let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(size) = pool.live.remove(&(p as usize)) {
            pool.free.entry(size).or_default().push(p as usize);
        }
    }
}

impl Drop for Allocator {
    fn drop(&mut self) {
        let pool = self.pool.get_mut().unwrap_or_else(|e| e.into_inner());
        let blocks = pool.live.drain().chain(pool.free.drain().flat_map(|(s, v)| v.into_iter().map(move |p| (p, s))));
        for (p, size) in blocks.collect::<Vec<_>>() {
            // SAFETY: allocated above with this layout.
            unsafe { std::alloc::dealloc(p as *mut u8, Layout::from_size_align(size, ALIGN).expect("valid layout")) }
        }
    }
}

unsafe extern "system" fn a_alloc(a: *mut OrtAllocator, size: usize) -> *mut c_void {
    guard_value(std::ptr::null_mut(), || (*(a as *const Allocator)).alloc(size))
}

unsafe extern "system" fn a_alloc_const(a: *const OrtAllocator, size: usize) -> *mut c_void {
    guard_value(std::ptr::null_mut(), || (*(a as *const Allocator)).alloc(size))
}

unsafe extern "system" fn a_free(a: *mut OrtAllocator, p: *mut c_void) {
    guard_value((), || (*(a as *const Allocator)).free(p))
}

unsafe extern "system" fn a_info(a: *const OrtAllocator) -> *const OrtMemoryInfo {
    guard_value(std::ptr::null(), || (*(a as *const Allocator)).info)
}

// -------------------------------------------------------------------------------- stream

type Job = Box<dyn FnOnce() + Send>;

/// A queue of work run in order, later, by one worker thread (the device's "stream").
pub struct Queue {
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    /// (submitted, done) counts.
    progress: Arc<(Mutex<(u64, u64)>, Condvar)>,
    /// The first failure of queued work, reported by the next synchronisation (sticky, like a
    /// device error).
    error: Arc<Mutex<Option<String>>>,
    worker: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Queue {
    fn new() -> Queue {
        let (tx, rx) = mpsc::channel::<Job>();
        let progress = Arc::new((Mutex::new((0u64, 0u64)), Condvar::new()));
        let p = progress.clone();
        let worker = std::thread::Builder::new()
            .name("bolt-host-gpu-stream".into())
            .spawn(move || {
                for job in rx {
                    std::thread::sleep(STREAM_DELAY);
                    job();
                    let (m, cv) = &*p;
                    m.lock().unwrap_or_else(|e| e.into_inner()).1 += 1;
                    cv.notify_all();
                }
            })
            .expect("spawn stream worker");
        Queue { tx: Mutex::new(Some(tx)), progress, error: Arc::default(), worker: Mutex::new(Some(worker)) }
    }

    /// Queues `f`; a failure is kept for the next [`Queue::synchronize`].
    pub fn enqueue(&self, f: impl FnOnce() -> Res<()> + Send + 'static) {
        let err = self.error.clone();
        let job: Job = Box::new(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
                .unwrap_or_else(|p| Err(format!("panic: {}", crate::api::panic_text(&p))));
            if let Err(e) = r {
                err.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(e);
            }
        });
        self.progress.0.lock().unwrap_or_else(|e| e.into_inner()).0 += 1;
        if let Some(tx) = &*self.tx.lock().unwrap_or_else(|e| e.into_inner()) {
            let _ = tx.send(job);
        }
    }

    /// Waits until everything queued so far has run.
    fn wait(&self) {
        let (m, cv) = &*self.progress;
        let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
        let target = g.0;
        while g.1 < target {
            g = cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Waits until everything queued so far has run; returns the first failure, if any.
    pub fn synchronize(&self) -> Res<()> {
        self.wait();
        match self.error.lock().unwrap_or_else(|e| e.into_inner()).take() {
            Some(e) => Err(format!("queued work failed: {e}")),
            None => Ok(()),
        }
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        drop(self.tx.lock().unwrap_or_else(|e| e.into_inner()).take());
        if let Some(w) = self.worker.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = w.join();
        }
    }
}

/// Every live queue of the device, for device-wide waits.
static QUEUES: Mutex<Vec<std::sync::Weak<Queue>>> = Mutex::new(Vec::new());

/// Waits for the work queued on every stream of the device (what `cudaDeviceSynchronize` does).
fn wait_device() {
    let live: Vec<Arc<Queue>> = {
        let mut qs = QUEUES.lock().unwrap_or_else(|e| e.into_inner());
        qs.retain(|w| w.strong_count() > 0);
        qs.iter().filter_map(std::sync::Weak::upgrade).collect()
    };
    for q in live {
        q.wait();
    }
}

/// `OrtSyncStreamImpl` over a [`Queue`]; its native handle (what Compute receives from ORT) is
/// the queue.
#[repr(C)]
pub struct Stream {
    base: OrtSyncStreamImpl,
    pub queue: Arc<Queue>,
}

impl Stream {
    pub fn new() -> *mut OrtSyncStreamImpl {
        Box::into_raw(Box::new(Stream {
            base: OrtSyncStreamImpl {
                ort_version_supported: EP_API_VERSION,
                Release: Some(s_release),
                GetHandle: Some(s_get_handle),
                CreateNotification: Some(s_create_notification),
                Flush: Some(s_synchronize),
                OnSessionRunEnd: Some(s_synchronize),
            },
            queue: {
                let q = Arc::new(Queue::new());
                QUEUES.lock().unwrap_or_else(|e| e.into_inner()).push(Arc::downgrade(&q));
                q
            },
        })) as *mut OrtSyncStreamImpl
    }
}

/// The queue behind an ORT stream (null: none).
///
/// # Safety
/// `s` is null or a live OrtSyncStream whose implementation is a [`Stream`].
pub unsafe fn queue_of(s: *const OrtSyncStream) -> Option<Arc<Queue>> {
    if s.is_null() {
        return None;
    }
    let imp = (api().ep.SyncStream_GetImpl)(s);
    (!imp.is_null()).then(|| (*(imp as *const Stream)).queue.clone())
}

/// The queue behind a compute stream handle (from `KernelContext_GetGPUComputeStream`).
///
/// # Safety
/// `h` is null or a handle returned by [`s_get_handle`].
pub unsafe fn queue_of_handle(h: *mut c_void) -> Option<Arc<Queue>> {
    (!h.is_null()).then(|| {
        let q = h as *const Queue;
        Arc::increment_strong_count(q);
        Arc::from_raw(q)
    })
}

unsafe extern "system" fn s_release(s: *mut OrtSyncStreamImpl) {
    guard_value((), || drop(Box::from_raw(s as *mut Stream)))
}

unsafe extern "system" fn s_get_handle(s: *mut OrtSyncStreamImpl) -> *mut c_void {
    guard_value(std::ptr::null_mut(), || Arc::as_ptr(&(*(s as *const Stream)).queue) as *mut c_void)
}

unsafe extern "system" fn s_synchronize(s: *mut OrtSyncStreamImpl) -> Status {
    guard("stream synchronise", || (*(s as *const Stream)).queue.synchronize())
}

// ------------------------------------------------------------------------- notifications

/// An event: set when the producer stream reaches the point where it was activated.
#[derive(Default)]
struct Event {
    set: Mutex<bool>,
    cv: Condvar,
}

impl Event {
    fn wait(&self) {
        let mut g = self.set.lock().unwrap_or_else(|e| e.into_inner());
        while !*g {
            g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }
}

#[repr(C)]
struct Notification {
    base: OrtSyncNotificationImpl,
    producer: Arc<Queue>,
    event: Arc<Event>,
}

unsafe extern "system" fn s_create_notification(
    s: *mut OrtSyncStreamImpl,
    out: *mut *mut OrtSyncNotificationImpl,
) -> Status {
    guard("CreateNotification", || {
        *out = Box::into_raw(Box::new(Notification {
            base: OrtSyncNotificationImpl {
                ort_version_supported: EP_API_VERSION,
                Release: Some(n_release),
                Activate: Some(n_activate),
                WaitOnDevice: Some(n_wait_on_device),
                WaitOnHost: Some(n_wait_on_host),
            },
            producer: (*(s as *const Stream)).queue.clone(),
            event: Arc::default(),
        })) as *mut OrtSyncNotificationImpl;
        Ok(())
    })
}

unsafe extern "system" fn n_release(n: *mut OrtSyncNotificationImpl) {
    guard_value((), || drop(Box::from_raw(n as *mut Notification)))
}

/// Records the event on the producer stream (it is set when the work queued before it has run).
unsafe extern "system" fn n_activate(n: *mut OrtSyncNotificationImpl) -> Status {
    guard("Notification Activate", || {
        let n = &*(n as *const Notification);
        *n.event.set.lock().unwrap_or_else(|e| e.into_inner()) = false;
        let ev = n.event.clone();
        count(ACTIVATIONS);
        n.producer.enqueue(move || {
            *ev.set.lock().unwrap_or_else(|e| e.into_inner()) = true;
            ev.cv.notify_all();
            Ok(())
        });
        Ok(())
    })
}

/// The consumer stream waits for the event before its later work (no host wait).
unsafe extern "system" fn n_wait_on_device(n: *mut OrtSyncNotificationImpl, consumer: *mut OrtSyncStream) -> Status {
    guard("Notification WaitOnDevice", || {
        let n = &*(n as *const Notification);
        let ev = n.event.clone();
        match queue_of(consumer) {
            Some(consumer) => consumer.enqueue(move || {
                count(DEVICE_WAITS);
                ev.wait();
                Ok(())
            }),
            // A consumer that is not a Bolt stream (ORT's CPU stream) runs on the host: wait here.
            None => ev.wait(),
        }
        Ok(())
    })
}

unsafe extern "system" fn n_wait_on_host(n: *mut OrtSyncNotificationImpl) -> Status {
    guard("Notification WaitOnHost", || {
        (*(n as *const Notification)).event.wait();
        Ok(())
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

/// CPU <-> device and device <-> device.
unsafe extern "system" fn dt_can_copy(
    _d: *const OrtDataTransferImpl,
    src: *const OrtMemoryDevice,
    dst: *const OrtMemoryDevice,
) -> bool {
    guard_value(false, || (is_mine(src) && (is_mine(dst) || is_cpu(dst))) || (is_cpu(src) && is_mine(dst)))
}

/// Sends a raw pointer to the stream's worker (the memory stays valid until ORT synchronises
/// the stream, as with device memory and a CUDA stream).
#[derive(Clone, Copy)]
pub struct SendPtr(pub *mut c_void);
// SAFETY: see above; the pointee is only touched by the one job that receives it.
unsafe impl Send for SendPtr {}

/// Copies each tensor: queued on its stream when ORT gives one, else at once.
unsafe extern "system" fn dt_copy_tensors(
    _d: *mut OrtDataTransferImpl,
    src: *const *const OrtValue,
    dst: *mut *mut OrtValue,
    streams: *mut *mut OrtSyncStream,
    num: usize,
) -> Status {
    guard("CopyTensors", || {
        for i in 0..num {
            let (s, n) = crate::graph::tensor_bytes(*src.add(i))?;
            let (d, m) = crate::graph::tensor_bytes(*dst.add(i))?;
            if n != m {
                return Err(format!("tensor {i}: source has {n} bytes, destination {m}"));
            }
            let stream = if streams.is_null() { std::ptr::null_mut() } else { *streams.add(i) };
            let (s, d) = (SendPtr(s), SendPtr(d));
            let copy = move || {
                let (s, d) = (s, d); // the whole Send wrappers, not their raw fields
                if n > 0 {
                    // SAFETY: both buffers hold `n` bytes (checked above) and live until the
                    // stream is synchronised.
                    unsafe { std::ptr::copy_nonoverlapping(s.0 as *const u8, d.0 as *mut u8, n) };
                }
                Ok(())
            };
            match queue_of(stream) {
                Some(q) => {
                    count(COPIES_QUEUED);
                    q.enqueue(copy)
                }
                None => {
                    count(COPIES_NOW);
                    copy()?
                }
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_runs_in_order_and_synchronize_waits_for_all() {
        let q = Queue::new();
        let seen = Arc::new(Mutex::new(Vec::new()));
        for i in 0..5 {
            let s = seen.clone();
            q.enqueue(move || {
                s.lock().unwrap().push(i);
                Ok(())
            });
        }
        q.synchronize().unwrap();
        assert_eq!(*seen.lock().unwrap(), vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn a_failure_of_queued_work_is_reported_once_by_the_next_synchronize() {
        let q = Queue::new();
        q.enqueue(|| Err("copy 3 failed".into()));
        q.enqueue(|| panic!("boom"));
        let e = q.synchronize().unwrap_err();
        assert!(e.contains("copy 3 failed"), "{e}");
        q.synchronize().unwrap();
    }

    #[test]
    fn pool_reuses_freed_blocks_of_the_same_size() {
        let a = Allocator::new(std::ptr::null());
        // SAFETY: `a` is a live allocator made above.
        let me = unsafe { &*(a as *const Allocator) };
        let p = me.alloc(1000);
        assert_eq!(p as usize % ALIGN, 0);
        me.free(p);
        assert_eq!(me.alloc(1000), p, "same rounded size: the freed block comes back");
        assert_ne!(me.alloc(1000), p, "a live block is not handed out twice");
        // SAFETY: made by Allocator::new, not used afterwards.
        unsafe { Allocator::release(a) };
    }
}
