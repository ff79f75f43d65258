//! Hardware-native candidate tiles (Bolt paper, §3.2.2): per architecture, a short list of
//! tile configurations known to suit the hardware, generated once and profiled on the real
//! problem instead of searched. The lists follow what CUTLASS's own generator instantiates
//! (`GenerateSM80_TensorOp_16816` / `_1688`, `GenerateSM90_TensorOp_16b_WGMMA_gemm` with
//! `sm90_utils.py`), pruned by the paper's guidelines:
//!
//! * within the register file, prefer large warp tiles (a higher compute-to-memory ratio):
//!   64x64 warp tiles on sm80, 128-register accumulator fragments on sm90;
//! * four or eight warps per threadblock;
//! * small problems need small threadblock tiles to launch enough CTAs for every SM
//!   (108 on A100, 132 on H100), so a few small tiles stay in every list.
//!
//! Every candidate passes [`validate`] for the arch/family/types/alignment it was generated
//! for (tested below); which one is fastest is for the profiler to find out.

use crate::epilogue::Epilogue;
use crate::spec::{
    Alignment, Arch, DirectTile, Element, EpilogueSchedule, Family, GroupMode, KernelSchedule, KernelSpec, Layout,
    Sm80Tile, Sm90Tile, Swizzle, TileConfig, Types,
};
use crate::validate::validate;

/// One candidate kernel configuration with a short stable name (for symbols and reports).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Candidate {
    pub name: String,
    pub tile: TileConfig,
}

impl Candidate {
    fn new(tile: TileConfig) -> Candidate {
        Candidate { name: tile_name(&tile), tile }
    }

    pub fn arch(&self) -> Arch {
        match self.tile {
            TileConfig::Sm80(_) | TileConfig::Direct(_) => Arch::Sm80,
            TileConfig::Sm90(_) => Arch::Sm90,
        }
    }

    /// The kernel spec of this candidate. Alignments are clamped to one 128-bit access per
    /// operand ([`vector_alignment`]), as the candidate was generated for.
    pub fn spec(
        &self,
        family: Family,
        types: Types,
        layouts: [Layout; 3],
        alignment: Alignment,
        epilogue: Epilogue,
    ) -> KernelSpec {
        let alignment = match self.tile {
            // Bolt instantiates the SIMT depthwise kernel with scalar accesses.
            TileConfig::Sm80(t) if t.instruction == [1, 1, 1] => Alignment { a: 1, b: 1, c: 1 },
            _ => vector_alignment(types, alignment),
        };
        KernelSpec { family, arch: self.arch(), types, layouts, alignment, tile: self.tile, epilogue }
    }
}

/// Short stable name of a tile config, e.g. `sm80_128x256x32_w64x64x32_s3` or
/// `sm90_128x256x64_c2x1_coop_tma`.
pub fn tile_name(tile: &TileConfig) -> String {
    match tile {
        TileConfig::Sm80(t) => {
            let [m, n, k] = t.threadblock;
            let [wm, wn, wk] = t.warp;
            let simt = if t.instruction == [1, 1, 1] { "_simt" } else { "" };
            let swizzle = match t.swizzle {
                Swizzle::Identity(s) => format!("_sw{s}"),
                Swizzle::SplitKSerial => format!("_splitk{}", t.split_k),
            };
            format!("sm80_{m}x{n}x{k}_w{wm}x{wn}x{wk}_s{}{swizzle}{simt}", t.stages)
        }
        TileConfig::Sm90(t) => {
            let [m, n, k] = t.tile;
            let [cm, cn, _] = t.cluster;
            let kernel = match t.kernel {
                KernelSchedule::TmaWarpSpecializedCooperative => "coop",
                KernelSchedule::TmaWarpSpecializedPingpong => "pingpong",
                KernelSchedule::StreamK => "streamk",
            };
            let epilogue = match t.epilogue {
                EpilogueSchedule::Tma => "tma",
                EpilogueSchedule::NoSmem => "nosmem",
            };
            format!("sm90_{m}x{n}x{k}_c{cm}x{cn}_{kernel}_{epilogue}")
        }
        TileConfig::Direct(t) => format!("direct_v{}_p{}", t.vector, t.pixels),
    }
}

