//! Bolt's framework-neutral C ABI: what hosts other than ONNX Runtime call (TVM's BYOC shim,
//! `plugin/python/bolt_tvm`). The unit of exchange is an ONNX model holding one offloaded
//! subgraph; tensors cross as DLPack `DLTensor`s.
//!
//! Shaped after CUTLASS's Operation interface: ask what Bolt would take
//! ([`bolt_partition_json`]), prepare once ([`bolt_module_create`], the plan), run many times
//! ([`bolt_module_run`]). Every entry point returns 0 on success; on failure a non-zero code and
//! a message for [`bolt_last_error`]. No panic crosses the boundary.

use crate::ep::{claimable, Runner};
use crate::graph::{copy_tensor, write_tensor};
use crate::options::{Device, Options};
use bolt::ir::{DType, Graph, Tensor};
use bolt::partition::HostNode;
use dlpark::ffi::{DLDataType, DLDataTypeCode, DLDeviceType, DLTensor};
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr, CString};

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Runs an entry point: `Err` and panics become code 1 and a message for [`bolt_last_error`].
fn entry(what: &str, f: impl FnOnce() -> Result<(), String>) -> i32 {
    let msg = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(())) => return 0,
        Ok(Err(m)) => format!("{what}: {m}"),
        Err(p) => format!("{what}: internal error (panic: {})", crate::api::panic_text(&p)),
    };
    LAST_ERROR.with(|e| *e.borrow_mut() = CString::new(msg.replace('\0', " ")).unwrap_or_default());
    1
}

/// The message of the last failed call on this thread ("" if none). Valid until the next
/// failing call on the same thread.
#[no_mangle]
pub extern "C" fn bolt_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

unsafe fn model_bytes<'a>(model: *const u8, len: usize) -> Result<&'a [u8], String> {
    if model.is_null() || len == 0 {
        return Err("no ONNX model bytes given".into());
    }
    Ok(std::slice::from_raw_parts(model, len))
}

fn to_c_string(s: String, out: *mut *mut c_char) -> Result<(), String> {
    if out.is_null() {
        return Err("null output pointer".into());
    }
    let c = CString::new(s).map_err(|e| e.to_string())?;
    unsafe { *out = c.into_raw() };
    Ok(())
}

/// Frees a string this library returned.
///
/// # Safety
/// `s` came from this library (or is null) and is freed once.
#[no_mangle]
pub unsafe extern "C" fn bolt_string_free(s: *mut c_char) {
    if !s.is_null() {
        drop(CString::from_raw(s));
    }
}

/// What Bolt takes from a model: JSON `{"partitions": [...], "host": [...]}`, where a partition
/// that Bolt's partitioner found but that is not [`claimable`] moves to `host` with its reason
/// (the decision ONNX Runtime's GetCapability makes, so both hosts offload the same
/// subgraphs). Free the string with [`bolt_string_free`].
///
/// # Safety
/// `model` points at `len` readable bytes; `json_out` is writable.
#[no_mangle]
pub unsafe extern "C" fn bolt_partition_json(model: *const u8, len: usize, json_out: *mut *mut c_char) -> i32 {
    entry("bolt_partition_json", || {
        let m = bolt::import::load_bytes(model_bytes(model, len)?, None).map_err(|e| e.to_string())?;
        let mut parts = bolt::partition::partition(&m.graph);
        let (take, reject): (Vec<_>, Vec<_>) =
            parts.partitions.into_iter().map(|p| (claimable(&m.graph, &p), p)).partition(|(ok, _)| ok.is_ok());
        parts.partitions = take.into_iter().map(|(_, p)| p).collect();
        for (why, p) in reject {
            let reason = format!("partition not claimable: {}", why.unwrap_err());
            let op_type = m.graph.nodes.iter().find(|n| n.name == p.anchor).map_or("?", |n| n.op.op_type()).to_string();
            parts.host.push(HostNode { node: p.anchor, op_type, reason });
        }
        to_c_string(serde_json::to_string(&parts).map_err(|e| e.to_string())?, json_out)
    })
}

