//! The planner's cost model over the one device description ([`DeviceSpec`], shared with the
//! profiler): a roofline per kernel with wave quantisation and launch cost,
//! after Welder (DRAM bytes moved decide whether fusing pays) and Roller (threadblock tiles
//! over SM slots decide how much of the machine works). Coarse on purpose: the planner only
//! compares alternatives built from the same numbers; the profiler measures the real thing.

use bolt_codegen::spec::{Arch, Element};
pub use bolt_profiler::device::DeviceSpec;
use serde::Serialize;

/// The tensor-core instruction family a kernel is built on, which decides the rate it reaches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum Mma {
    /// CUTLASS 2.x `mma.sync`: Bolt's sm80 kernels, and its back-to-back chains on every arch.
    #[default]
    Sync,
    /// CUTLASS 3.x warpgroup `wgmma` with TMA: Bolt's sm90a kernels. An sm80 GPU has none, and
    /// its kernels there are `mma.sync`.
    Wgmma,
}

impl Mma {
    /// What Bolt's single-GEMM/conv kernels use on `dev`'s architecture.
    pub fn native(dev: &DeviceSpec) -> Mma {
        match dev.arch {
            Arch::Sm90 => Mma::Wgmma,
            Arch::Sm80 => Mma::Sync,
        }
    }
}

/// Share of a datasheet peak that streaming kernels and tuned GEMMs sustain.
const SUSTAINED: f64 = 0.8;
/// `mma.sync` on an H100 reaches about 60% of the dense `wgmma` peak (it issues from one warp
/// at a time and cannot use TMA or the larger wgmma tiles): the rate Bolt's b2b chains run at
/// on Hopper, against the full rate of its sm90a kernels unfused.
const MMA_SYNC_SHARE_ON_SM90: f64 = 0.6;
/// Launch plus tail of one kernel in a stream.
pub const LAUNCH_S: f64 = 2.5e-6;

/// Sustained f16/bf16 tensor-core FLOP/s of `mma` kernels on `dev`.
pub fn mma_flops_per_s(dev: &DeviceSpec, mma: Mma) -> f64 {
    let share = match (dev.arch, mma) {
        (Arch::Sm90, Mma::Sync) => MMA_SYNC_SHARE_ON_SM90,
        _ => 1.0,
    };
    dev.peak_flops(Element::F16) * share * SUSTAINED
}

/// Sustained DRAM bytes/s on `dev`.
pub fn dram_bytes_per_s(dev: &DeviceSpec) -> f64 {
    dev.dram_bandwidth * SUSTAINED
}

/// One kernel's work: DRAM bytes, FLOPs, its threadblocks with how many fit on an SM, and the
/// instruction family it runs on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct KernelWork {
    pub bytes: f64,
    pub flops: f64,
    pub threadblocks: usize,
    pub threadblocks_per_sm: usize,
    pub mma: Mma,
}

impl KernelWork {
    /// Estimated seconds: launch + max(compute, memory). An SM with work runs at its full
    /// rate, so fewer threadblocks than SMs leave the rest idle, and a partial last wave takes
    /// as long as a full one. Memory bandwidth needs enough SMs issuing loads (one SM pulls
    /// about twice its fair share).
    pub fn seconds(&self, dev: &DeviceSpec) -> f64 {
        let sms = dev.sm_count as f64;
        let rate = mma_flops_per_s(dev, self.mma);
        let tbs = self.threadblocks.max(1) as f64;
        let per_sm = rate / sms;
        let compute = if tbs <= sms {
            self.flops / tbs / per_sm
        } else {
            let slots = sms * self.threadblocks_per_sm.max(1) as f64;
            let waves = (tbs / slots).ceil();
            self.flops / rate * (waves * slots / tbs)
        };
        let active_sms = tbs.min(sms);
        let bandwidth = dram_bytes_per_s(dev) * (2.0 * active_sms / sms).min(1.0);
        LAUNCH_S + compute.max(self.bytes / bandwidth)
    }
}

pub fn ceil_div(a: usize, b: usize) -> usize {
    a.div_ceil(b.max(1))
}
