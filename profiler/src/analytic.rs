//! Analytic pre-ranking (Roller/Welder-style micro performance model): an estimated run time
//! for every hardware-native candidate of a workload, from tiles, waves, memory traffic and
//! tensor-core throughput. Only the top few are timed on a GPU; with no GPU the top-1 is the
//! pick.
//!
//! The model, per candidate (tile `tm x tn x tk`, `s` K-slices, `o` CTAs per SM):
//!
//! ```text
//! tiles      = ceil(M/tm) * ceil(N/tn) * batch * s          (sm90: rounded up to whole clusters)
//! L          = tiles on the busiest SM = ceil(tiles / SMs)  (wave quantization; stream-K: tiles*iters/SMs)
//! iter       = max(mma_cycles, smem_cycles) / MMA_EFFICIENCY + KITER_OVERHEAD      (one K step, cycles)
//! t_main     = L * ceil(K/(s*tk)) * iter / clock / latency_hiding / access_efficiency(alignment)
//! t_dram     = (DRAM bytes of A and B with L2 reuse over the concurrent super-tile + C/D/bias) / DRAM bw
//! t_l2       = (sum over tiles of the A and B tiles loaded, halved per multicast operand + split-K partials) / L2 bw
//! t          = smoothmax(t_main, t_dram, t_l2) + exposed epilogue + pipeline fill + split-K serialisation + launch
//! ```
//!
//! Every constant is named and commented below. The model only has to order candidates well
//! (Roller: the top 10 of such a model recall the best config for most operators); absolute
//! times are rough.

use bolt_codegen::b2b::{B2bCost, B2bSpec};
use bolt_codegen::candidates::{candidates, with_split_k, Candidate};
use bolt_codegen::spec::{Arch, Family, GroupMode, KernelSchedule, KernelSpec, Swizzle, TileConfig};
use bolt_codegen::stitch::ROW_CACHE_COLUMNS;
use bolt_codegen::validate::validate;
use serde::{Deserialize, Serialize};

use crate::device::DeviceSpec;
use crate::workload::{Problem, Workload};

/// Fraction of the tensor-core peak a well-fed mainloop sustains. sm80: CUTLASS's best f16
/// GEMMs reach ~300 of 312 TFLOP/s on A100 (Bolt paper §3.2.3). sm90: cuBLAS/CUTLASS reach
/// ~750-800 of 989 TFLOP/s on an 8192^3 GEMM on H100 (../shared/workloads/README.md).
const MMA_EFFICIENCY_SM80: f64 = 0.95;
const MMA_EFFICIENCY_SM90: f64 = 0.83;

/// Cycles per mainloop K step outside the MMAs: barriers, pointer/predicate updates,
/// pipeline bookkeeping. This is what makes K=64 tiles cheaper than K=32 and small tiles
/// less efficient on tensor cores. sm90's warp-specialised mainloop waits on mbarriers only.
const KITER_OVERHEAD_CYCLES_SM80: f64 = 24.0;
const KITER_OVERHEAD_CYCLES_SM90: f64 = 12.0;

/// sm80 (mma.sync): resident warps per SM needed to hide ldmatrix/mma latency; fewer warps
/// scale throughput down towards LATENCY_FLOOR (one warp).
const WARPS_FOR_PEAK_SM80: f64 = 8.0;
const LATENCY_FLOOR: f64 = 0.7;
/// sm90 convs run one consumer warp group per CTA (no second one to overlap with).
const SM90_SINGLE_CONSUMER_EFFICIENCY: f64 = 0.9;
/// sm80 cp.async pipelines (Little's law): the stages in flight on an SM (resident CTAs x
/// (stages - 1)) must cover a global load's latency with mainloop iterations; short of it,
/// throughput falls in proportion towards PIPELINE_FLOOR. Global load latency on A100 is
/// ~300-600 cycles (L2 hit to DRAM; Jia et al., "Dissecting the Ampere GPU architecture").
/// CUTLASS's tables are deep enough for every tile at full occupancy; the term matters for a
/// lone CTA per SM with short iterations, where it separates the 3/4/5-stage variants.
const LOAD_LATENCY_CYCLES: f64 = 600.0;
const PIPELINE_FLOOR: f64 = 0.6;
/// Pipelines with fewer than 3 stages cannot keep a load in flight behind the one being
/// consumed (sm80 2-stage SIMT depthwise; an sm90 tile whose epilogue leaves room for 2).
const SHALLOW_PIPELINE_EFFICIENCY: f64 = 0.85;

/// Registers per thread besides the accumulators (A/B fragments double-buffered, addresses,
/// predicates, epilogue): CUTLASS's 128-accumulator sm80 kernels compile to ~200-230.
const REGISTER_OVERHEAD_PER_THREAD: usize = 72;
/// sm90 kernels run one CTA per SM: CUTLASS's stage-count carveout
/// (`StageCountAutoCarveout`) fills the SM's shared memory with mainloop stages.
const SM90_CTAS_PER_SM: u32 = 1;