/// One planned (or loaded) subgraph, ready to run. Inputs and outputs are the model's graph
/// inputs and outputs, in order.
pub struct BoltModule {
    graph: Graph,
    inputs: Vec<String>,
    outputs: Vec<String>,
    report: String,
    /// The CUDA ordinal of a [`Runner::Cuda`] module.
    device_id: usize,
    runner: Runner,
}

fn parse_options(json: *const c_char) -> Result<Options, String> {
    if json.is_null() {
        return Ok(Options::default());
    }
    let text = unsafe { CStr::from_ptr(json) }.to_str().map_err(|e| format!("options are not UTF-8: {e}"))?;
    if text.trim().is_empty() {
        return Ok(Options::default());
    }
    let v: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(text).map_err(|e| format!("options are not a JSON object: {e}"))?;
    let pairs: Vec<(String, String)> =
        v.into_iter().map(|(k, v)| (k, v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string()))).collect();
    Options::parse(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
}

/// Imports and plans a model (layout, padding, epilogue and back-to-back fusion); the plan's
/// report (JSON, as `bolt report --json` prints it, plus the kernel picks) is kept for
/// [`bolt_module_report`].
/// Options: a JSON object with the ONNX Runtime provider's keys (`device`, `verbose`); NULL for
/// the defaults.
///
/// # Safety
/// `model` points at `len` readable bytes; `options_json` is NULL or a NUL-terminated string;
/// `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn bolt_module_create(
    model: *const u8,
    len: usize,
    options_json: *const c_char,
    out: *mut *mut BoltModule,
) -> i32 {
    entry("bolt_module_create", || {
        if out.is_null() {
            return Err("null output pointer".into());
        }
        let options = module_options(options_json)?;
        let m = bolt::import::load_bytes(model_bytes(model, len)?, None).map_err(|e| e.to_string())?;
        let opts = bolt::plan::PlanOptions::default();
        let plan = bolt::plan::plan_with(&m.graph, &opts).map_err(|e| format!("planning failed: {e}"))?;
        let report = bolt::plan::report::report(&m.graph.name, &m.graph, &plan, &opts);
        let mut report = serde_json::to_value(&report).map_err(|e| e.to_string())?;
        report["kernels"] = kernel_picks(&plan.graph, &opts.bindings);
        let report = report.to_string();
        if options.verbose {
            eprintln!("[bolt] planned '{}': {}", m.graph.name, report);
        }
        let runner = if options.device == Device::Cuda {
            let (_, x) = crate::ep::build_for_gpu(&m.graph, &options, &m.graph.name)?;
            Runner::Cuda(std::sync::Mutex::new(x))
        } else {
            Runner::Planned
        };
        let module = BoltModule {
            inputs: m.graph.inputs.clone(),
            outputs: m.graph.outputs.clone(),
            graph: plan.graph,
            report,
            device_id: options.device_id as usize,
            runner,
        };
        *out = Box::into_raw(Box::new(module));
        Ok(())
    })
}

/// Checks the options every module entry point takes: the device is one a host other than
/// ONNX Runtime can use, and the ordinal exists on the reference device.
fn module_options(options_json: *const c_char) -> Result<Options, String> {
    let options = parse_options(options_json)?;
    match options.device {
        Device::Reference | Device::Cuda => {}
        Device::HostGpu => return Err("device=host_gpu is ONNX Runtime's test device, not a TVM target".into()),
    }
    if options.device_id != 0 && options.device != Device::Cuda {
        return Err(format!(
            "device_id={}: no such device (the reference device has only device 0)",
            options.device_id
        ));
    }
    Ok(options)
}

/// A fresh scratch directory for building or unpacking an artifact.
fn scratch_dir(what: &str) -> std::path::PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::env::temp_dir().join(format!("bolt-{what}-{}-{n}", std::process::id()))
}

