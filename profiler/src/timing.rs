//! Timing candidates on a GPU (the light profiler proper, Bolt §3.2.2): the pre-generated
//! kernel library is loaded once; per workload the analytic top-k are timed with CUDA events
//! after a warm-up, cycling through input buffers whose total exceeds L2 (so no run reads
//! operands another left in L2), median of repeats; `can_implement` refusals and kernels the
//! library lacks are skipped with the reason; the winner's output is checked against a CPU
//! reference on sampled elements.
//!
//! The GPU side ([`cuda::CudaTimer`]) needs the `cuda` feature and a driver. The plan, the
//! statistics and the CPU reference are plain Rust and tested here without a GPU.

use bolt_codegen::spec::{Alignment, Element, KernelSpec, Layout};
use rand::{Rng, SeedableRng};

use crate::analytic::Ranked;
use crate::device::DeviceSpec;
use crate::workload::{Problem, Workload};

/// How candidates are timed.
#[derive(Clone, Debug, PartialEq)]
pub struct TimingPlan {
    /// Candidates timed per workload (the analytic top-k).
    pub top_k: usize,
    /// Launches before timing (clocks up, instruction cache, lazy module loading).
    pub warmup: u32,
    /// Timed samples; the median is reported.
    pub repeats: u32,
    /// Input buffer sets are rotated until their total exceeds this (twice the L2).
    pub rotate_bytes: usize,
    /// Output elements compared with the CPU reference for the winner.
    pub check_samples: usize,
}

/// Default number of candidates timed per workload.
pub const DEFAULT_TOP_K: usize = 8;

/// Host time per launch when launches queue back to back (driver call + ABI dispatch): the
/// floor of a timed run of a tiny kernel.
const LAUNCH_HOST_S: f64 = 4e-6;
/// Pageable host-to-device copy bandwidth (PCIe 4/5 x16 in practice).
const H2D_BANDWIDTH: f64 = 10e9;
/// CPU reference throughput for the sampled check (f64 multiply-adds per second).
const CPU_REFERENCE_FLOPS: f64 = 1e9;

impl TimingPlan {
    pub fn new(device: &DeviceSpec) -> TimingPlan {
        TimingPlan {
            top_k: DEFAULT_TOP_K,
            warmup: 5,
            repeats: 20,
            rotate_bytes: 2 * device.l2_bytes,
            check_samples: 256,
        }
    }

    /// Seconds of a measured tuning of `workload` whose candidates have the analytic
    /// `estimates` (fastest first): input upload, warm-up and timed launches of the top-k
    /// (each launch at least [`LAUNCH_HOST_S`]), one verification run and its CPU check.
    pub fn estimated_seconds(&self, workload: &Workload, estimates: &[f64]) -> f64 {
        let sets = self.buffer_sets(workload);
        let upload = (sets * input_bytes(workload)) as f64 / H2D_BANDWIDTH;
        let launches = (self.warmup as usize + self.repeats as usize * sets) as f64;
        let timed: f64 = estimates.iter().take(self.top_k).map(|t| launches * t.max(LAUNCH_HOST_S)).sum();
        let check = 2.0 * self.check_samples as f64 * workload.gemm_view().k as f64 / CPU_REFERENCE_FLOPS;
        let first = estimates.first().copied().unwrap_or(0.0);
        upload + timed + first + check
    }

    /// Input buffer sets (A and B) to rotate through so that together they exceed
    /// `rotate_bytes` (at least 1, at most 64).
    pub fn buffer_sets(&self, workload: &Workload) -> usize {
        let per_set = input_bytes(workload).max(1);
        self.rotate_bytes.div_ceil(per_set).clamp(1, 64)
    }
}

/// Bytes of A and B of one run.
pub fn input_bytes(w: &Workload) -> usize {
    let (a, b) = operand_lens(w);
    (a + b) * w.types.input.size_bytes()
}