/// Clamps each operand's alignment to one 128-bit access: "aligned to 8 elements" of an f32
/// output is instantiated as 4-element (16-byte) accesses.
pub fn vector_alignment(types: Types, alignment: Alignment) -> Alignment {
    let clamp = |n: u32, e: Element| n.min((16 / e.size_bytes()) as u32);
    Alignment {
        a: clamp(alignment.a, types.input),
        b: clamp(alignment.b, types.input),
        c: clamp(alignment.c, types.output),
    }
}

/// The hardware-native candidates for one kind of kernel, all valid for it (possibly none:
/// e.g. 16-bit data aligned to 1 element, or unaligned A/B on sm90, which only TMA loads).
pub fn candidates(arch: Arch, family: Family, types: Types, alignment: Alignment) -> Vec<Candidate> {
    let tiles = match arch {
        Arch::Sm80 => sm80_tiles(family, types),
        Arch::Sm90 => sm90_tiles(family, types, vector_alignment(types, alignment)),
    };
    // Keep those valid for this configuration. Layouts and epilogue do not change tile
    // validity, except tf32 on sm90, which needs the K-major (row, column) layouts probed here.
    let probe_layouts = [Layout::RowMajor, Layout::ColumnMajor, Layout::RowMajor];
    tiles
        .into_iter()
        .map(Candidate::new)
        .filter(|c| validate(&c.spec(family, types, probe_layouts, alignment, Epilogue::plain())).is_ok())
        .collect()
}

/// Convenience for conv callers: the sm80 candidates of a Conv2d fprop kernel.
pub fn sm80_conv_candidates(features: crate::spec::ConvFeatures, types: Types, alignment: Alignment) -> Vec<Candidate> {
    candidates(Arch::Sm80, Family::Conv2dFprop(features), types, alignment)
}

// ================================================================================================
// sm80: CUTLASS 2.x, mma.sync + cp.async multistage
// ================================================================================================

/// `(threadblock M, N, K in 16-bit elements, warps along M, N, stages)`.
///
/// Why each dimension exists:
/// * **Threadblock M x N** (256x128 ... 64x64): large tiles reuse each loaded A/B byte over
///   more math (arithmetic intensity ~ MN/(M+N)) and win on large GEMMs; small ones (128x64,
///   64x128, 64x64) give a 108-SM A100 enough CTAs on small or skinny problems, and 2:1 shapes
///   follow skinny M or N.
/// * **Warp tile**: 64x64 wherever the threadblock allows (128 f32 accumulator registers, the
///   register-file limit), otherwise the tile is split over 4 warps (64x32, 32x64, 32x32):
///   4 or 8 warps per CTA in every entry.
/// * **K** 32 or 64 16-bit elements (64 or 128 bytes per smem row): K=32 allows more stages in
///   the same shared memory, K=64 halves the mainloop's barrier/bookkeeping per FLOP.
/// * **Stages** 3..10: cp.async stages in flight hide global-memory latency; the deepest
///   pipeline that fits 163 KB for big tiles, extra variants where occupancy (2 CTAs per SM)
///   trades against depth (128x128x32: 3/4/5), very deep (10) for the smallest tile.
///
/// Convolutions use the same table minus 256x64 with 128-byte K, whose activation iterator
/// would need 16 loads per thread (`validate::MAX_CONV_ACTIVATION_LOADS`: it spills).
///
/// tf32 (f32 data) uses the same table with K halved in elements: the same bytes per stage,
/// the same shared memory and the same m16n8k8 steps per warp tile.
const SM80_TABLE: &[(u32, u32, u32, u32, u32, u32)] = &[
    // K = 32 (64-byte rows)
    (256, 128, 32, 4, 2, 3),
    (128, 256, 32, 2, 4, 3),
    (256, 64, 32, 4, 1, 3),
    (256, 64, 32, 4, 1, 4),
    (64, 256, 32, 1, 4, 4),
    (128, 128, 32, 2, 2, 3),
    (128, 128, 32, 2, 2, 4),
    (128, 128, 32, 2, 2, 5),
    (128, 64, 32, 2, 2, 6),
    (64, 128, 32, 2, 2, 6),
    (64, 64, 32, 2, 2, 10),
    // K = 64 (128-byte rows)
    (256, 128, 64, 4, 2, 3),
    (128, 256, 64, 2, 4, 3),
    (256, 64, 64, 4, 1, 4),
    (64, 256, 64, 1, 4, 4),
    (128, 128, 64, 2, 2, 4),
    (256, 64, 64, 4, 1, 3),
    (64, 256, 64, 1, 4, 3),
    (128, 128, 64, 2, 2, 3),
    (128, 64, 64, 2, 2, 3),
    (64, 128, 64, 2, 2, 3),
    (64, 64, 64, 2, 2, 5),
];

