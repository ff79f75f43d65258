//! The analytic ranking on known cases: what a tuned CUTLASS user would expect.

use bolt_codegen::epilogue::Epilogue;
use bolt_codegen::spec::{Arch, KernelSchedule, Layout, TileConfig};
use bolt_codegen::validate::validate;
use bolt_profiler::analytic::{can_implement, rank, rank_all, Ranked};
use bolt_profiler::device::DeviceSpec;
use bolt_profiler::workload::{Workload, F16_F32_F16};

const RRR: [Layout; 3] = [Layout::RowMajor; 3];

fn gemm(m: i64, n: i64, k: i64) -> Workload {
    Workload::gemm(&format!("{m}x{n}x{k}"), (m, n, k, 1), F16_F32_F16, RRR, Epilogue::plain()).unwrap()
}

fn tile_mn(r: &Ranked) -> (u32, u32) {
    match r.spec.tile {
        TileConfig::Sm80(t) => (t.threadblock[0], t.threadblock[1]),
        TileConfig::Sm90(t) => (t.tile[0], t.tile[1]),
        TileConfig::Direct(t) => (t.pixels, t.vector),
    }
}

fn split_k(r: &Ranked) -> u32 {
    match r.spec.tile {
        TileConfig::Sm80(t) => t.split_k,
        TileConfig::Sm90(_) | TileConfig::Direct(_) => 1,
    }
}

fn both() -> [(Arch, DeviceSpec); 2] {
    [(Arch::Sm80, DeviceSpec::a100_sxm4_80gb()), (Arch::Sm90, DeviceSpec::h100_sxm5_80gb())]
}

#[test]
fn tiny_m_prefers_the_smallest_m_tiles() {
    for (arch, dev) in both() {
        let r = rank(&gemm(8, 4096, 4096), &dev, arch);
        let min_m = r.iter().map(|x| tile_mn(x).0).min().unwrap();
        assert_eq!(min_m, 64);
        let top = &r[0];
        assert_eq!(tile_mn(top).0, min_m, "{arch:?}: top-1 {}", top.candidate.name);
        // The biggest data-parallel tiles waste 97% of their rows on M = 8: far down the list
        // (stream-K spreads the waste over every SM and is judged on its own).
        let stream_k = |x: &Ranked| matches!(x.spec.tile, TileConfig::Sm90(t) if t.kernel == KernelSchedule::StreamK);
        let pos = r.iter().position(|x| tile_mn(x) == (256, 128) && !stream_k(x)).unwrap();
        assert!(pos > r.len() / 2, "{arch:?}: 256x128 ranked {pos} of {}", r.len());
    }
}

#[test]
fn large_square_prefers_the_largest_tiles() {
    for (arch, dev) in both() {
        let r = rank(&gemm(8192, 8192, 8192), &dev, arch);
        let max_area = r.iter().map(|x| tile_mn(x).0 * tile_mn(x).1).max().unwrap();
        assert_eq!(max_area, 128 * 256);
        let (m, n) = tile_mn(&r[0]);
        assert_eq!(m * n, max_area, "{arch:?}: top-1 {}", r[0].candidate.name);
        assert!(split_k(&r[0]) == 1);
        // A sane fraction of peak: sm80 CUTLASS reaches ~90%, sm90 ~75-80%.
        let pct = r[0].estimate.pct_peak;
        assert!((65.0..=97.0).contains(&pct), "{arch:?}: {pct}% of peak");
        // The smallest tiles are far slower.
        let worst = r.iter().find(|x| tile_mn(x) == (64, 64)).unwrap();
        assert!(worst.estimate.time_s > 1.2 * r[0].estimate.time_s);
    }
}