/// Element counts of A, B (inputs).
pub fn operand_lens(w: &Workload) -> (usize, usize) {
    match w.problem {
        Problem::Gemm(p) => {
            let bt = p.batch.max(1) as usize;
            ((p.m * p.k) as usize * bt, (p.k * p.n) as usize * bt)
        }
        Problem::Conv2d(p) => {
            let g = p.groups.max(1) as usize;
            ((p.n * p.h * p.w * p.c) as usize, p.k as usize * (p.r * p.s) as usize * (p.c as usize / g))
        }
    }
}

/// Element count of D.
pub fn output_len(w: &Workload) -> usize {
    match w.problem {
        Problem::Gemm(p) => (p.m * p.n * p.batch.max(1)) as usize,
        Problem::Conv2d(p) => (p.n * p.p * p.q * p.k) as usize,
    }
}

/// Median of the samples (`None` if empty); NaNs sort last.
pub fn median(samples: &[f64]) -> Option<f64> {
    if samples.is_empty() {
        return None;
    }
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 { v[mid] } else { (v[mid - 1] + v[mid]) / 2.0 })
}

/// Whether a library kernel built as `library` can stand in for the ranked spec `wanted` when
/// timing a workload whose operands permit `alignment`: same arch, family, types, layouts and
/// tile, an alignment no wider than the problem's. The epilogue is not compared: mainloops
/// are timed with the library's plain epilogue, and only the winner is built with its real one.
pub fn serves(library: &KernelSpec, wanted: &KernelSpec, alignment: Alignment) -> bool {
    library.arch == wanted.arch
        && library.family == wanted.family
        && library.types == wanted.types
        && library.layouts == wanted.layouts
        && library.tile == wanted.tile
        && library.alignment.a <= alignment.a
        && library.alignment.b <= alignment.b
        && library.alignment.c <= alignment.c
}

/// Times candidates of workloads. `Err` is a reason the candidate was skipped.
pub trait Timer {
    /// Describes the device and library (for reports).
    fn describe(&self) -> String;
    /// Median seconds of one run of `ranked` on `workload`.
    fn time(&mut self, workload: &Workload, ranked: &Ranked) -> Result<f64, String>;
    /// Runs `ranked` once and compares sampled outputs with the CPU reference.
    fn verify(&mut self, workload: &Workload, ranked: &Ranked) -> Result<(), String>;
}

// ================================================================================================
// Host data and the CPU reference
// ================================================================================================

/// Rounds `x` to what the device stores for `e`.
pub fn quantize(x: f32, e: Element) -> f32 {
    match e {
        Element::F16 => half::f16::from_f32(x).to_f32(),
        Element::BF16 => half::bf16::from_f32(x).to_f32(),
        // tf32 math reads 10 mantissa bits; storage is f32 (the reference keeps f32: the
        // tolerance covers the difference).
        Element::F32 => x,
    }
}

/// Deterministic inputs in [-1, 1], already rounded to the element type.
pub fn host_values(len: usize, e: Element, seed: u64) -> Vec<f32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..len).map(|_| quantize(rng.gen_range(-1.0f32..1.0), e)).collect()
}

/// Little-endian bytes of `values` stored as `e`.
pub fn encode(values: &[f32], e: Element) -> Vec<u8> {
    match e {
        Element::F16 => values.iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes()).collect(),
        Element::BF16 => values.iter().flat_map(|&v| half::bf16::from_f32(v).to_le_bytes()).collect(),
        Element::F32 => values.iter().flat_map(|&v| v.to_le_bytes()).collect(),
    }
}