/// Compile once: builds an ONNX model into a packed artifact (plan, weights in kernel layout,
/// and the kernel library for the `arch` option's archs: see `ep::build_archs`; a
/// `device=reference` build has no library and runs no nvcc). A host embeds the bytes and
/// runs them with [`bolt_module_load`], which plans and compiles nothing. Options as for
/// [`bolt_module_create`], plus `arch`, `dims` and `label` (what the manifest names as the
/// model's source). Free the bytes with [`bolt_bytes_free`].
///
/// # Safety
/// `model` points at `len` readable bytes; `options_json` is NULL or a NUL-terminated string;
/// `out` and `out_len` are writable.
#[no_mangle]
pub unsafe extern "C" fn bolt_artifact_build(
    model: *const u8,
    len: usize,
    options_json: *const c_char,
    out: *mut *mut u8,
    out_len: *mut usize,
) -> i32 {
    entry("bolt_artifact_build", || {
        if out.is_null() || out_len.is_null() {
            return Err("null output pointer".into());
        }
        let (options, label) = split_label(options_json)?;
        let options = module_options(options.as_ptr())?;
        let m = bolt::import::load_bytes(model_bytes(model, len)?, None).map_err(|e| e.to_string())?;
        let dir = scratch_dir("build");
        let packed = (|| {
            let mut opts = crate::ep::compile_options(&dir, &options, label.unwrap_or_else(|| m.graph.name.clone()));
            opts.archs = crate::ep::build_archs(&options);
            bolt::artifact::compile(&m.graph, &opts).map_err(|e| format!("'{}': {e}", m.graph.name))?;
            bolt::artifact::bundle::pack(&dir).map_err(|e| e.to_string())
        })();
        let _ = std::fs::remove_dir_all(&dir);
        let bytes = packed?.into_boxed_slice();
        *out_len = bytes.len();
        *out = Box::into_raw(bytes) as *mut u8;
        Ok(())
    })
}

/// The options without `label` (an option of [`bolt_artifact_build`] only), and the label.
fn split_label(options_json: *const c_char) -> Result<(CString, Option<String>), String> {
    if options_json.is_null() {
        return Ok((CString::default(), None));
    }
    let text = unsafe { CStr::from_ptr(options_json) }.to_str().map_err(|e| format!("options are not UTF-8: {e}"))?;
    if text.trim().is_empty() {
        return Ok((CString::default(), None));
    }
    let mut v: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(text).map_err(|e| format!("options are not a JSON object: {e}"))?;
    let label = v.remove("label").map(|l| l.as_str().map(str::to_string).unwrap_or_else(|| l.to_string()));
    let rest = serde_json::Value::Object(v).to_string();
    Ok((CString::new(rest).map_err(|e| e.to_string())?, label))
}

/// Frees bytes this library returned.
///
/// # Safety
/// `p` and `len` came from [`bolt_artifact_build`] (or `p` is null) and are freed once.
#[no_mangle]
pub unsafe extern "C" fn bolt_bytes_free(p: *mut u8, len: usize) {
    if !p.is_null() {
        drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, len)));
    }
}

/// Loads a packed artifact from [`bolt_artifact_build`] for the options' device: nothing is
/// planned or compiled (the reference device runs the artifact as `bolt run` does; the cuda
/// device loads its kernel library, which must hold kernels for this GPU or sm80 PTX).
///
/// # Safety
/// `packed` points at `len` readable bytes; `options_json` is NULL or a NUL-terminated string;
/// `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn bolt_module_load(
    packed: *const u8,
    len: usize,
    options_json: *const c_char,
    out: *mut *mut BoltModule,
) -> i32 {
    entry("bolt_module_load", || {
        if out.is_null() {
            return Err("null output pointer".into());
        }
        let options = module_options(options_json)?;
        if packed.is_null() || len == 0 {
            return Err("no packed artifact bytes given".into());
        }
        let dir = scratch_dir("load");
        // The directory only needs to live until the kernel library is loaded.
        let opened = bolt::artifact::bundle::unpack(std::slice::from_raw_parts(packed, len), &dir)
            .map_err(|e| e.to_string())
            .and_then(|()| {
                let manifest = bolt::artifact::Artifact::open(&dir).map_err(|e| e.to_string())?.manifest;
                crate::ep::open_artifact(&dir, &options).map(|(g, r)| (manifest, g, r))
            });
        let _ = std::fs::remove_dir_all(&dir);
        let (manifest, graph, runner) = opened?;
        let report = serde_json::json!({
            "loaded": {
                "model": manifest.model,
                "source": manifest.source,
                "archs": manifest.archs,
                "precision": manifest.precision,
                "bolt_version": manifest.bolt_version,
            },
            "device": options.device.to_string(),
        })
        .to_string();
        if options.verbose {
            eprintln!(
                "[bolt] loaded the packed artifact of '{}' ({} bytes; planned at build time): {report}",
                manifest.model, len
            );
        }
        let module = BoltModule {
            inputs: graph.inputs.clone(),
            outputs: graph.outputs.clone(),
            graph,
            report,
            device_id: options.device_id as usize,
            runner,
        };
        *out = Box::into_raw(Box::new(module));
        Ok(())
    })
}