/// Efficiency of global loads per access width (bytes per thread access). 16-byte accesses
/// (alignment 8 for 16-bit data) are the fast path; narrower ones issue 2-4x the load
/// instructions and predicates (Bolt §3.2.3: padding alignment-2 convs to 8 gives 1.6-2x).
fn access_efficiency(bytes: usize) -> f64 {
    match bytes {
        16.. => 1.0,
        8..=15 => 0.75,
        4..=7 => 0.5,
        _ => 0.3,
    }
}

/// Fraction of L2 that holds operand tiles for reuse (the rest: output, other streams,
/// set conflicts).
const L2_USABLE_FRACTION: f64 = 0.5;
/// CUTLASS 3.x persistent schedulers rasterise along the longer grid dimension with swizzle 1
/// by default (`max_swizzle_size = 1`, sm90_tile_scheduler.hpp); Bolt's template keeps that.
const SM90_RASTER_SWIZZLE: u32 = 1;

/// Latency of the first global->shared load that fills a CTA's pipeline (DRAM latency plus
/// launch of the CTA), paid once per wave (sm80), once per kernel (sm90 persistent).
const PIPELINE_FILL_S: f64 = 0.8e-6;
/// Launching a kernel and draining it (same for every candidate; makes absolute times and
/// TFLOP/s of tiny problems realistic).
const LAUNCH_OVERHEAD_S: f64 = 2.5e-6;
/// Cluster launches constrain CTA placement to GPC-local groups: a small mainloop penalty
/// per extra CTA in the cluster.
const CLUSTER_PLACEMENT_PENALTY: f64 = 0.015;
/// Stream-K: extra scheduling work per K iteration and the partial-tile fixup (an f32 tile
/// written and read back per SM that ends mid-tile).
const STREAMK_OVERHEAD: f64 = 0.04;
/// Sharpness of the smooth maximum of compute and memory times (p-norm): 4 is close to a
/// hard roofline but still prefers, among memory-bound candidates, the one with less compute.
const ROOFLINE_SHARPNESS: f64 = 4.0;

/// Serial split-K variants tried for sm80 when a problem has fewer output tiles than SMs.
const SPLIT_K_FACTORS: [u32; 4] = [2, 4, 8, 16];
/// A K slice must keep at least this many mainloop iterations (pipeline depth).
const MIN_K_ITERS_PER_SLICE: u64 = 4;

/// Estimated time of one candidate on one problem, with the terms it came from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    pub time_s: f64,
    pub tflops: f64,
    /// Percent of the device's dense tensor peak for the input type.
    pub pct_peak: f64,
    /// Output tiles x K slices (CTAs for non-persistent kernels).
    pub tiles: u64,
    pub ctas_per_sm: u32,
    /// Tiles the busiest SM runs (fractional for stream-K).
    pub tiles_per_sm: f64,
    pub waves: u64,
    /// Useful share of the launched waves (tiles / (waves * slots)).
    pub wave_efficiency: f64,
    pub mainloop_s: f64,
    pub dram_s: f64,
    pub l2_s: f64,
    pub epilogue_s: f64,
    pub dram_bytes: f64,
    pub l2_bytes: f64,
}

/// One ranked candidate.
#[derive(Clone, Debug)]
pub struct Ranked {
    pub candidate: Candidate,
    /// The kernel spec with the workload's types, layouts, alignment and epilogue.
    pub spec: KernelSpec,
    pub estimate: Estimate,
}

/// A candidate left out, with why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Excluded {
    pub name: String,
    pub reason: String,
}

#[derive(Clone, Debug, Default)]
pub struct Ranking {
    /// Fastest first; ties broken by name.
    pub ranked: Vec<Ranked>,
    pub excluded: Vec<Excluded>,
}

/// Candidates of `workload` on `arch`, fastest estimate first (ties by name). Deterministic.
pub fn rank(workload: &Workload, device: &DeviceSpec, arch: Arch) -> Vec<Ranked> {
    rank_all(workload, device, arch).ranked
}

