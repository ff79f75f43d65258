//! The planner's cost model: a roofline per kernel with wave quantisation and launch cost,
//! after Welder (DRAM bytes moved decide whether fusing pays) and Roller (threadblock tiles
//! over SM slots decide how much of the machine works). Coarse on purpose: the planner only
//! compares alternatives built from the same numbers; the profiler measures the real thing.

use serde::Serialize;

/// What the cost model needs to know about a GPU.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Device {
    pub name: &'static str,
    pub sms: usize,
    /// Sustained DRAM bandwidth (datasheet peak x ~0.8, what streaming kernels reach).
    pub dram_bytes_per_s: f64,
    /// Sustained f16 tensor-core rate of CUTLASS 2.x (mma.sync) kernels, which is what the
    /// back-to-back kernels are.
    pub mma_flops_per_s: f64,
    /// Launch plus tail of one kernel in a stream.
    pub launch_s: f64,
}

impl Device {
    /// H100 SXM5: 132 SMs, 3.35 TB/s HBM3, 989 TFLOP/s dense f16 with wgmma; mma.sync code
    /// reaches about 60% of that.
    pub fn h100() -> Device {
        Device {
            name: "H100-SXM5",
            sms: 132,
            dram_bytes_per_s: 3.35e12 * 0.8,
            mma_flops_per_s: 989e12 * 0.6 * 0.8,
            launch_s: 2.5e-6,
        }
    }

    /// A100 SXM4: 108 SMs, 2.04 TB/s HBM2e, 312 TFLOP/s dense f16.
    pub fn a100() -> Device {
        Device {
            name: "A100-SXM4",
            sms: 108,
            dram_bytes_per_s: 2.04e12 * 0.8,
            mma_flops_per_s: 312e12 * 0.8,
            launch_s: 2.5e-6,
        }
    }

    pub fn by_name(name: &str) -> Option<Device> {
        match name.to_ascii_lowercase().as_str() {
            "h100" | "sm90" => Some(Device::h100()),
            "a100" | "sm80" => Some(Device::a100()),
            _ => None,
        }
    }
}

/// One kernel's work: DRAM bytes, FLOPs, and its threadblocks with how many fit on an SM.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct KernelWork {
    pub bytes: f64,
    pub flops: f64,
    pub threadblocks: usize,
    pub threadblocks_per_sm: usize,
}

impl KernelWork {
    /// Estimated seconds: launch + max(compute, memory). An SM with work runs at its full
    /// rate, so fewer threadblocks than SMs leave the rest idle, and a partial last wave takes
    /// as long as a full one. Memory bandwidth needs enough SMs issuing loads (one SM pulls
    /// about twice its fair share).
    pub fn seconds(&self, dev: &Device) -> f64 {
        let sms = dev.sms as f64;
        let tbs = self.threadblocks.max(1) as f64;
        let per_sm = dev.mma_flops_per_s / sms;
        let compute = if tbs <= sms {
            self.flops / tbs / per_sm
        } else {
            let slots = sms * self.threadblocks_per_sm.max(1) as f64;
            let waves = (tbs / slots).ceil();
            self.flops / dev.mma_flops_per_s * (waves * slots / tbs)
        };
        let active_sms = tbs.min(sms);
        let bandwidth = dev.dram_bytes_per_s * (2.0 * active_sms / sms).min(1.0);
        dev.launch_s + compute.max(self.bytes / bandwidth)
    }
}

pub fn ceil_div(a: usize, b: usize) -> usize {
    a.div_ceil(b.max(1))
}