/// Depthwise convolution runs CUTLASS's SIMT implicit-GEMM kernel (one channel per group
/// leaves no K for tensor cores to reduce over), 2 stages, K = 8 filter taps per step, four
/// warps. CUTLASS tests it with 64x64x8 (32x32 warps) and 128x128x8 (64x64 warps,
/// test/unit/conv/device/depthwise_conv2d_fprop_implicit_gemm_*_simt_*); the 64x64 SIMT warp
/// tile spills (see `validate::MAX_SIMT_ACCUMULATORS`), so the larger tiles here are 64x128 and
/// 128x64 on 32x64 / 64x32 warps. N is channels per CTA (wide layers want 128), M output
/// pixels per CTA.
const SM80_DEPTHWISE_TABLE: &[([u32; 3], [u32; 3])] =
    &[([64, 128, 8], [32, 64, 8]), ([128, 64, 8], [64, 32, 8]), ([64, 64, 8], [32, 32, 8])];

/// Depthwise convolution also runs Bolt's direct kernel ([`crate::depthwise`]): channel
/// vectors of 16 bytes down to one element (what the channel count allows), 1 to 4 output
/// columns per thread (each filter tap loaded once for all of them).
const DIRECT_VECTORS: [u32; 4] = [8, 4, 2, 1];
const DIRECT_PIXELS: [u32; 3] = [4, 2, 1];

fn sm80_tiles(family: Family, types: Types) -> Vec<TileConfig> {
    let conv = matches!(family, Family::Conv2dFprop(_));
    // Rasterisation: GEMMs use CUTLASS's default Identity8, convs its Identity4
    // (generator.py DefaultSwizzlingFunctor / CreateConv2dOperator): grouped CTAs share L2.
    let swizzle = Swizzle::Identity(if conv { 4 } else { 8 });
    if let Family::Conv2dFprop(f) = family {
        if f.groups == GroupMode::Depthwise {
            let direct = DIRECT_VECTORS.iter().flat_map(|&vector| {
                DIRECT_PIXELS.iter().map(move |&pixels| TileConfig::Direct(DirectTile { vector, pixels }))
            });
            return SM80_DEPTHWISE_TABLE
                .iter()
                .map(|&(threadblock, warp)| {
                    TileConfig::Sm80(Sm80Tile {
                        threadblock,
                        warp,
                        instruction: [1, 1, 1],
                        stages: 2,
                        swizzle,
                        split_k: 1,
                    })
                })
                .chain(direct)
                .collect();
        }
    }
    let (k_scale, instruction) = match types.input {
        Element::F32 => (2, [16, 8, 8]),
        Element::F16 | Element::BF16 => (1, [16, 8, 16]),
    };
    SM80_TABLE
        .iter()
        .map(|&(m, n, k, wm, wn, stages)| {
            let k = k / k_scale;
            TileConfig::Sm80(Sm80Tile {
                threadblock: [m, n, k],
                warp: [m / wm, n / wn, k],
                instruction,
                stages,
                swizzle,
                split_k: 1,
            })
        })
        .collect()
}