/// [`rank`], also returning the candidates excluded by validation or the can-implement check.
pub fn rank_all(workload: &Workload, device: &DeviceSpec, arch: Arch) -> Ranking {
    let mut out = Ranking::default();
    for candidate in candidate_list(workload, device, arch) {
        let spec = candidate.spec(
            workload.family,
            workload.types,
            workload.layouts,
            workload.alignment,
            workload.epilogue.clone(),
        );
        if let Err(e) = validate(&spec) {
            out.excluded.push(Excluded { name: candidate.name.clone(), reason: e.to_string() });
            continue;
        }
        if let Err(reason) = can_implement(&spec, workload) {
            out.excluded.push(Excluded { name: candidate.name.clone(), reason });
            continue;
        }
        let estimate = estimate(&spec, workload, device);
        out.ranked.push(Ranked { candidate, spec, estimate });
    }
    out.ranked.sort_by(|a, b| {
        a.estimate.time_s.total_cmp(&b.estimate.time_s).then_with(|| a.candidate.name.cmp(&b.candidate.name))
    });
    out.excluded.sort_by(|a, b| a.name.cmp(&b.name));
    if out.ranked.is_empty() && out.excluded.is_empty() {
        out.excluded.push(Excluded {
            name: "*".into(),
            reason: format!(
                "no {arch:?} candidate for {:?} {:?} at alignment a={} b={} c={}{}",
                workload.family,
                workload.types.input,
                workload.alignment.a,
                workload.alignment.b,
                workload.alignment.c,
                if workload.alignment.a.min(workload.alignment.b) < 8 {
                    " (pad the unaligned dimension to a multiple of 8)"
                } else {
                    ""
                }
            ),
        });
    }
    out
}

/// The hardware-native candidates at the workload's alignment, plus serial split-K variants
/// (sm80) for problems with fewer output tiles than SMs.
pub fn candidate_list(workload: &Workload, device: &DeviceSpec, arch: Arch) -> Vec<Candidate> {
    let base = candidates(arch, workload.family, workload.types, workload.alignment);
    let v = workload.gemm_view();
    let split_ok = arch == Arch::Sm80
        && match workload.family {
            Family::Gemm => true,
            Family::BatchedGemm | Family::GemmSoftmax => false,
            Family::Conv2dFprop(f) => f.groups == GroupMode::None,
        };
    let mut out = Vec::new();
    for c in base {
        if let (true, TileConfig::Sm80(t)) = (split_ok, c.tile) {
            let tiles = v.m.div_ceil(t.threadblock[0] as u64) * v.n.div_ceil(t.threadblock[1] as u64) * v.batch;
            let k_iters = v.k.div_ceil(t.threadblock[2] as u64);
            for s in SPLIT_K_FACTORS {
                if tiles < device.sm_count as u64 && k_iters / s as u64 >= MIN_K_ITERS_PER_SLICE {
                    out.push(with_split_k(&c, s));
                }
            }
        }
        out.push(c);
    }
    out
}

/// Host-side version of CUTLASS's `can_implement` for a spec and a concrete problem: operand
/// leading dimensions divisible by the spec's alignment, K slices of at least one K tile,
/// group sizes compatible with the group mode, codegen's problem-level rules
/// ([`bolt_codegen::validate::validate_conv_problem`]: sm90 conv strides).
pub fn can_implement(spec: &KernelSpec, workload: &Workload) -> Result<(), String> {
    let al = spec.alignment;
    let check = |what: &str, value: i64, align: u32| {
        if value % align as i64 != 0 {
            Err(format!("{what} = {value} is not a multiple of the kernel's alignment {align}"))
        } else {
            Ok(())
        }
    };
    let split_k = match spec.tile {
        TileConfig::Sm80(t) => t.split_k,
        TileConfig::Sm90(_) | TileConfig::Direct(_) => 1,
    };
    let tile_k = match spec.tile {
        TileConfig::Sm80(t) => t.threadblock[2],
        TileConfig::Sm90(t) => t.tile[2],
        TileConfig::Direct(_) => 1,
    } as u64;
    match workload.problem {
        Problem::Gemm(p) => {
            check("A leading dimension (lda)", p.lda, al.a)?;
            check("B leading dimension (ldb)", p.ldb, al.b)?;
            check("C/D leading dimension (ldc)", p.ldc, al.c)?;
            if p.batch > 1 {
                check("A batch stride", p.batch_stride_a, al.a)?;
                check("B batch stride", p.batch_stride_b, al.b)?;
                check("C/D batch stride", p.batch_stride_c, al.c)?;
            }
        }
        Problem::Conv2d(p) if matches!(spec.tile, TileConfig::Direct(_)) => {
            // Channel vectors of C in, K out; the filter is read one tap at a time.
            if !(p.c == p.k && p.k == p.groups) {
                return Err(format!("depthwise conv needs C = K = groups (C {}, K {}, groups {})", p.c, p.k, p.groups));
            }
            check("input channels (C)", p.c as i64, al.a)?;
            check("output channels (K)", p.k as i64, al.c)?;
        }
        Problem::Conv2d(p) => {
            bolt_codegen::validate::validate_conv_problem(spec, &p).map_err(|e| e.to_string())?;
            let g = p.groups.max(1) as i64;
            check("input channels per group (C/groups)", p.c as i64 / g, al.a)?;
            check("input channels (C)", p.c as i64, al.a)?;
            check("filter channels (C/groups)", p.c as i64 / g, al.b)?;
            check("output channels (K)", p.k as i64, al.c)?;
            let tile_n = match spec.tile {
                TileConfig::Sm80(t) => t.threadblock[1],
                TileConfig::Sm90(t) => t.tile[1],
                TileConfig::Direct(t) => t.vector,
            } as i64;
            let k_per_group = p.k as i64 / g;
            if let Family::Conv2dFprop(f) = spec.family {
                match f.groups {
                    GroupMode::SingleGroup if k_per_group % tile_n != 0 => {
                        return Err(format!(
                            "single-group conv: K/groups = {k_per_group} is not a multiple of tile N {tile_n}"
                        ))
                    }
                    GroupMode::MultipleGroup if tile_n % k_per_group != 0 => {
                        return Err(format!(
                            "multiple-group conv: tile N {tile_n} is not a multiple of K/groups = {k_per_group}"
                        ))
                    }
                    GroupMode::Depthwise if !(p.c == p.k && p.k == p.groups) => {
                        return Err(format!(
                            "depthwise conv needs C = K = groups (C {}, K {}, groups {})",
                            p.c, p.k, p.groups
                        ))
                    }
                    _ => {}
                }
            }
        }
    }
    if split_k > 1 {
        let k = workload.gemm_view().k;
        if k.div_ceil(split_k as u64) < tile_k {
            return Err(format!("K = {k} split {split_k} ways leaves slices shorter than one K tile ({tile_k})"));
        }
    }
    Ok(())
}