/// Values of little-endian bytes stored as `e`.
pub fn decode(bytes: &[u8], e: Element) -> Vec<f32> {
    match e {
        Element::F16 => bytes.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
        Element::BF16 => bytes.chunks_exact(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
        Element::F32 => bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
    }
}

/// Index of output element `i` (flat, in D's layout) as (batch, row, column) / (n, p, q, k).
fn output_coords(w: &Workload, i: usize) -> [usize; 4] {
    match w.problem {
        Problem::Gemm(p) => {
            let (m, n) = (p.m as usize, p.n as usize);
            let (b, r) = (i / (m * n), i % (m * n));
            let (row, col) = if w.layouts[2] == Layout::RowMajor { (r / n, r % n) } else { (r % m, r / m) };
            [b, row, col, 0]
        }
        Problem::Conv2d(p) => {
            let (pp, q, k) = (p.p as usize, p.q as usize, p.k as usize);
            [i / (pp * q * k), i / (q * k) % pp, i / k % q, i % k]
        }
    }
}

/// The plain-epilogue reference (`alpha * acc`, alpha = 1) of output element `i`, in f64.
pub fn reference_element(w: &Workload, a: &[f32], b: &[f32], i: usize) -> f64 {
    let c = output_coords(w, i);
    match w.problem {
        Problem::Gemm(p) => {
            let (m, n, k) = (p.m as usize, p.n as usize, p.k as usize);
            let (bt, row, col) = (c[0], c[1], c[2]);
            let a_at = |r: usize, kk: usize| match w.layouts[0] {
                Layout::RowMajor => a[bt * m * k + r * k + kk],
                Layout::ColumnMajor => a[bt * m * k + kk * m + r],
            };
            let b_at = |kk: usize, col: usize| match w.layouts[1] {
                Layout::RowMajor => b[bt * k * n + kk * n + col],
                Layout::ColumnMajor => b[bt * k * n + col * k + kk],
            };
            (0..k).map(|kk| a_at(row, kk) as f64 * b_at(kk, col) as f64).sum()
        }
        Problem::Conv2d(p) => {
            let [nn, pp, q, kk] = c;
            let g = p.groups.max(1) as usize;
            let (cg, kg) = (p.c as usize / g, p.k as usize / g);
            let group = kk / kg;
            let (h, wd, ch) = (p.h as i64, p.w as i64, p.c as usize);
            let mut acc = 0.0f64;
            for r in 0..p.r as usize {
                for s in 0..p.s as usize {
                    let y = pp as i64 * p.stride_h as i64 - p.pad_h as i64 + r as i64 * p.dilation_h as i64;
                    let x = q as i64 * p.stride_w as i64 - p.pad_w as i64 + s as i64 * p.dilation_w as i64;
                    if y < 0 || x < 0 || y >= h || x >= wd {
                        continue;
                    }
                    for ci in 0..cg {
                        let act = a[((nn * h as usize + y as usize) * wd as usize + x as usize) * ch + group * cg + ci];
                        let filt = b[((kk * p.r as usize + r) * p.s as usize + s) * cg + ci];
                        acc += act as f64 * filt as f64;
                    }
                }
            }
            acc
        }
    }
}

/// Compares `samples` output elements of `d` (evenly spread, first and last included) with
/// the reference. Tolerance: the output type's rounding plus f32 accumulation over K.
/// The epilogue's extra operands a timed kernel reads: a bias per output channel and a source
/// C of D's shape, each only when the workload's epilogue reads it (else empty). Kernels with
/// a bias or C refuse null pointers: without these no such kernel could be timed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EpilogueOperands {
    pub bias: Vec<f32>,
    pub c: Vec<f32>,
}

impl EpilogueOperands {
    pub fn for_workload(w: &Workload) -> EpilogueOperands {
        let e = w.types.output;
        let channels = match w.problem {
            Problem::Gemm(p) => p.n as usize,
            Problem::Conv2d(p) => p.k as usize,
        };
        EpilogueOperands {
            bias: if w.epilogue.expr.reads_bias() { host_values(channels, e, 3) } else { Vec::new() },
            c: if w.epilogue.expr.reads_source() { host_values(output_len(w), e, 4) } else { Vec::new() },
        }
    }
}

/// Output element `i` through the workload's epilogue (alpha = beta = 1), in f64.
pub fn reference_with_epilogue(w: &Workload, a: &[f32], b: &[f32], ops: &EpilogueOperands, i: usize) -> f64 {
    let coords = output_coords(w, i);
    let channel = match w.problem {
        Problem::Gemm(_) => coords[2],
        Problem::Conv2d(_) => coords[3],
    };
    let env = bolt_codegen::epilogue::EvalEnv {
        acc: reference_element(w, a, b, i),
        alpha: 1.0,
        beta: 1.0,
        source: ops.c.get(i).copied().unwrap_or(0.0) as f64,
        bias: ops.bias.get(channel).copied().unwrap_or(0.0) as f64,
    };
    w.epilogue.expr.eval(&env)
}

