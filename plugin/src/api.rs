//! Safe-ish helpers over ORT's C function tables: statuses become `Result<_, String>`, strings
//! are copied out, panics are caught before they reach ORT.

use crate::abi::{OrtEpApi, Status};
use ort_sys::{c_char, OrtApi, OrtErrorCode};
use std::ffi::{CStr, CString};
use std::sync::OnceLock;

/// The tables ORT handed us in `CreateEpFactories` (the same for the whole process).
pub struct Api {
    pub ort: &'static OrtApi,
    pub ep: &'static OrtEpApi,
    /// The runtime provides C API 24 (ONNX Runtime >= 1.24), whose
    /// `TensorTypeAndShape_HasShape` tells a scalar from a value of unknown shape.
    pub has_shape_api: bool,
}

static API: OnceLock<Api> = OnceLock::new();

/// Records the tables (first registration wins: ORT's tables live as long as the process).
pub fn init(ort: &'static OrtApi, ep: &'static OrtEpApi, has_shape_api: bool) -> &'static Api {
    API.get_or_init(|| Api { ort, ep, has_shape_api })
}

/// The tables; only called from entry points ORT reaches after `CreateEpFactories`.
pub fn api() -> &'static Api {
    API.get().expect("CreateEpFactories runs before any other entry point")
}

pub type Res<T> = Result<T, String>;

/// Turns an ORT status into a result, releasing it.
///
/// # Safety
/// `status` is null or a live status ORT returned.
pub unsafe fn check(status: Status) -> Res<()> {
    if status.0.is_null() {
        return Ok(());
    }
    let a = api();
    let msg = cstr((a.ort.GetErrorMessage)(status.0));
    (a.ort.ReleaseStatus)(status.0);
    Err(msg)
}

/// Copies a C string (null -> empty).
///
/// # Safety
/// `p` is null or points at a NUL-terminated string.
pub unsafe fn cstr(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

/// A new ORT status carrying `msg` (what every entry point returns on failure).
pub fn status(code: OrtErrorCode, msg: &str) -> Status {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    match API.get() {
        // SAFETY: CreateStatus copies the message.
        Some(a) => unsafe { (a.ort.CreateStatus)(code, c.as_ptr()) },
        None => Status::default(),
    }
}

/// Runs an entry point's body: `Err` and panics become a failed status naming the entry point,
/// so no Rust panic ever unwinds into ORT.
pub fn guard(what: &str, f: impl FnOnce() -> Res<()>) -> Status {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(())) => Status::default(),
        Ok(Err(msg)) => status(OrtErrorCode::ORT_FAIL, &format!("Bolt EP {what}: {msg}")),
        Err(p) => {
            status(OrtErrorCode::ORT_FAIL, &format!("Bolt EP {what}: internal error (panic: {})", panic_text(&p)))
        }
    }
}

/// Like [`guard`] for entry points that return a value instead of a status.
pub fn guard_value<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(fallback)
}

pub fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown payload".into())
}

/// Prints when `BOLT_ORT_VERBOSE` is set: for what runs without a session's OrtLogger (the
/// TVM entry points, factory set-up); an OrtEp logs through its session's logger instead.
pub fn verbose(msg: impl FnOnce() -> String) {
    if std::env::var_os("BOLT_ORT_VERBOSE").is_some_and(|v| !v.is_empty() && v != "0") {
        eprintln!("[bolt-plugin] {}", msg());
    }
}