fn smooth_max(values: &[f64]) -> f64 {
    let m = values.iter().cloned().fold(0.0, f64::max);
    if m <= 0.0 {
        return 0.0;
    }
    m * values.iter().map(|v| (v / m).powf(ROOFLINE_SHARPNESS)).sum::<f64>().powf(1.0 / ROOFLINE_SHARPNESS)
}

/// The estimated time of `spec` running `workload` on `device` (see the module docs).
pub fn estimate(spec: &KernelSpec, workload: &Workload, device: &DeviceSpec) -> Estimate {
    if let TileConfig::Direct(t) = spec.tile {
        return estimate_direct(spec, t, workload, device);
    }
    let v = workload.gemm_view();
    let (m, n, k, batch) = (v.m as f64, v.n as f64, v.k as f64, v.batch);
    let types = spec.types;
    let in_b = types.input.size_bytes() as f64;
    let out_b = types.output.size_bytes() as f64;
    let expr = &workload.epilogue.expr;
    let (reads_source, reads_bias) = (expr.reads_source(), expr.reads_bias());
    let sms = device.sm_count as f64;
    let clock = device.clock_hz();
    let conv = matches!(spec.family, Family::Conv2dFprop(_));
    let depthwise = matches!(spec.family, Family::Conv2dFprop(f) if f.groups == GroupMode::Depthwise);

    // ---- tile geometry -------------------------------------------------------------------------
    struct Geometry {
        tm: u64,
        tn: u64,
        tk: u64,
        split: u64,
        cluster: (u64, u64),
        ctas_per_sm: u32,
        /// smem bytes per K step (operand reads by the MMAs + tile writes).
        smem_bytes_per_iter: f64,
        efficiency: f64,
        overhead_cycles: f64,
        swizzle: u32,
        stages: u32,
    }
    let g = match spec.tile {
        TileConfig::Sm80(t) => {
            let [tm, tn, tk] = t.threadblock.map(|x| x as u64);
            let [wm, wn, _] = t.warp.map(|x| x as f64);
            let threads = t.threads();
            let smem = t.smem_bytes(types).max(1);
            let regs = (t.accumulator_registers(types.accumulator) + REGISTER_OVERHEAD_PER_THREAD).div_ceil(8) * 8;
            let regs = regs.min(255) as u32;
            let by_smem = (device.smem_per_sm / (smem + 1024)) as u32; // 1 KB reserved per CTA
            let by_regs = device.registers_per_sm / (regs * threads).max(1);
            let by_threads = device.max_threads_per_sm / threads.max(1);
            let ctas = by_smem.min(by_regs).min(by_threads).min(device.max_blocks_per_sm).max(1);
            // ldmatrix reads of each warp's fragments + cp.async writes of the A and B tiles.
            let reads = tk as f64 * in_b * (tm * tn) as f64 * (1.0 / wn + 1.0 / wm);
            let writes = (tm + tn) as f64 * tk as f64 * in_b;
            let swizzle = match t.swizzle {
                Swizzle::Identity(g) => g,
                Swizzle::SplitKSerial => 1,
            };
            Geometry {
                tm,
                tn,
                tk,
                split: t.split_k as u64,
                cluster: (1, 1),
                ctas_per_sm: ctas,
                smem_bytes_per_iter: reads + writes,
                // mma.sync kernels (compute_80 PTX) on a Hopper GPU.
                efficiency: if device.arch == Arch::Sm90 {
                    MMA_EFFICIENCY_SM80 * MMA_SYNC_SHARE_ON_SM90
                } else {
                    MMA_EFFICIENCY_SM80
                },
                overhead_cycles: KITER_OVERHEAD_CYCLES_SM80,
                swizzle,
                stages: t.stages,
            }
        }
        TileConfig::Sm90(t) => {
            let [tm, tn, tk] = t.tile.map(|x| x as u64);
            let smem = t.smem(types, conv, reads_source, reads_bias);
            // wgmma reads A (64 x tk) and B (tn x tk) from shared memory per 64-row atom.
            let reads = (tm as f64 / 64.0) * (64 + tn) as f64 * tk as f64 * in_b;
            Geometry {
                tm,
                tn,
                tk,
                split: 1,
                cluster: (t.cluster[0] as u64, t.cluster[1] as u64),
                ctas_per_sm: SM90_CTAS_PER_SM,
                smem_bytes_per_iter: reads,
                efficiency: MMA_EFFICIENCY_SM90,
                overhead_cycles: KITER_OVERHEAD_CYCLES_SM90,
                swizzle: SM90_RASTER_SWIZZLE,
                stages: smem.stages as u32,
            }
        }
        TileConfig::Direct(_) => unreachable!("the direct kernel's estimate returned above"),
    };

    let tiles_m = v.m.div_ceil(g.tm).div_ceil(g.cluster.0) * g.cluster.0;
    let tiles_n = v.n.div_ceil(g.tn).div_ceil(g.cluster.1) * g.cluster.1;
    let output_tiles = tiles_m * tiles_n * batch;
    let tiles = output_tiles * g.split;
    let k_slice = v.k.div_ceil(g.split);
    let k_iters = k_slice.div_ceil(g.tk).max(1);
    let cluster_size = g.cluster.0 * g.cluster.1;
    // SMs that can hold whole clusters (H100's 132 SMs take 66 2-CTA clusters).
    let usable_sms = ((device.sm_count as u64 / cluster_size) * cluster_size).max(1) as f64;

    let (schedule, persistent) = match spec.tile {
        TileConfig::Sm90(t) if !conv => (Some(t.kernel), true),
        TileConfig::Sm90(t) => (Some(t.kernel), false),
        TileConfig::Sm80(_) | TileConfig::Direct(_) => (None, false),
    };
    let stream_k = schedule == Some(KernelSchedule::StreamK);
    let pingpong = schedule == Some(KernelSchedule::TmaWarpSpecializedPingpong);

    // ---- waves -------------------------------------------------------------------------------
    let slots = usable_sms * g.ctas_per_sm as f64;
    let waves = (tiles as f64 / slots).ceil().max(1.0) as u64;
    let wave_efficiency = tiles as f64 / (waves as f64 * slots);
    let tiles_per_sm = if stream_k {
        // Every K iteration of every tile spread evenly over the SMs (CUTLASS's data-parallel
        // full waves + stream-K remainder give the busiest SM the same load).
        let total_iters = tiles * k_iters;
        (total_iters as f64 / usable_sms).ceil() / k_iters as f64
    } else {
        (tiles as f64 / usable_sms).ceil()
    };

    // ---- mainloop ------------------------------------------------------------------------------
    let peak = if depthwise { device.peak_simt_f32 } else { device.peak_flops(types.input) };
    let fma_per_cycle_per_sm = peak / (2.0 * sms * clock);
    let mma_cycles = (g.tm * g.tn * g.tk) as f64 / fma_per_cycle_per_sm;
    let smem_cycles = g.smem_bytes_per_iter / device.smem_bytes_per_clock;
    let iter_cycles = mma_cycles.max(smem_cycles) / g.efficiency + g.overhead_cycles;
    let mut hiding = match spec.tile {
        TileConfig::Sm80(t) => {
            let resident_ctas = (g.ctas_per_sm as f64).min(tiles_per_sm.max(1.0));
            let warps = resident_ctas * t.warps() as f64;
            let covered = resident_ctas * t.stages.saturating_sub(1) as f64 * iter_cycles / LOAD_LATENCY_CYCLES;
            (LATENCY_FLOOR + (1.0 - LATENCY_FLOOR) * (warps / WARPS_FOR_PEAK_SM80).min(1.0))
                * (PIPELINE_FLOOR + (1.0 - PIPELINE_FLOOR) * covered.min(1.0))
        }
        TileConfig::Sm90(_) if conv => SM90_SINGLE_CONSUMER_EFFICIENCY,
        TileConfig::Sm90(_) | TileConfig::Direct(_) => 1.0,
    };
    if g.stages < 3 {
        hiding *= SHALLOW_PIPELINE_EFFICIENCY;
    }
    let access = |align: u32, bytes: f64| access_efficiency((align as f64 * bytes) as usize);
    let align_eff = access(spec.alignment.a, in_b).min(access(spec.alignment.b, in_b));
    let mut mainloop_s = tiles_per_sm * k_iters as f64 * iter_cycles / clock / hiding / align_eff;
    mainloop_s *= 1.0 + CLUSTER_PLACEMENT_PENALTY * (cluster_size - 1) as f64;
    if stream_k {
        mainloop_s *= 1.0 + STREAMK_OVERHEAD;
    }

    // ---- memory traffic ----------------------------------------------------------------------
    // L2 -> SM: every output tile loads its A (tm x K) and B (tn x K) tiles; a cluster
    // multicasts B to the CTAs along M and A to those along N.
    let a_tile_bytes = (g.tm as f64) * k * in_b / g.cluster.1 as f64;
    let b_tile_bytes = (g.tn as f64) * k * in_b / g.cluster.0 as f64;
    let mut l2_bytes = output_tiles as f64 * (a_tile_bytes + b_tile_bytes);
    // DRAM: the distinct operand bytes if they fit L2; otherwise each concurrently running
    // super-tile (swizzle-shaped group of tiles) fetches its rows of A and columns of B.
    let unique = match workload.problem {
        Problem::Gemm(_) => (m * k + k * n) * in_b * batch as f64,
        Problem::Conv2d(p) => {
            (p.n as f64 * p.h as f64 * p.w as f64 * p.c as f64
                + p.k as f64 * p.r as f64 * p.s as f64 * p.c as f64 / p.groups.max(1) as f64)
                * in_b
        }
    };
    let dram_operands = if unique <= device.l2_bytes as f64 * L2_USABLE_FRACTION {
        unique
    } else {
        let concurrent = (slots as u64).min(tiles_m * tiles_n).max(1);
        let (long, short) = if tiles_n > tiles_m { (tiles_n, tiles_m) } else { (tiles_m, tiles_n) };
        // Rasterise along the longer dimension in groups of `swizzle` along the other.
        let group_short = (g.swizzle as u64).min(short).max(1);
        let group_long = concurrent.div_ceil(group_short).min(long).max(1);
        let group_short = concurrent.div_ceil(group_long).min(short).max(group_short);
        let (gm, gn) = if tiles_n > tiles_m { (group_short, group_long) } else { (group_long, group_short) };
        let per_group = (gm * g.tm) as f64 * k * in_b + (gn * g.tn) as f64 * k * in_b;
        let groups = (tiles_m * tiles_n) as f64 / (gm * gn) as f64 * batch as f64;
        (groups * per_group).clamp(unique, l2_bytes.max(unique))
    };
    let d_bytes = m * n * batch as f64 * out_b;
    let epilogue_bytes = d_bytes * if reads_source { 2.0 } else { 1.0 } + if reads_bias { n * out_b } else { 0.0 };
    // Serial split-K: every slice after the first reads and rewrites the partial output.
    let split_bytes = (g.split - 1) as f64 * 2.0 * d_bytes;
    // Stream-K fixup: partial f32 tiles written and read back by SMs that end mid-tile.
    let fixup_bytes = if stream_k && tiles % usable_sms as u64 != 0 {
        2.0 * usable_sms.min(tiles as f64) * (g.tm * g.tn) as f64 * 4.0
    } else {
        0.0
    };
    l2_bytes += split_bytes + fixup_bytes + epilogue_bytes;
    let dram_bytes = dram_operands + epilogue_bytes;
    // Output (and source) bytes count against DRAM bandwidth too: the epilogue term below is
    // only the part no mainloop hides. (Equal across one workload's candidates, but not across
    // kernels: a fusion decision compares an intermediate written and read back with none.)
    let dram_s = dram_bytes / device.dram_bandwidth;
    let l2_s = l2_bytes / device.l2_bandwidth;

    // ---- epilogue ------------------------------------------------------------------------------
    // One tile's output (and source) through this SM's share of DRAM bandwidth.
    let tile_epilogue_s =
        (g.tm * g.tn) as f64 * out_b * if reads_source { 2.0 } else { 1.0 } / (device.dram_bandwidth / sms);
    let exposed_tiles = if pingpong {
        // The other consumer warp group's mainloop hides all but the last epilogue.
        1.0
    } else if persistent {
        tiles_per_sm.ceil()
    } else {
        tiles_per_sm / (g.ctas_per_sm as f64).min(tiles_per_sm.max(1.0))
    };
    let mut epilogue_s = exposed_tiles * tile_epilogue_s;
    // Slices of one output tile finish one after another (semaphore-ordered).
    epilogue_s += (g.split - 1) as f64 * tile_epilogue_s * 2.0;
    let fill_s = if persistent { PIPELINE_FILL_S } else { waves as f64 * PIPELINE_FILL_S };

    let mut time_s = smooth_max(&[mainloop_s, dram_s, l2_s]) + epilogue_s + fill_s + LAUNCH_OVERHEAD_S;
    let mut dram_bytes = dram_bytes;
    if spec.family == Family::GemmSoftmax {
        // The visitor writes each row's max and sum per column tile; a reduction kernel reads
        // them back (writing one pair per row); the apply kernel reads D and writes the softmax.
        let partials = 2.0 * m * tiles_n as f64 * 4.0;
        time_s += partials / device.dram_bandwidth;
        time_s += copy_seconds(partials + 2.0 * m * 4.0, device);
        time_s += copy_seconds(2.0 * d_bytes, device);
        dram_bytes += 2.0 * partials + 2.0 * d_bytes;
    }
    let flops = workload.flops();
    Estimate {
        time_s,
        tflops: flops / time_s / 1e12,
        pct_peak: 100.0 * flops / time_s / device.peak_flops(types.input),
        tiles,
        ctas_per_sm: g.ctas_per_sm,
        tiles_per_sm,
        waves,
        wave_efficiency,
        mainloop_s,
        dram_s,
        l2_s,
        epilogue_s,
        dram_bytes,
        l2_bytes,
    }
}