pub fn check_output(
    w: &Workload,
    a: &[f32],
    b: &[f32],
    ops: &EpilogueOperands,
    d: &[f32],
    samples: usize,
) -> Result<(), String> {
    let len = output_len(w);
    if d.len() != len {
        return Err(format!("output has {} elements, expected {len}", d.len()));
    }
    let k = w.gemm_view().k as f64;
    let rel = match w.types.output {
        Element::F16 => 4e-3,
        Element::BF16 => 1.6e-2,
        Element::F32 => 1e-3,
    };
    let steps = samples.clamp(1, len);
    for s in 0..steps {
        let i = if steps == 1 { 0 } else { s * (len - 1) / (steps - 1) };
        let want = reference_with_epilogue(w, a, b, ops, i);
        let got = d[i] as f64;
        let tol = rel * want.abs() + 2e-3 * k.sqrt() + 1e-3;
        if !got.is_finite() || (got - want).abs() > tol {
            return Err(format!("output element {i}: {got} vs reference {want} (tolerance {tol:.3e})"));
        }
    }
    Ok(())
}

/// Runs the plain-epilogue computation on the CPU for all of D (small problems: tests).
pub fn reference_output(w: &Workload, a: &[f32], b: &[f32]) -> Vec<f32> {
    (0..output_len(w)).map(|i| reference_element(w, a, b, i) as f32).collect()
}

// ================================================================================================
// GPU (cudarc)
// ================================================================================================

#[cfg(feature = "cuda")]
pub mod cuda {
    //! CUDA-event timing of library kernels. Compiled with `--features cuda`; not run in this
    //! repository's tests (no GPU on the build machines).

    use std::ffi::c_void;
    use std::path::Path;
    use std::sync::Arc;

    use bolt_codegen::abi::BoltArgs;
    use bolt_codegen::loader::{Kernel, KernelLibrary, Params};
    use cudarc::driver::{sys, CudaContext, CudaSlice, CudaStream, DevicePtr};

    use super::{
        check_output, decode, encode, host_values, median, operand_lens, output_len, EpilogueOperands, Timer,
        TimingPlan,
    };
    use crate::analytic::Ranked;
    use crate::workload::{Problem, Workload};

    pub struct CudaTimer {
        ctx: Arc<CudaContext>,
        stream: Arc<CudaStream>,
        library: KernelLibrary,
        plan: TimingPlan,
        /// Inputs of the workload being tuned, shared by its top-k candidates.
        buffers: Option<Buffers>,
    }

    /// Device inputs (rotated sets), the output, and the host copy of set 0 for the reference.
    struct Buffers {
        problem: Problem,
        types: bolt_codegen::spec::Types,
        a: Vec<CudaSlice<u8>>,
        b: Vec<CudaSlice<u8>>,
        d: CudaSlice<u8>,
        host_a: Vec<f32>,
        host_b: Vec<f32>,
        /// The epilogue's bias and C (allocated only when it reads them).
        bias: Option<CudaSlice<u8>>,
        c: Option<CudaSlice<u8>>,
        host_ops: EpilogueOperands,
    }

    fn drv<T>(what: &str, r: Result<T, cudarc::driver::DriverError>) -> Result<T, String> {
        r.map_err(|e| format!("{what}: {e}"))
    }

    impl CudaTimer {
        /// Opens GPU 0 and the kernel library at `library` (with its manifest next to it).
        pub fn new(library: &Path, plan: TimingPlan) -> Result<CudaTimer, String> {
            if let crate::device::Detection::NoGpu(reason) = crate::device::detect() {
                return Err(format!("no GPU: {reason}"));
            }
            let library = KernelLibrary::open(library).map_err(|e| e.to_string())?;
            let ctx = drv("cannot open GPU 0", CudaContext::new(0))?;
            let stream = ctx.default_stream();
            Ok(CudaTimer { ctx, stream, library, plan, buffers: None })
        }