/// The kernel each planned workload would run: the tuning database's entry (BOLT_TUNING_DB, else
/// `bolt-tune`'s default path) when it has one, else the analytic pick.
fn kernel_picks(planned: &Graph, bindings: &bolt::compile::DimBindings) -> serde_json::Value {
    let (uses, _) = bolt::plan::lower::workloads(planned, bindings);
    let path = bolt_profiler::db::Db::default_path();
    let db = if path.is_file() { bolt_profiler::db::Db::open(&path).ok() } else { None };
    let picks = bolt::compile::kernel_picks(&uses, db.as_ref());
    picks
        .into_iter()
        .map(|(node, problem, pick)| serde_json::json!({"node": node, "problem": problem, "pick": pick}))
        .collect()
}

/// The plan report of a module (JSON), with a `kernels` list from [`kernel_picks`]. Free with [`bolt_string_free`].
///
/// # Safety
/// `m` is a live module from [`bolt_module_create`]; `json_out` is writable.
#[no_mangle]
pub unsafe extern "C" fn bolt_module_report(m: *const BoltModule, json_out: *mut *mut c_char) -> i32 {
    entry("bolt_module_report", || {
        let m = m.as_ref().ok_or("null module")?;
        to_c_string(m.report.clone(), json_out)
    })
}

/// Frees a module.
///
/// # Safety
/// `m` came from [`bolt_module_create`] (or is null) and is freed once.
#[no_mangle]
pub unsafe extern "C" fn bolt_module_destroy(m: *mut BoltModule) {
    if !m.is_null() {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(Box::from_raw(m))));
    }
}

fn dtype_of(t: &DLTensor, name: &str) -> Result<DType, String> {
    let DLDataType { code, bits, lanes } = t.dtype;
    let d = match (code, bits) {
        _ if lanes != 1 => None,
        (DLDataTypeCode::FLOAT, 32) => Some(DType::F32),
        (DLDataTypeCode::FLOAT, 16) => Some(DType::F16),
        (DLDataTypeCode::FLOAT, 64) => Some(DType::F64),
        (DLDataTypeCode::BFLOAT, 16) => Some(DType::BF16),
        (DLDataTypeCode::INT, 64) => Some(DType::I64),
        (DLDataTypeCode::INT, 32) => Some(DType::I32),
        (DLDataTypeCode::INT, 16) => Some(DType::I16),
        (DLDataTypeCode::INT, 8) => Some(DType::I8),
        (DLDataTypeCode::UINT, 8) => Some(DType::U8),
        (DLDataTypeCode::BOOL, 8) => Some(DType::Bool),
        _ => None,
    };
    d.ok_or_else(|| {
        format!("tensor '{name}': DLPack dtype (code {}, bits {bits}, lanes {lanes}) is not supported", code.0)
    })
}

/// Shape of a DLTensor that Bolt can read as a dense row-major buffer in CPU memory.
unsafe fn checked_shape(t: &DLTensor, name: &str) -> Result<Vec<usize>, String> {
    checked_shape_on(t, name, None)
}