/// Serial split-K variants of a candidate (for problems with a large K and few output
/// tiles): same tile, the K loop split `k` ways. Not part of the default lists because
/// whether they pay depends on the problem, not the hardware.
pub fn with_split_k(candidate: &Candidate, split_k: u32) -> Candidate {
    match candidate.tile {
        TileConfig::Sm80(t) if split_k > 1 => {
            Candidate::new(TileConfig::Sm80(Sm80Tile { split_k, swizzle: Swizzle::SplitKSerial, ..t }))
        }
        _ => candidate.clone(),
    }
}

// ================================================================================================
// sm90: CUTLASS 3.x, wgmma + TMA, warp-specialized persistent kernels
// ================================================================================================

use KernelSchedule::{StreamK as SK, TmaWarpSpecializedCooperative as COOP, TmaWarpSpecializedPingpong as PP};

/// Cluster shapes (M x N, K = 1): 1x1 launches CTAs freely (best for small grids and for
/// wave-quantisation), 2x1 multicasts each B tile to the two CTAs that share it along M,
/// 1x2 multicasts A along N — halving L2->SM traffic for that operand.
const C11: [u32; 3] = [1, 1, 1];
const C21: [u32; 3] = [2, 1, 1];
const C12: [u32; 3] = [1, 2, 1];

/// `(tile M, tile N, kernel schedule, clusters)`, K = 128 bytes (64 16-bit / 32 tf32 elements:
/// the 128-byte swizzle atom, CUTLASS's generator's MMA multiplier (·,·,4)).
///
/// Why each dimension exists:
/// * **Tile M x N** 64..256 (wgmma is 64 x N x 16 per warp group): 128x256/256x128
///   maximise reuse for large GEMMs, 128x128/64x256/256x64 are the balanced middle, and
///   64x64..128x64 keep 132 SMs busy on small problems.
/// * **Schedule**: cooperative (two consumer warp groups split one tile; M 128 or 256) for the
///   biggest tiles; ping-pong (two warp groups alternate tiles so one's epilogue overlaps the
///   other's mainloop; M 64 or 128) for tiles whose epilogue is a large share of the time;
///   stream-K (cooperative + K-split work units) for grids that fill a fraction of a wave.
///   Accumulators stay within 128 registers per consumer thread (M·N/256 cooperative,
///   M·N/128 ping-pong), so 128x256 ping-pong and 256x256 are left out.
/// * **Cluster** 1x1 / 2x1 / 1x2: TMA multicast for the large tiles, where operand traffic
///   matters; 1x1 only for the small ones.
const SM90_GEMM_TABLE: &[(u32, u32, KernelSchedule, &[[u32; 3]])] = &[
    (128, 256, COOP, &[C11, C21, C12]),
    (256, 128, COOP, &[C11, C21, C12]),
    (128, 128, COOP, &[C11, C21, C12]),
    (256, 64, COOP, &[C11, C21]),
    (128, 64, COOP, &[C11]),
    (64, 256, PP, &[C11, C21, C12]),
    (128, 128, PP, &[C11, C21, C12]),
    (128, 64, PP, &[C11]),
    (64, 128, PP, &[C11]),
    (64, 64, PP, &[C11]),
    (128, 256, SK, &[C11, C21]),
    (256, 128, SK, &[C11, C21]),
    (128, 128, SK, &[C11, C21]),
];

/// sm90 convs run CUTLASS 4.2's only sm90 conv kernel, the non-persistent warp-specialized
/// one with a single consumer warp group (`KernelImplicitTmaWarpSpecializedSm90`, which Bolt
/// spells `TmaWarpSpecializedCooperative`): tile M 64 or 128 and M·N/128 accumulator
/// registers, so N ≤ 128 at M = 128. Filters (B) are shared by every output-pixel tile, so
/// 2x1 clusters multicast them; 1x2 shares activations across output-channel tiles.
const SM90_CONV_TABLE: &[(u32, u32, &[[u32; 3]])] = &[
    (128, 128, &[C11, C21, C12]),
    (128, 64, &[C11, C21]),
    (64, 256, &[C11, C21]),
    (64, 128, &[C11]),
    (64, 64, &[C11]),
];