        /// The library kernel that [`super::serves`] the ranked candidate.
        fn kernel(&self, w: &Workload, r: &Ranked) -> Result<Kernel, String> {
            self.library.kernels().iter().find(|k| super::serves(k.spec(), &r.spec, w.alignment)).cloned().ok_or_else(
                || format!("{} is not in the kernel library {}", r.candidate.name, self.library.path().display()),
            )
        }

        /// Makes sure `self.buffers` holds the inputs of `w` (allocated and uploaded once per
        /// workload: `plan.buffer_sets(w)` copies of A and B, together larger than 2x L2).
        fn prepare(&mut self, w: &Workload) -> Result<(), String> {
            if self.buffers.as_ref().is_some_and(|b| {
                b.problem == w.problem && b.types == w.types && b.host_ops == EpilogueOperands::for_workload(w)
            }) {
                return Ok(());
            }
            self.buffers = None; // free the previous workload's memory first
            let sets = self.plan.buffer_sets(w);
            let (la, lb) = operand_lens(w);
            let e = w.types.input;
            let host_a = host_values(la, e, 1);
            let host_b = host_values(lb, e, 2);
            let (ea, eb) = (encode(&host_a, e), encode(&host_b, e));
            let mut a = Vec::with_capacity(sets);
            let mut b = Vec::with_capacity(sets);
            for _ in 0..sets {
                a.push(drv("copy A", self.stream.clone_htod(&ea))?);
                b.push(drv("copy B", self.stream.clone_htod(&eb))?);
            }
            let d = drv("alloc D", self.stream.alloc_zeros::<u8>(output_len(w) * w.types.output.size_bytes()))?;
            let host_ops = EpilogueOperands::for_workload(w);
            let upload = |v: &[f32], what: &str| -> Result<Option<CudaSlice<u8>>, String> {
                if v.is_empty() {
                    return Ok(None);
                }
                Ok(Some(drv(what, self.stream.clone_htod(&encode(v, w.types.output)))?))
            };
            let (bias, c) = (upload(&host_ops.bias, "copy bias")?, upload(&host_ops.c, "copy C")?);
            self.buffers =
                Some(Buffers { problem: w.problem, types: w.types, a, b, d, host_a, host_b, bias, c, host_ops });
            Ok(())
        }

        fn workspace(&self, w: &Workload, kernel: &Kernel) -> Result<Option<CudaSlice<u8>>, String> {
            let bytes = match w.problem {
                Problem::Gemm(p) => kernel.workspace_size(&p),
                Problem::Conv2d(p) => kernel.workspace_size(&p),
            };
            if bytes == 0 {
                return Ok(None);
            }
            // Split-K / stream-K workspaces hold semaphores and partials: zeroed, as CUTLASS expects.
            Ok(Some(drv("alloc workspace", self.stream.alloc_zeros::<u8>(bytes))?))
        }

        /// Builds the kernel's params for buffer set `set` (once per workload and set: the
        /// timed loop only launches).
        fn initialize(
            &self,
            w: &Workload,
            kernel: &Kernel,
            workspace: Option<&CudaSlice<u8>>,
            set: usize,
        ) -> Result<Params<BoltArgs>, String> {
            let buf = self.buffers.as_ref().ok_or("no buffers prepared")?;
            let (a, _ga) = buf.a[set].device_ptr(&self.stream);
            let (b, _gb) = buf.b[set].device_ptr(&self.stream);
            let (d, _gd) = buf.d.device_ptr(&self.stream);
            let ws = workspace.map(|s| (s.device_ptr(&self.stream), s.len()));
            let (ws_ptr, ws_bytes) =
                ws.as_ref().map(|((p, _), len)| (*p as *mut c_void, *len)).unwrap_or((std::ptr::null_mut(), 0));
            let bias = buf.bias.as_ref().map(|s| s.device_ptr(&self.stream));
            let c = buf.c.as_ref().map(|s| s.device_ptr(&self.stream));
            let ptr = |p: &Option<(cudarc::driver::sys::CUdeviceptr, _)>| {
                p.as_ref().map_or(std::ptr::null(), |(p, _)| *p as *const c_void)
            };
            let args = BoltArgs {
                a: a as *const c_void,
                b: b as *const c_void,
                c: ptr(&c),
                bias: ptr(&bias),
                d: d as *mut c_void,
                alpha: 1.0,
                beta: 1.0,
            };
            let stream = self.stream.cu_stream() as *mut c_void;
            // SAFETY: buffers of the sizes the problem implies, of the kernel's element types,
            // on this context's stream; they outlive the params (synchronised before drop).
            unsafe {
                match w.problem {
                    Problem::Gemm(p) => kernel.initialize(&p, &args, ws_ptr, ws_bytes, stream),
                    Problem::Conv2d(p) => kernel.initialize(&p, &args, ws_ptr, ws_bytes, stream),
                }
            }
            .map_err(|e| e.to_string())
        }