#[test]
fn unaligned_k_excludes_every_align8_kernel() {
    for (arch, dev) in both() {
        // K = 4095: A's rows (lda = K) are 1-element aligned: no f16 kernel loads that
        // (cp.async needs 4 bytes, TMA 16); the ranking is empty and says why.
        let ranking = rank_all(&gemm(1024, 4096, 4095), &dev, arch);
        assert!(ranking.ranked.is_empty(), "{arch:?}");
        assert!(ranking.excluded.iter().any(|e| e.reason.contains("alignment a=1")), "{:?}", ranking.excluded);

        // K = 4092: 4-element aligned. sm80 runs alignment-4 kernels, never alignment-8 ones.
        let w = gemm(1024, 4096, 4092);
        let r = rank(&w, &dev, arch);
        assert!(r.iter().all(|x| x.spec.alignment.a <= 4), "{arch:?}");
        if arch == Arch::Sm80 {
            assert!(!r.is_empty());
            // The library's alignment-8 build of the top-1 cannot implement it.
            let mut spec = r[0].spec.clone();
            spec.alignment.a = 8;
            let err = can_implement(&spec, &w).unwrap_err();
            assert!(err.contains("4092") && err.contains("alignment 8"), "{err}");
        } else {
            // TMA needs 16-byte rows: 8 bytes is not enough.
            assert!(r.is_empty());
        }
    }
}

#[test]
fn small_output_with_huge_k_splits_k() {
    let dev = DeviceSpec::a100_sxm4_80gb();
    let r = rank(&gemm(512, 512, 65536), &dev, Arch::Sm80);
    assert!(split_k(&r[0]) > 1, "top-1 {}", r[0].candidate.name);
    let r = rank(&gemm(4096, 4096, 4096), &dev, Arch::Sm80);
    assert!(r.iter().all(|x| split_k(x) == 1), "split-K offered for a grid of many waves");
    // More K per output tile: more slices.
    let mid = rank(&gemm(512, 512, 8192), &dev, Arch::Sm80);
    assert!(split_k(&mid[0]) <= split_k(&rank(&gemm(256, 256, 65536), &dev, Arch::Sm80)[0]));

    // sm90 has stream-K for it.
    let r = rank(&gemm(512, 512, 65536), &DeviceSpec::h100_sxm5_80gb(), Arch::Sm90);
    assert!(
        matches!(r[0].spec.tile, TileConfig::Sm90(t) if t.kernel == KernelSchedule::StreamK),
        "top-1 {}",
        r[0].candidate.name
    );
}

#[test]
fn ranking_is_deterministic_valid_and_ordered() {
    for (arch, dev) in both() {
        for w in [gemm(8, 4096, 4096), gemm(1280, 3072, 768), gemm(8192, 8192, 8192), gemm(512, 512, 65536)] {
            let a = rank(&w, &dev, arch);
            let b = rank(&w, &dev, arch);
            let names =
                |r: &[Ranked]| r.iter().map(|x| (x.candidate.name.clone(), x.estimate.time_s)).collect::<Vec<_>>();
            assert_eq!(names(&a), names(&b));
            for pair in a.windows(2) {
                let (x, y) = (&pair[0], &pair[1]);
                assert!(
                    x.estimate.time_s < y.estimate.time_s
                        || (x.estimate.time_s == y.estimate.time_s && x.candidate.name < y.candidate.name)
                );
            }
            for x in &a {
                validate(&x.spec).unwrap();
                let e = &x.estimate;
                assert!(e.time_s.is_finite() && e.time_s > 0.0);
                assert!(e.pct_peak > 0.0 && e.pct_peak <= 100.0, "{}: {}", x.candidate.name, e.pct_peak);
                assert!(e.dram_bytes >= w.bytes() * 0.999, "{}", x.candidate.name);
            }
        }
    }
}