/// Share of the CUDA cores' f32 FMA peak the direct depthwise kernel's inner loop reaches: each
/// FMA needs its input element converted and the loop bounds checked (no measurement yet).
const DIRECT_FMA_EFFICIENCY: f64 = 0.5;
/// Resident threads per SM the direct kernel needs to hide its load latency (half the H100's
/// 2048: its loads are independent across the taps of a thread).
const DIRECT_THREADS_FOR_PEAK: f64 = 1024.0;

/// Estimated time of the direct depthwise kernel ([`bolt_codegen::depthwise`]): its DRAM
/// traffic (input, filter, output, source and bias once), its L1/L2 loads (each output column
/// reads R·S input vectors; each thread loads every tap of its channels once for its columns)
/// at the access width its vector allows, and its FMAs on the CUDA cores, with too few
/// threads to fill the GPU slowing all of it down.
fn estimate_direct(
    spec: &KernelSpec,
    tile: bolt_codegen::spec::DirectTile,
    workload: &Workload,
    device: &DeviceSpec,
) -> Estimate {
    // A GEMM given to the direct kernel (which validation refuses) takes forever.
    let Problem::Conv2d(p) = workload.problem else {
        let never = f64::INFINITY;
        return Estimate {
            time_s: never,
            tflops: 0.0,
            pct_peak: 0.0,
            tiles: 0,
            ctas_per_sm: 0,
            tiles_per_sm: 0.0,
            waves: 0,
            wave_efficiency: 0.0,
            mainloop_s: never,
            dram_s: never,
            l2_s: never,
            epilogue_s: 0.0,
            dram_bytes: 0.0,
            l2_bytes: 0.0,
        };
    };
    let (in_b, out_b) = (spec.types.input.size_bytes() as f64, spec.types.output.size_bytes() as f64);
    let expr = &workload.epilogue.expr;
    let [n, h, w, c, pp, q, r, s] = [p.n, p.h, p.w, p.c, p.p, p.q, p.r, p.s].map(|x| x.max(0) as f64);
    let outputs = n * pp * q * c;
    let (vector, pixels) = (tile.vector as f64, tile.pixels as f64);
    let threads = n * pp * (q / pixels).ceil() * (c / vector);
    let dram_bytes = n * h * w * c * in_b
        + c * r * s * in_b
        + outputs * out_b * if expr.reads_source() { 2.0 } else { 1.0 }
        + if expr.reads_bias() { c * out_b } else { 0.0 };
    // Input vectors per output column and filter taps per thread, through L1/L2.
    let l2_bytes = outputs * r * s * in_b + threads * r * s * vector * in_b;
    let fill = (threads / (device.sm_count as f64 * DIRECT_THREADS_FOR_PEAK)).min(1.0).max(1e-3);
    let access = access_efficiency((vector * in_b) as usize);
    let fma_s = 2.0 * outputs * r * s / (device.peak_simt_f32 * DIRECT_FMA_EFFICIENCY);
    let dram_s = dram_bytes / device.dram_bandwidth;
    let l2_s = l2_bytes / device.l2_bandwidth / access;
    let mainloop_s = smooth_max(&[fma_s, l2_s]) / fill;
    let time_s = smooth_max(&[mainloop_s, dram_s]) + LAUNCH_OVERHEAD_S;
    let flops = workload.flops();
    let blocks = (threads / 128.0).ceil();
    let slots = device.sm_count as f64 * (device.max_threads_per_sm as f64 / 128.0);
    let waves = (blocks / slots).ceil().max(1.0);
    Estimate {
        time_s,
        tflops: flops / time_s / 1e12,
        pct_peak: 100.0 * flops / time_s / device.peak_flops(spec.types.input),
        tiles: blocks as u64,
        ctas_per_sm: (device.max_threads_per_sm / 128).min(device.max_blocks_per_sm),
        tiles_per_sm: (blocks / device.sm_count as f64).ceil(),
        waves: waves as u64,
        wave_efficiency: blocks / (waves * slots),
        mainloop_s,
        dram_s,
        l2_s,
        epilogue_s: 0.0,
        dram_bytes,
        l2_bytes,
    }
}