        fn launch(&self, params: &mut Params<BoltArgs>) -> Result<(), String> {
            // SAFETY: the params' buffers and workspace are alive (owned by `self` and the
            // caller) until the stream is synchronised.
            unsafe { params.launch(self.stream.cu_stream() as *mut c_void) }.map_err(|e| e.to_string())
        }

        fn check_can_implement(w: &Workload, kernel: &Kernel) -> Result<(), String> {
            let status = match w.problem {
                Problem::Gemm(p) => kernel.can_implement(&p),
                Problem::Conv2d(p) => kernel.can_implement(&p),
            };
            if status.is_ok() {
                Ok(())
            } else {
                Err(format!("can_implement: {status}"))
            }
        }
    }

    impl Timer for CudaTimer {
        fn describe(&self) -> String {
            format!(
                "{} ({} kernels from {})",
                self.ctx.name().unwrap_or_else(|_| "GPU 0".into()),
                self.library.kernels().len(),
                self.library.path().display()
            )
        }

        fn time(&mut self, w: &Workload, r: &Ranked) -> Result<f64, String> {
            let kernel = self.kernel(w, r)?;
            Self::check_can_implement(w, &kernel)?;
            self.prepare(w)?;
            let workspace = self.workspace(w, &kernel)?;
            let sets = self.buffers.as_ref().map_or(1, |b| b.a.len());
            let mut params = (0..sets)
                .map(|set| self.initialize(w, &kernel, workspace.as_ref(), set))
                .collect::<Result<Vec<_>, _>>()?;
            for i in 0..self.plan.warmup as usize {
                self.launch(&mut params[i % sets])?;
            }
            drv("synchronize", self.stream.synchronize())?;
            let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
            let start = drv("event", self.ctx.new_event(flags))?;
            let end = drv("event", self.ctx.new_event(flags))?;
            let mut samples = Vec::with_capacity(self.plan.repeats as usize);
            for _ in 0..self.plan.repeats {
                drv("record", start.record(&self.stream))?;
                for p in params.iter_mut() {
                    self.launch(p)?;
                }
                drv("record", end.record(&self.stream))?;
                let ms = drv("elapsed", start.elapsed_ms(&end))?;
                samples.push(ms as f64 * 1e-3 / sets as f64);
            }
            drv("synchronize", self.stream.synchronize())?;
            median(&samples).ok_or_else(|| "no samples".into())
        }