/// [`checked_shape`] in the memory of CUDA device `gpu` (`Some(ordinal)`) or the CPU (`None`).
unsafe fn checked_shape_on(t: &DLTensor, name: &str, gpu: Option<usize>) -> Result<Vec<usize>, String> {
    let (want, id, what) = match gpu {
        None => (DLDeviceType::CPU, t.device.device_id, "the reference device reads CPU memory only".to_string()),
        Some(o) => (DLDeviceType::CUDA, o as i32, format!("this module runs on CUDA device {o}")),
    };
    if t.device.device_type != want || t.device.device_id != id {
        return Err(format!(
            "tensor '{name}' is on DLPack device type {} id {}; {what}",
            t.device.device_type.0, t.device.device_id
        ));
    }
    let nd = usize::try_from(t.ndim).map_err(|_| format!("tensor '{name}': negative ndim"))?;
    let shape: Vec<i64> = if nd == 0 { Vec::new() } else { std::slice::from_raw_parts(t.shape, nd).to_vec() };
    let dims: Vec<usize> = shape
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("tensor '{name}': negative dim {d}")))
        .collect::<Result<_, _>>()?;
    if !t.strides.is_null() && nd > 0 {
        let strides = std::slice::from_raw_parts(t.strides, nd);
        let mut want = 1i64;
        for i in (0..nd).rev() {
            if dims[i] != 1 && strides[i] != want {
                return Err(format!("tensor '{name}' is not compact row-major (strides {strides:?}, shape {shape:?})"));
            }
            want *= shape[i];
        }
    }
    Ok(dims)
}

unsafe fn data_ptr(t: &DLTensor) -> *mut c_void {
    (t.data as *mut u8).add(t.byte_offset as usize) as *mut c_void
}