/// `mma.sync` on an H100 reaches about 60% of the dense `wgmma` peak (it issues from one warp
/// at a time and cannot use TMA or the larger wgmma tiles): the rate Bolt's back-to-back
/// chains (CUTLASS 2.x mainloops on every arch) run at on Hopper.
pub const MMA_SYNC_SHARE_ON_SM90: f64 = 0.6;

/// Estimated time of a back-to-back chain kernel ([`bolt_codegen::b2b`]) from codegen's cost
/// numbers for it ([`bolt_codegen::b2b::cost`]), with the terms of [`estimate`]: the busiest
/// SM's threadblocks at the `mma.sync` rate (reduced on Hopper, [`MMA_SYNC_SHARE_ON_SM90`])
/// and its latency hiding, the chain's DRAM traffic (input, weights, output: intermediates
/// never leave the SM), the weights every threadblock re-reads through L2, a pipeline fill per
/// wave and the launch.
pub fn estimate_b2b(spec: &B2bSpec, cost: &B2bCost, device: &DeviceSpec) -> Estimate {
    let sms = device.sm_count as f64;
    let share = if device.arch == Arch::Sm90 { MMA_SYNC_SHARE_ON_SM90 } else { 1.0 };
    let per_sm_rate = device.peak_flops(spec.types.input) * share * MMA_EFFICIENCY_SM80 / sms;
    let tiles = cost.threadblocks.max(1);
    let ctas_per_sm = cost.threadblocks_per_sm.clamp(1, u64::from(device.max_blocks_per_sm)) as u32;
    let tiles_per_sm = (tiles as f64 / sms).ceil();
    let slots = sms * ctas_per_sm as f64;
    let waves = (tiles as f64 / slots).ceil().max(1.0) as u64;
    let resident = (ctas_per_sm as f64).min(tiles_per_sm.max(1.0));
    let warps = resident * (spec.threads() / 32) as f64;
    let hiding = LATENCY_FLOOR + (1.0 - LATENCY_FLOOR) * (warps / WARPS_FOR_PEAK_SM80).min(1.0);
    let mainloop_s = tiles_per_sm * (cost.flops / tiles as f64) / per_sm_rate / hiding;
    let dram_s = cost.dram_bytes / device.dram_bandwidth;
    let l2_bytes = cost.dram_bytes + cost.l2_weight_bytes;
    let l2_s = l2_bytes / device.l2_bandwidth;
    let time_s = smooth_max(&[mainloop_s, dram_s, l2_s]) + waves as f64 * PIPELINE_FILL_S + LAUNCH_OVERHEAD_S;
    Estimate {
        time_s,
        tflops: cost.useful_flops / time_s / 1e12,
        pct_peak: 100.0 * cost.useful_flops / time_s / device.peak_flops(spec.types.input),
        tiles,
        ctas_per_sm,
        tiles_per_sm,
        waves,
        wave_efficiency: tiles as f64 / (waves as f64 * slots),
        mainloop_s,
        dram_s,
        l2_s,
        epilogue_s: 0.0,
        dram_bytes: cost.dram_bytes,
        l2_bytes,
    }
}