        fn verify(&mut self, w: &Workload, r: &Ranked) -> Result<(), String> {
            let kernel = self.kernel(w, r)?;
            Self::check_can_implement(w, &kernel)?;
            self.prepare(w)?;
            let workspace = self.workspace(w, &kernel)?;
            let mut params = self.initialize(w, &kernel, workspace.as_ref(), 0)?;
            self.launch(&mut params)?;
            let buf = self.buffers.as_ref().ok_or("no buffers prepared")?;
            let bytes = drv("copy D back", self.stream.clone_dtoh(&buf.d))?;
            let d = decode(&bytes, w.types.output);
            check_output(w, &buf.host_a, &buf.host_b, &buf.host_ops, &d, self.plan.check_samples)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{Conv2dShape, F16_F32_F16};
    use bolt_codegen::epilogue::Epilogue;

    #[test]
    fn library_kernels_serve_ranked_specs_of_the_same_mainloop() {
        use bolt_codegen::builder::candidate_library_specs;
        use bolt_codegen::spec::Arch;
        let library = candidate_library_specs(&[Arch::Sm80, Arch::Sm90]);
        let rcr = [Layout::RowMajor, Layout::ColumnMajor, Layout::RowMajor];
        let bias_gelu = crate::workload::parse_epilogue("bias+gelu").unwrap();
        let dev = DeviceSpec::h100_sxm5_80gb();
        let w = Workload::gemm("w", (1280, 3072, 768, 1), F16_F32_F16, rcr, bias_gelu.clone()).unwrap();
        // Every ranked candidate of an aligned RCR GEMM is in the library, whatever the epilogue.
        for arch in [Arch::Sm80, Arch::Sm90] {
            let ranked = crate::analytic::rank(&w, &DeviceSpec::for_arch(arch), arch);
            let split = |r: &Ranked| matches!(r.spec.tile, bolt_codegen::spec::TileConfig::Sm80(t) if t.split_k > 1);
            for r in ranked.iter().filter(|r| !split(r)) {
                assert!(library.iter().any(|l| serves(l, &r.spec, w.alignment)), "{}", r.candidate.name);
            }
        }
        // Row-major B is not in the library; neither is anything for a 4-aligned problem.
        let rrr = Workload::gemm("w", (1280, 3072, 768, 1), F16_F32_F16, [Layout::RowMajor; 3], bias_gelu).unwrap();
        let top = &crate::analytic::rank(&rrr, &dev, Arch::Sm90)[0];
        assert!(!library.iter().any(|l| serves(l, &top.spec, rrr.alignment)));
        let top = &crate::analytic::rank(&w, &dev, Arch::Sm90)[0];
        assert!(!library.iter().any(|l| serves(l, &top.spec, Alignment { a: 4, b: 8, c: 8 })));
    }

    #[test]
    fn measured_tuning_time_estimate() {
        let dev = DeviceSpec::h100_sxm5_80gb();
        let plan = TimingPlan::new(&dev);
        let rrr = [Layout::RowMajor; 3];
        let big = Workload::gemm("b", (8192, 8192, 8192, 1), F16_F32_F16, rrr, Epilogue::plain()).unwrap();
        let est: Vec<f64> = crate::analytic::rank(&big, &dev, bolt_codegen::spec::Arch::Sm90)
            .iter()
            .map(|r| r.estimate.time_s)
            .collect();
        // 8 candidates x 25 launches x ~1.6 ms, plus 256 MB uploaded: about a third of a second.
        let t = plan.estimated_seconds(&big, &est);
        assert!((0.3..0.6).contains(&t), "{t}");
        // A small GEMM costs launch overhead: ~8 x (5 + 20 x sets) x 4 us.
        let small = Workload::gemm("s", (1280, 768, 768, 1), F16_F32_F16, rrr, Epilogue::plain()).unwrap();
        let t = plan.estimated_seconds(&small, &[5e-6; 20]);
        assert!(t < 0.2, "{t}");
    }

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn rotation_exceeds_l2() {
        let dev = DeviceSpec::h100_sxm5_80gb();
        let plan = TimingPlan::new(&dev);
        let small =
            Workload::gemm("s", (256, 256, 256, 1), F16_F32_F16, [Layout::RowMajor; 3], Epilogue::plain()).unwrap();
        let sets = plan.buffer_sets(&small);
        assert!(sets * input_bytes(&small) >= plan.rotate_bytes || sets == 64, "{sets}");
        let big =
            Workload::gemm("b", (8192, 8192, 8192, 1), F16_F32_F16, [Layout::RowMajor; 3], Epilogue::plain()).unwrap();
        assert_eq!(plan.buffer_sets(&big), 1);
    }

    #[test]
    fn reference_matches_a_direct_gemm_and_catches_errors() {
        for layouts in
            [[Layout::RowMajor; 3], [Layout::RowMajor, Layout::ColumnMajor, Layout::RowMajor], [Layout::ColumnMajor; 3]]
        {
            let w = Workload::gemm("g", (5, 7, 3, 2), F16_F32_F16, layouts, Epilogue::plain()).unwrap();
            let (la, lb) = operand_lens(&w);
            let a = host_values(la, Element::F16, 1);
            let b = host_values(lb, Element::F16, 2);
            let d = reference_output(&w, &a, &b);
            // Element (batch 1, row 4, col 6) computed directly.
            let idx = |l: Layout, r: usize, c: usize, rows: usize, cols: usize| {
                if l == Layout::RowMajor {
                    r * cols + c
                } else {
                    c * rows + r
                }
            };
            let want: f64 = (0..3)
                .map(|k| a[15 + idx(layouts[0], 4, k, 5, 3)] as f64 * b[21 + idx(layouts[1], k, 6, 3, 7)] as f64)
                .sum();
            let got = d[35 + idx(layouts[2], 4, 6, 5, 7)] as f64;
            assert!((got - want).abs() < 1e-5, "{layouts:?}: {got} vs {want}");
            let rounded: Vec<f32> = d.iter().map(|&x| quantize(x, Element::F16)).collect();
            check_output(&w, &a, &b, &EpilogueOperands::default(), &rounded, 1000).unwrap();
            let mut wrong = rounded.clone();
            wrong[69] += 0.5;
            assert!(check_output(&w, &a, &b, &EpilogueOperands::default(), &wrong, 70).is_err());
        }
    }

    /// A timed kernel with a bias, C and an activation is checked through its epilogue: the
    /// plain GEMM (what the check compared with before, so such kernels could only fail) does
    /// not pass, the epilogue's value does. On an H100, bolt-tune timed no BERT-base GEMM: each
    /// reads a bias and the timer passed none.
    #[test]
    fn outputs_are_checked_through_the_epilogue_with_its_operands() {
        use bolt_codegen::epilogue::{Activation, NormalForm};
        let form = NormalForm { beta_source: true, bias: true, activation: Activation::Tanh, residual: None };
        let w = Workload::gemm("g", (6, 10, 4, 1), F16_F32_F16, [Layout::RowMajor; 3], Epilogue::new(form).unwrap())
            .unwrap();
        let ops = EpilogueOperands::for_workload(&w);
        assert_eq!((ops.bias.len(), ops.c.len()), (10, 60), "a bias per column, C of D's shape");
        let (la, lb) = operand_lens(&w);
        let (a, b) = (host_values(la, Element::F16, 1), host_values(lb, Element::F16, 2));
        let d: Vec<f32> = (0..60).map(|i| reference_with_epilogue(&w, &a, &b, &ops, i) as f32).collect();
        let i = 37; // row 3, column 7
        let want = (reference_element(&w, &a, &b, i) + ops.c[i] as f64 + ops.bias[7] as f64).tanh();
        assert!((d[i] as f64 - want).abs() < 1e-6, "{} vs {want}", d[i]);
        check_output(&w, &a, &b, &ops, &d, 60).unwrap();
        let plain = reference_output(&w, &a, &b);
        assert!(check_output(&w, &a, &b, &ops, &plain, 60).is_err());
        let none = Workload::gemm("p", (6, 10, 4, 1), F16_F32_F16, [Layout::RowMajor; 3], Epilogue::plain()).unwrap();
        assert_eq!(EpilogueOperands::for_workload(&none), EpilogueOperands::default());
    }

    #[test]
    fn conv_reference_handles_padding_stride_and_groups() {
        let mut s = Conv2dShape::new(1, 5, 5, 4, 4, 3, 3);
        s.pad = (1, 1);
        s.stride = (2, 2);
        s.groups = 2;
        let w = Workload::conv2d("c", s, F16_F32_F16, Epilogue::plain()).unwrap();
        let (la, lb) = operand_lens(&w);
        assert_eq!((la, lb), (100, 4 * 9 * 2));
        let a = vec![1.0; la];
        let b = vec![1.0; lb];
        let d = reference_output(&w, &a, &b);
        assert_eq!(d.len(), 3 * 3 * 4);
        // Corner output (0,0): 2x2 of the 3x3 window in bounds, 2 channels per group.
        assert_eq!(d[0], 8.0);
        // Centre (1,1): the whole window.
        assert_eq!(d[(3 + 1) * 4], 18.0);
        let bytes = encode(&d, Element::F16);
        assert_eq!(decode(&bytes, Element::F16), d);
    }
}