fn sm90_tiles(family: Family, types: Types, alignment: Alignment) -> Vec<TileConfig> {
    let k = 128 / types.input.size_bytes() as u32;
    // TMA stores need 16-byte aligned output; otherwise the no-smem epilogue writes it.
    let epilogue = if (alignment.c as usize * types.output.size_bytes()).is_multiple_of(16) {
        EpilogueSchedule::Tma
    } else {
        EpilogueSchedule::NoSmem
    };
    let mut out = Vec::new();
    match family {
        Family::Conv2dFprop(_) => {
            for &(m, n, clusters) in SM90_CONV_TABLE {
                for &cluster in clusters {
                    out.push(TileConfig::Sm90(Sm90Tile { tile: [m, n, k], cluster, kernel: COOP, epilogue }));
                }
            }
        }
        // CUTLASS 3.x has no GemmSoftmax: no sm90 candidates.
        Family::GemmSoftmax => {}
        Family::Gemm | Family::BatchedGemm => {
            for &(m, n, kernel, clusters) in SM90_GEMM_TABLE {
                for &cluster in clusters {
                    out.push(TileConfig::Sm90(Sm90Tile { tile: [m, n, k], cluster, kernel, epilogue }));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::epilogue::{Activation, NormalForm, ResidualAt};
    use crate::spec::ConvFeatures;
    use crate::validate::Rejection;
    use std::collections::HashSet;

    const ALIGN8: Alignment = Alignment { a: 8, b: 8, c: 8 };

    fn types(input: Element, accumulator: Element, output: Element) -> Types {
        Types { input, accumulator, output }
    }

    fn all_types() -> Vec<Types> {
        use Element::*;
        vec![
            types(F16, F32, F16),
            types(F16, F32, F32),
            types(F16, F16, F16),
            types(BF16, F32, BF16),
            types(BF16, F32, F32),
            types(F32, F32, F32),
        ]
    }

    fn conv(groups: GroupMode) -> Family {
        Family::Conv2dFprop(ConvFeatures { unit_stride: false, groups, analytic: false })
    }

    fn families() -> Vec<Family> {
        vec![
            Family::Gemm,
            Family::BatchedGemm,
            conv(GroupMode::None),
            conv(GroupMode::SingleGroup),
            conv(GroupMode::MultipleGroup),
            conv(GroupMode::Depthwise),
        ]
    }

    fn epilogues() -> Vec<Epilogue> {
        let form = |beta_source, bias, activation, residual| {
            Epilogue::new(NormalForm { beta_source, bias, activation, residual }).unwrap()
        };
        vec![
            Epilogue::plain(),
            form(true, false, Activation::Identity, None),
            form(false, true, Activation::Relu, None),
            form(false, true, Activation::GeluErf, Some(ResidualAt::BeforeActivation)),
            form(false, true, Activation::Silu, Some(ResidualAt::AfterActivation)),
        ]
    }

    fn layouts(types: Types, arch: Arch) -> Vec<[Layout; 3]> {
        use Layout::*;
        if arch == Arch::Sm90 && types.input == Element::F32 {
            vec![[RowMajor, ColumnMajor, RowMajor], [RowMajor, ColumnMajor, ColumnMajor]]
        } else {
            vec![
                [RowMajor, RowMajor, RowMajor],
                [RowMajor, ColumnMajor, RowMajor],
                [ColumnMajor, RowMajor, ColumnMajor],
            ]
        }
    }

    #[test]
    fn counts_per_arch_are_in_range() {
        for t in all_types() {
            let n80 = candidates(Arch::Sm80, Family::Gemm, t, ALIGN8).len();
            assert!((16..=22).contains(&n80), "sm80 {t:?}: {n80}");
            let n90 = candidates(Arch::Sm90, Family::Gemm, t, ALIGN8).len();
            assert!((24..=30).contains(&n90), "sm90 {t:?}: {n90}");
            // sm80 convs use the GEMM tiles but 256x64x(128 bytes), whose 16 activation loads
            // per thread spill.
            let conv80 = candidates(Arch::Sm80, conv(GroupMode::None), t, ALIGN8).len();
            assert_eq!(conv80, n80 - 2, "sm80 conv {t:?}");
            let conv90 = candidates(Arch::Sm90, conv(GroupMode::None), t, ALIGN8).len();
            assert!((8..=12).contains(&conv90), "sm90 conv {t:?}: {conv90}");
        }
        let dw =
            candidates(Arch::Sm80, conv(GroupMode::Depthwise), types(Element::F16, Element::F32, Element::F16), ALIGN8);
        // CUTLASS's three SIMT tiles, and the direct kernel's 4 vector widths x 3 column counts.
        assert_eq!(dw.len(), 3 + 12);
        assert_eq!(dw.iter().filter(|c| matches!(c.tile, TileConfig::Direct(_))).count(), 12);
        // No depthwise or grouped conv on sm90.
        for g in [GroupMode::SingleGroup, GroupMode::MultipleGroup, GroupMode::Depthwise] {
            assert!(candidates(Arch::Sm90, conv(g), types(Element::F16, Element::F32, Element::F16), ALIGN8).is_empty());
        }
    }

    #[test]
    fn the_full_tables_survive_for_aligned_data() {
        // Nothing is dropped silently for the standard configurations: the tables are valid
        // by construction.
        let t = types(Element::F16, Element::F32, Element::F16);
        assert_eq!(candidates(Arch::Sm80, Family::Gemm, t, ALIGN8).len(), SM80_TABLE.len());
        let sm90_gemm: usize = SM90_GEMM_TABLE.iter().map(|e| e.3.len()).sum();
        assert_eq!(candidates(Arch::Sm90, Family::Gemm, t, ALIGN8).len(), sm90_gemm);
        let sm90_conv: usize = SM90_CONV_TABLE.iter().map(|e| e.2.len()).sum();
        assert_eq!(candidates(Arch::Sm90, conv(GroupMode::None), t, ALIGN8).len(), sm90_conv);
    }

    #[test]
    fn every_candidate_validates() {
        let alignments = [
            ALIGN8,
            Alignment { a: 4, b: 4, c: 4 },
            Alignment { a: 2, b: 2, c: 2 },
            Alignment { a: 8, b: 8, c: 1 },
            Alignment { a: 1, b: 1, c: 1 },
        ];
        let mut checked = 0;
        for arch in [Arch::Sm80, Arch::Sm90] {
            for family in families() {
                for t in all_types() {
                    for &alignment in &alignments {
                        for c in candidates(arch, family, t, alignment) {
                            for layouts in layouts(t, arch) {
                                for epilogue in epilogues() {
                                    let spec = c.spec(family, t, layouts, alignment, epilogue);
                                    match validate(&spec) {
                                        Ok(()) => {}
                                        // Rules about the epilogue/layout pairing, whatever the tile.
                                        Err(
                                            Rejection::GroupedConvBroadcastEpilogue { .. }
                                            | Rejection::Sm80ColumnMajorBias { .. },
                                        ) => continue,
                                        Err(e) => {
                                            panic!("{} for {family:?} {t:?} {alignment:?} {layouts:?}: {e}", c.name)
                                        }
                                    }
                                    checked += 1;
                                }
                            }
                        }
                    }
                }
            }
        }
        assert!(checked > 5000, "{checked}");
    }

    #[test]
    fn names_are_unique_and_stable() {
        for arch in [Arch::Sm80, Arch::Sm90] {
            for family in [Family::Gemm, conv(GroupMode::None)] {
                let cs = candidates(arch, family, types(Element::F16, Element::F32, Element::F16), ALIGN8);
                let names: HashSet<_> = cs.iter().map(|c| c.name.clone()).collect();
                assert_eq!(names.len(), cs.len(), "{arch:?} {family:?}");
            }
        }
        let c = &candidates(Arch::Sm80, Family::Gemm, types(Element::F16, Element::F32, Element::F16), ALIGN8)[0];
        assert_eq!(c.name, "sm80_256x128x32_w64x64x32_s3_sw8");
        let c = &candidates(Arch::Sm90, Family::Gemm, types(Element::F16, Element::F32, Element::F16), ALIGN8)[1];
        assert_eq!(c.name, "sm90_128x256x64_c2x1_coop_tma");
    }

    #[test]
    fn alignment_shapes_the_lists() {
        let f16 = types(Element::F16, Element::F32, Element::F16);
        // 16-bit data aligned to 1 element: cp.async cannot load it, TMA neither.
        let a1 = Alignment { a: 1, b: 1, c: 1 };
        assert!(candidates(Arch::Sm80, Family::Gemm, f16, a1).is_empty());
        assert!(candidates(Arch::Sm90, Family::Gemm, f16, a1).is_empty());
        // ... except depthwise: CUTLASS's SIMT kernel has scalar accesses anyway, and the direct
        // kernel reads one channel at a time.
        let dw = candidates(Arch::Sm80, conv(GroupMode::Depthwise), f16, a1);
        assert_eq!(dw.len(), 3 + 3);
        assert!(dw.iter().all(|c| !matches!(c.tile, TileConfig::Direct(t) if t.vector > 1)));
        // Unaligned output on sm90: the no-smem epilogue.
        let c1 = Alignment { a: 8, b: 8, c: 1 };
        let cs = candidates(Arch::Sm90, Family::Gemm, f16, c1);
        assert!(!cs.is_empty());
        assert!(cs.iter().all(|c| matches!(c.tile, TileConfig::Sm90(t) if t.epilogue == EpilogueSchedule::NoSmem)));
        // ... but sm90 convs have the TMA epilogue only.
        assert!(candidates(Arch::Sm90, conv(GroupMode::None), f16, c1).is_empty());
        // f32 output "aligned to 8" is instantiated with 4-element accesses.
        let f32_out = types(Element::F16, Element::F32, Element::F32);
        assert_eq!(vector_alignment(f32_out, ALIGN8), Alignment { a: 8, b: 8, c: 4 });
        assert_eq!(candidates(Arch::Sm80, Family::Gemm, f32_out, ALIGN8).len(), SM80_TABLE.len());
        // tf32 halves K in elements: same bytes.
        let tf32 = candidates(Arch::Sm80, Family::Gemm, types(Element::F32, Element::F32, Element::F32), ALIGN8);
        assert!(tf32
            .iter()
            .all(|c| matches!(c.tile, TileConfig::Sm80(t) if t.threadblock[2] == 16 || t.threadblock[2] == 32)));
    }

    #[test]
    fn split_k_variants_validate() {
        let f16 = types(Element::F16, Element::F32, Element::F16);
        for c in candidates(Arch::Sm80, Family::Gemm, f16, ALIGN8) {
            let s = with_split_k(&c, 4);
            assert!(s.name.ends_with("_splitk4"), "{}", s.name);
            validate(&s.spec(Family::Gemm, f16, [Layout::RowMajor; 3], ALIGN8, Epilogue::plain())).unwrap();
        }
    }
    #[test]
    fn every_candidate_renders() {
        // Bolt's templates accept every generated candidate that validate accepts: validate
        // runs before rendering and must not let through what the templates turn down.
        let mut failures = Vec::new();
        for arch in [Arch::Sm80, Arch::Sm90] {
            for family in families() {
                for t in all_types() {
                    for alignment in [ALIGN8, Alignment { a: 8, b: 8, c: 1 }, Alignment { a: 4, b: 4, c: 4 }] {
                        for c in candidates(arch, family, t, alignment) {
                            for layouts in layouts(t, arch) {
                                for epilogue in epilogues() {
                                    let spec = c.spec(family, t, layouts, alignment, epilogue);
                                    if validate(&spec).is_err() {
                                        continue;
                                    }
                                    if let Err(e) = crate::render::render(&spec, "k") {
                                        failures.push(format!(
                                            "{} {family:?} {t:?} {alignment:?} {layouts:?} {}: {e}",
                                            c.name,
                                            spec.epilogue.name()
                                        ));
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        assert!(
            failures.is_empty(),
            "{} rejected by the templates, e.g.:\n{}",
            failures.len(),
            failures[..failures.len().min(20)].join("\n")
        );
    }
}
