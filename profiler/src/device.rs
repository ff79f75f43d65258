//! What the cost model knows about a GPU: built-in A100 and H100 descriptions from public
//! datasheets, and (with the `cuda` feature) the live device read through cudarc.

use bolt_codegen::spec::{Arch, Element};
use serde::{Deserialize, Serialize};

/// One GPU as the analytic model sees it. Bandwidths in bytes/s, throughputs in FLOP/s
/// (dense, no sparsity; one multiply-add = 2 FLOPs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceSpec {
    pub name: String,
    /// The architecture its kernels are built for.
    pub arch: Arch,
    pub sm_count: u32,
    /// Shared memory per SM and the opt-in maximum per threadblock, bytes.
    pub smem_per_sm: usize,
    pub smem_per_block: usize,
    pub registers_per_sm: u32,
    pub max_threads_per_sm: u32,
    pub max_blocks_per_sm: u32,
    pub l2_bytes: usize,
    pub dram_bandwidth: f64,
    /// L2 -> SM bandwidth (all SMs together); not on datasheets, see the constants below.
    pub l2_bandwidth: f64,
    /// Shared-memory bandwidth per SM per clock, bytes (32 banks x 4 bytes).
    pub smem_bytes_per_clock: f64,
    /// Dense tensor-core peaks per input type.
    pub peak_f16: f64,
    pub peak_bf16: f64,
    pub peak_tf32: f64,
    /// Non-tensor f32 FMA peak (the SIMT depthwise kernel).
    pub peak_simt_f32: f64,
    /// The SM clock the peaks above correspond to, MHz.
    pub clock_mhz: f64,
}

/// L2 read bandwidth per SM clock, bytes: the A100 whitepaper gives 5120 bytes/clock (2.3x
/// V100). NVIDIA publishes no H100 figure; the same per-clock width is assumed (an estimate:
/// measured H100 L2 bandwidth is higher, which only favours large tiles less than it should).
pub const L2_BYTES_PER_CLOCK: f64 = 5120.0;

impl DeviceSpec {
    /// NVIDIA A100-SXM4-80GB. NVIDIA A100 datasheet (2021) and the A100 whitepaper: 108 SMs,
    /// 1410 MHz boost, 2039 GB/s HBM2e, 40 MB L2, FP16/BF16 tensor 312 TFLOP/s, TF32 156,
    /// FP32 19.5; CUDA C Programming Guide, compute capability 8.0: 164 KB smem per SM
    /// (163 KB per block opt-in), 64K registers, 2048 threads and 32 blocks per SM.
    pub fn a100_sxm4_80gb() -> DeviceSpec {
        DeviceSpec {
            name: "NVIDIA A100-SXM4-80GB".into(),
            arch: Arch::Sm80,
            sm_count: 108,
            smem_per_sm: 164 * 1024,
            smem_per_block: 163 * 1024,
            registers_per_sm: 65536,
            max_threads_per_sm: 2048,
            max_blocks_per_sm: 32,
            l2_bytes: 40 * 1024 * 1024,
            dram_bandwidth: 2039e9,
            l2_bandwidth: L2_BYTES_PER_CLOCK * 1410e6,
            smem_bytes_per_clock: 128.0,
            peak_f16: 312e12,
            peak_bf16: 312e12,
            peak_tf32: 156e12,
            peak_simt_f32: 19.5e12,
            clock_mhz: 1410.0,
        }
    }

    /// NVIDIA H100-SXM5-80GB. NVIDIA H100 datasheet and Hopper whitepaper: 132 SMs, 3.35 TB/s
    /// HBM3, 50 MB L2, dense FP16/BF16 tensor 989.4 TFLOP/s, TF32 494.7, FP32 66.9 (the
    /// datasheet's 1979/989 figures are with 2:4 sparsity), at a 1830 MHz boost clock
    /// (132 SMs x 2048 dense f16 FMA/clock x 2 x 1.83 GHz = 989 TFLOP/s); compute capability
    /// 9.0: 228 KB smem per SM (227 KB per block opt-in), 64K registers, 2048 threads and 32
    /// blocks per SM.
    pub fn h100_sxm5_80gb() -> DeviceSpec {
        DeviceSpec {
            name: "NVIDIA H100 80GB HBM3".into(),
            arch: Arch::Sm90,
            sm_count: 132,
            smem_per_sm: 228 * 1024,
            smem_per_block: 227 * 1024,
            registers_per_sm: 65536,
            max_threads_per_sm: 2048,
            max_blocks_per_sm: 32,
            l2_bytes: 50 * 1024 * 1024,
            dram_bandwidth: 3.35e12,
            l2_bandwidth: L2_BYTES_PER_CLOCK * 1830e6,
            smem_bytes_per_clock: 128.0,
            peak_f16: 989.4e12,
            peak_bf16: 989.4e12,
            peak_tf32: 494.7e12,
            peak_simt_f32: 66.9e12,
            clock_mhz: 1830.0,
        }
    }

    /// A built-in description by short name: `a100`, `h100` (case-insensitive).
    pub fn builtin(name: &str) -> Option<DeviceSpec> {
        match name.to_ascii_lowercase().as_str() {
            "a100" | "a100-sxm4-80gb" | "sm80" => Some(DeviceSpec::a100_sxm4_80gb()),
            "h100" | "h100-sxm5-80gb" | "sm90" => Some(DeviceSpec::h100_sxm5_80gb()),
            _ => None,
        }
    }