/// Runs a module: `inputs[i]` is graph input i, `outputs[j]` graph output j, preallocated by
/// the caller with the shapes and types the model declares (destination-passing style, as
/// TVM's `call_dps_packed` calls). `stream` is the host's stream for the tensors' device
/// (unused by the reference device).
///
/// # Safety
/// `m` is a live module; `inputs`/`outputs` point at `n_inputs`/`n_outputs` live DLTensors.
#[no_mangle]
pub unsafe extern "C" fn bolt_module_run(
    m: *const BoltModule,
    inputs: *const *const DLTensor,
    n_inputs: usize,
    outputs: *const *mut DLTensor,
    n_outputs: usize,
    stream: *mut c_void,
) -> i32 {
    entry("bolt_module_run", || {
        let m = m.as_ref().ok_or("null module")?;
        if n_inputs != m.inputs.len() || n_outputs != m.outputs.len() {
            return Err(format!(
                "'{}' takes {} input(s) and {} output(s), was given {n_inputs} and {n_outputs}",
                m.graph.name,
                m.inputs.len(),
                m.outputs.len()
            ));
        }
        if let Runner::Cuda(x) = &m.runner {
            let ordinal = &m.device_id;
            // The GPU: DLTensors in this GPU's memory, work queued on the host's stream.
            use bolt::runtime::cuda::DeviceTensor;
            let tensor = |t: *const DLTensor, name: &String, what: &str| -> Result<DeviceTensor, String> {
                let t = t.as_ref().ok_or_else(|| format!("{what} '{name}' is null"))?;
                let shape = checked_shape_on(t, name, Some(*ordinal))?;
                Ok(DeviceTensor { name: name.clone(), dtype: dtype_of(t, name)?, shape, ptr: data_ptr(t) as u64 })
            };
            let ins: Vec<DeviceTensor> = m
                .inputs
                .iter()
                .enumerate()
                .map(|(i, n)| tensor(*inputs.add(i), n, "input"))
                .collect::<Result<_, _>>()?;
            let outs: Vec<DeviceTensor> = m
                .outputs
                .iter()
                .enumerate()
                .map(|(j, n)| tensor(*outputs.add(j), n, "output"))
                .collect::<Result<_, _>>()?;
            let mut x = x.lock().map_err(|_| "an earlier run of this module panicked".to_string())?;
            // SAFETY: the host keeps its tensors alive until its stream has run the work;
            // `stream` is its stream for this GPU (null: the default stream).
            return x.enqueue(&ins, &outs, stream as usize).map_err(|e| e.to_string());
        }
        let mut feeds: HashMap<String, Tensor> = HashMap::new();
        for (i, name) in m.inputs.iter().enumerate() {
            let t = (*inputs.add(i)).as_ref().ok_or_else(|| format!("input {i} ('{name}') is null"))?;
            let dims = checked_shape(t, name)?;
            let tensor = copy_tensor(dtype_of(t, name)?, dims, data_ptr(t), name)?;
            feeds.insert(name.clone(), tensor);
        }
        let mut results = m.runner.run(&m.graph, &feeds)?;
        for (j, name) in m.outputs.iter().enumerate() {
            let t = (*outputs.add(j)).as_ref().ok_or_else(|| format!("output {j} ('{name}') is null"))?;
            let dims = checked_shape(t, name)?;
            let dtype = dtype_of(t, name)?;
            let r = results.remove(name).ok_or_else(|| format!("output '{name}' was not computed"))?;
            if r.dtype() != dtype || r.shape != dims {
                return Err(format!(
                    "output '{name}': Bolt computed {}{:?} but the destination is {dtype}{dims:?}",
                    r.dtype(),
                    r.shape
                ));
            }
            write_tensor(&r, data_ptr(t));
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_entry_point_and_reason() {
        let mut out: *mut BoltModule = std::ptr::null_mut();
        let rc = unsafe { bolt_module_create(b"not onnx".as_ptr(), 8, std::ptr::null(), &mut out) };
        assert_eq!(rc, 1);
        assert!(out.is_null());
        let msg = unsafe { CStr::from_ptr(bolt_last_error()) }.to_string_lossy().into_owned();
        assert!(msg.starts_with("bolt_module_create: "), "{msg}");
        let bad = CString::new(r#"{"device": "tpu"}"#).unwrap();
        let rc = unsafe { bolt_module_create(b"x".as_ptr(), 1, bad.as_ptr(), &mut out) };
        assert_eq!(rc, 1);
        let msg = unsafe { CStr::from_ptr(bolt_last_error()) }.to_string_lossy().into_owned();
        assert!(msg.contains("'tpu'"), "{msg}");
        // ORT-only devices and ordinals that do not exist are refused before the model is read.
        for (json, want) in [
            (r#"{"device": "host_gpu"}"#, "not a TVM target"),
            (r#"{"device_id": "1"}"#, "device_id=1: no such device"),
        ] {
            let o = CString::new(json).unwrap();
            let rc = unsafe { bolt_module_create(b"x".as_ptr(), 1, o.as_ptr(), &mut out) };
            assert_eq!(rc, 1);
            let msg = unsafe { CStr::from_ptr(bolt_last_error()) }.to_string_lossy().into_owned();
            assert!(msg.contains(want), "{msg}");
        }
    }

    #[test]
    fn dlpack_dtypes_and_layouts_are_checked() {
        let mut shape = [2i64, 3];
        let mut strides = [1i64, 2]; // column-major
        let mut data = [0f32; 6];
        let t = DLTensor {
            data: data.as_mut_ptr() as *mut c_void,
            device: dlpark::ffi::DLDevice { device_type: DLDeviceType::CPU, device_id: 0 },
            ndim: 2,
            dtype: DLDataType { code: DLDataTypeCode::FLOAT, bits: 32, lanes: 1 },
            shape: shape.as_mut_ptr(),
            strides: strides.as_mut_ptr(),
            byte_offset: 0,
        };
        assert_eq!(dtype_of(&t, "x").unwrap(), DType::F32);
        let e = unsafe { checked_shape(&t, "x") }.unwrap_err();
        assert!(e.contains("not compact"), "{e}");
        let dense = DLTensor { strides: std::ptr::null_mut(), ..t };
        assert_eq!(unsafe { checked_shape(&dense, "x") }.unwrap(), vec![2, 3]);
        let gpu = DLTensor { device: dlpark::ffi::DLDevice { device_type: DLDeviceType::CUDA, device_id: 0 }, ..dense };
        assert!(unsafe { checked_shape(&gpu, "x") }.unwrap_err().contains("CPU memory only"));
        let vec4 = DLTensor { dtype: DLDataType { code: DLDataTypeCode::FLOAT, bits: 32, lanes: 4 }, ..dense };
        assert!(dtype_of(&vec4, "x").unwrap_err().contains("lanes 4"));
    }
}