#[test]
fn conv_ranking_and_epilogue_rules() {
    use bolt_profiler::workload::Conv2dShape;
    let dev = DeviceSpec::a100_sxm4_80gb();
    let mut s = Conv2dShape::new(32, 56, 56, 64, 64, 3, 3);
    s.pad = (1, 1);
    let w = Workload::conv2d("s1_3x3", s, F16_F32_F16, bolt_profiler::workload::parse_epilogue("bias+relu").unwrap())
        .unwrap();
    assert!(!rank(&w, &dev, Arch::Sm80).is_empty());
    assert!(!rank(&w, &DeviceSpec::h100_sxm5_80gb(), Arch::Sm90).is_empty());
    // Residual block epilogues have no split-K: those variants are excluded with the reason.
    let w = Workload::gemm(
        "ffn2",
        (256, 256, 65536, 1),
        F16_F32_F16,
        RRR,
        bolt_profiler::workload::parse_epilogue("bias+residual").unwrap(),
    )
    .unwrap();
    let ranking = rank_all(&w, &dev, Arch::Sm80);
    assert!(ranking.ranked.iter().all(|x| split_k(x) == 1));
    assert!(ranking.excluded.iter().any(|e| e.reason.contains("residual block")));
    // Alignment 2 (C = 46) is ranked, and slower than the padded problem (Bolt Table 3).
    let unpadded = Workload::conv2d(
        "c46",
        Conv2dShape { pad: (1, 1), ..Conv2dShape::new(32, 20, 26, 46, 32, 3, 3) },
        F16_F32_F16,
        Epilogue::plain(),
    )
    .unwrap();
    let padded = Workload::conv2d(
        "c48",
        Conv2dShape { pad: (1, 1), ..Conv2dShape::new(32, 20, 26, 48, 32, 3, 3) },
        F16_F32_F16,
        Epilogue::plain(),
    )
    .unwrap();
    let t = |w: &Workload| rank(w, &dev, Arch::Sm80)[0].estimate.time_s;
    assert!(t(&unpadded) > 1.3 * t(&padded), "{} vs {}", t(&unpadded), t(&padded));

    // Depthwise on sm80: CUTLASS's SIMT kernels (at scalar alignment) and Bolt's direct kernel,
    // which reads 16-byte channel vectors and ranks first: its traffic is the tensors once
    // (the SIMT implicit GEMM moves its tiles through shared memory at 2 stages); none on sm90.
    let dw = Conv2dShape { groups: 256, pad: (1, 1), ..Conv2dShape::new(32, 28, 28, 256, 256, 3, 3) };
    let w = Workload::conv2d("dw", dw, F16_F32_F16, Epilogue::plain()).unwrap();
    let r = rank(&w, &dev, Arch::Sm80);
    assert_eq!(r.iter().filter(|x| x.candidate.name.ends_with("_simt")).count(), 3);
    assert_eq!(r.iter().filter(|x| matches!(x.spec.tile, TileConfig::Direct(_))).count(), 12);
    assert!(matches!(r[0].spec.tile, TileConfig::Direct(t) if t.vector == 8), "{}", r[0].candidate.name);
    let simt = r.iter().find(|x| x.candidate.name.ends_with("_simt")).unwrap();
    assert!(simt.estimate.time_s > 2.0 * r[0].estimate.time_s, "{} vs {}", simt.estimate.time_s, r[0].estimate.time_s);
    assert!(rank(&w, &DeviceSpec::h100_sxm5_80gb(), Arch::Sm90).is_empty());
}

#[test]
fn a_stitched_row_reduction_reads_its_row_once_while_the_row_cache_holds_it() {
    use bolt_profiler::analytic::stitched_rows_seconds;
    let h100 = DeviceSpec::h100_sxm5_80gb();
    let t = |width: f64, passes| stitched_rows_seconds(4096.0, width, 2.0, 2.0, passes, &h100);
    // A BERT-base LayerNorm row (768) or a long softmax row (8192): three passes cost one.
    for width in [768.0, bolt_codegen::stitch::ROW_CACHE_COLUMNS as f64] {
        assert_eq!(t(width, 3), t(width, 1), "width {width}");
    }
    // Past the cache the later passes re-read the rest of the row.
    assert!(t(32768.0, 3) > t(32768.0, 1));
}