    /// The built-in device of an architecture.
    pub fn for_arch(arch: Arch) -> DeviceSpec {
        match arch {
            Arch::Sm80 => DeviceSpec::a100_sxm4_80gb(),
            Arch::Sm90 => DeviceSpec::h100_sxm5_80gb(),
        }
    }

    /// Dense tensor-core peak for an input element type (f32 runs as tf32).
    pub fn peak_flops(&self, input: Element) -> f64 {
        match input {
            Element::F16 => self.peak_f16,
            Element::BF16 => self.peak_bf16,
            Element::F32 => self.peak_tf32,
        }
    }

    pub fn clock_hz(&self) -> f64 {
        self.clock_mhz * 1e6
    }
}

/// Whether a GPU was found.
#[derive(Clone, Debug, PartialEq)]
pub enum Detection {
    Found(DeviceSpec),
    /// No usable GPU, with why (no `cuda` feature, no driver, no device, ...).
    NoGpu(String),
}

/// Looks for GPU 0. Never panics: without the `cuda` feature, a driver library or a device
/// the answer is [`Detection::NoGpu`] with the reason.
pub fn detect() -> Detection {
    #[cfg(feature = "cuda")]
    {
        live::detect()
    }
    #[cfg(not(feature = "cuda"))]
    {
        Detection::NoGpu("built without the `cuda` feature (cargo build --features cuda)".into())
    }
}

#[cfg(feature = "cuda")]
mod live {
    use super::{Detection, DeviceSpec};
    use cudarc::driver::{sys::CUdevice_attribute as A, CudaContext};

    pub fn detect() -> Detection {
        // SAFETY: only tries to dlopen libcuda; cudarc's own loader panics when it is absent.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Detection::NoGpu("no CUDA driver library (libcuda.so) on this machine".into());
        }
        match std::panic::catch_unwind(query) {
            Ok(Ok(spec)) => Detection::Found(spec),
            Ok(Err(reason)) => Detection::NoGpu(reason),
            Err(_) => Detection::NoGpu("the CUDA driver could not be initialised".into()),
        }
    }

    fn query() -> Result<DeviceSpec, String> {
        let count = CudaContext::device_count().map_err(|e| format!("CUDA driver: {e}"))?;
        if count < 1 {
            return Err("the CUDA driver reports no device".into());
        }
        let ctx = CudaContext::new(0).map_err(|e| format!("cannot open GPU 0: {e}"))?;
        let attr = |a: A| ctx.attribute(a).map_err(|e| format!("device attribute {a:?}: {e}"));
        let major = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let base = match major {
            8 => DeviceSpec::a100_sxm4_80gb(),
            9 => DeviceSpec::h100_sxm5_80gb(),
            m => return Err(format!("compute capability {m}.x: Bolt's kernels are built for sm80 and sm90")),
        };
        let sm_count = attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
        let clock_khz = attr(A::CU_DEVICE_ATTRIBUTE_CLOCK_RATE)? as f64;
        let mem_khz = attr(A::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)? as f64;
        let bus_bits = attr(A::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH)? as f64;
        // Peaks scale with SMs and clock from the built-in part of the same generation.
        let scale = sm_count as f64 / base.sm_count as f64 * (clock_khz / 1e3).min(base.clock_mhz) / base.clock_mhz;
        // Double data rate: two transfers per memory clock.
        let dram =
            if mem_khz > 0.0 && bus_bits > 0.0 { 2.0 * mem_khz * 1e3 * bus_bits / 8.0 } else { base.dram_bandwidth };
        Ok(DeviceSpec {
            name: ctx.name().map_err(|e| format!("device name: {e}"))?,
            sm_count,
            smem_per_sm: attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)? as usize,
            smem_per_block: attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)? as usize,
            registers_per_sm: attr(A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR)? as u32,
            max_threads_per_sm: attr(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)? as u32,
            max_blocks_per_sm: attr(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR)? as u32,
            l2_bytes: attr(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as usize,
            dram_bandwidth: dram,
            l2_bandwidth: super::L2_BYTES_PER_CLOCK * (clock_khz / 1e3).min(base.clock_mhz) * 1e6,
            peak_f16: base.peak_f16 * scale,
            peak_bf16: base.peak_bf16 * scale,
            peak_tf32: base.peak_tf32 * scale,
            peak_simt_f32: base.peak_simt_f32 * scale,
            clock_mhz: (clock_khz / 1e3).min(base.clock_mhz),
            ..base
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_match_the_workloads_readme() {
        let a = DeviceSpec::builtin("a100").unwrap();
        assert_eq!((a.sm_count, a.peak_f16, a.peak_tf32), (108, 312e12, 156e12));
        let h = DeviceSpec::builtin("H100").unwrap();
        assert_eq!(h.sm_count, 132);
        // 132 SMs x 2048 FMA/clock x 2 FLOPs x 1.83 GHz.
        let derived = 132.0 * 2048.0 * 2.0 * h.clock_hz();
        assert!((derived / h.peak_f16 - 1.0).abs() < 0.01, "{derived}");
        assert!(DeviceSpec::builtin("v100").is_none());
    }

    #[test]
    fn detection_never_panics() {
        match detect() {
            Detection::Found(d) => assert!(d.sm_count > 0),
            Detection::NoGpu(reason) => assert!(!reason.is_empty()),
        }
    }
}