/// Estimated time of a stitched row-reduction kernel (AStitch's regional scheme, as Bolt's
/// stitched kernels run it): `rows` rows of `width` elements read once from DRAM and the output
/// written once; the later of its `passes` read the first [`ROW_CACHE_COLUMNS`] columns from
/// the row cache (registers) and re-read the rest of a wider row from L2.
pub fn stitched_rows_seconds(
    rows: f64,
    width: f64,
    in_bytes: f64,
    out_bytes: f64,
    passes: u32,
    device: &DeviceSpec,
) -> f64 {
    let first = rows * width * (in_bytes + out_bytes);
    let uncached = (width - ROW_CACHE_COLUMNS as f64).max(0.0);
    let again = passes.saturating_sub(1) as f64 * rows * uncached * in_bytes;
    smooth_max(&[first / device.dram_bandwidth, (first + again) / device.l2_bandwidth]) + LAUNCH_OVERHEAD_S
}

/// Estimated time of a memory-bound copy kernel moving `bytes` through DRAM (reads and
/// writes together) over the whole GPU: the planner's standalone padding and layout kernels.
pub fn copy_seconds(bytes: f64, device: &DeviceSpec) -> f64 {
    bytes / device.dram_bandwidth + LAUNCH_OVERHEAD_S
}
