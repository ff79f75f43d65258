//! The build pipeline end to end with the stand-in kernel source (plain CUDA behind the
//! bolt_kernel.h ABI): nvcc compiles, the cache, the link, the manifest and the loader. Needs
//! the toolchain (`bolt-toolchain install`), no GPU.

mod build_support;

use std::ffi::c_void;
use std::fs;

use bolt_codegen::abi::{BoltArgs, BoltConv2dProblem, BoltGemmProblem, ProblemKind, Status};
use bolt_codegen::builder::BuildError;
use bolt_codegen::cache::{Cache, EntryKind};
use bolt_codegen::loader::{KernelLibrary, LoadError};
use bolt_codegen::manifest::Manifest;
use bolt_codegen::spec::{Arch, TileConfig};
use bolt_cutlass::fatbin::Image;
use build_support::*;

#[test]
fn builds_links_loads_then_rebuilds_from_cache_without_nvcc() {
    init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let mut specs = gemms(5);
    specs.push(conv(true));
    specs.push(specs[0].clone()); // duplicates are built once

    let cold = builder_with(dir.path().join("cold"), cache.clone(), |o| o.sm80_kernels_per_unit = 2)
        .build(&StandIn::default(), &specs)
        .unwrap();
    assert_eq!(cold.symbols.len(), 6);
    assert!(cold.units.len() >= 3 && cold.units.iter().all(|u| u.symbols.len() <= 2), "{:?}", cold.units);
    assert_eq!(cold.nvcc_compiles, cold.units.len());
    assert_eq!(cold.nvcc_links, 1);
    assert!(cold.units.iter().all(|u| u.compiled && u.log.is_file() && u.source.is_file()));
    eprintln!(
        "cold: {} units, nvcc {:.1}s compile + {:.1}s link, {:.1}s total",
        cold.units.len(),
        cold.compile_seconds,
        cold.link_seconds.unwrap(),
        cold.total_seconds
    );

    let lib = KernelLibrary::open(&cold.library).unwrap();
    let manifest = lib.manifest();
    assert_eq!(manifest.kernels.len(), 6);
    assert_eq!(manifest.abi_version, bolt_codegen::abi::ABI_VERSION);
    assert_eq!(manifest.cutlass_version, toolchain().cutlass_version().to_string());
    assert_eq!(manifest.nvcc_flags["sm_80"].iter().filter(|f| *f == "arch=compute_80,code=sm_80").count(), 1);
    assert_eq!(manifest.nvcc_flags["sm_80"].iter().filter(|f| *f == "arch=compute_80,code=compute_80").count(), 1);
    // Each unit's fat binary carries sm_80 SASS (A100) and compute_80 PTX (JIT-compiled on an H100).
    // (The static CUDA runtime brings a fat binary of its own, for other archs.)
    let fatbins: Vec<_> = bolt_cutlass::fatbin::fat_binaries(&fs::read(&cold.library).unwrap())
        .into_iter()
        .filter(|images| images.iter().any(|i| matches!(i, Image::Sass(80) | Image::Ptx(80))))
        .collect();
    assert_eq!(fatbins.len(), cold.units.len(), "{fatbins:?}");
    for images in &fatbins {
        let mut images = images.clone();
        images.sort();
        assert_eq!(images, [Image::Sass(80), Image::Ptx(80)]);
    }
    assert_eq!(Manifest::read(&cold.manifest).unwrap(), *manifest);
    for entry in &manifest.kernels {
        let unit = &manifest.units[entry.unit];
        assert!(unit.symbols.contains(&entry.symbol));
        assert_eq!(entry.source_hash, unit.source_hash);
        assert_eq!(entry.nvcc_arch, "sm_80");
    }
    assert_eq!(lib.kernels().len(), 6);

    for kernel in lib.kernels() {
        // Null problem: the ABI's answer, no crash.
        assert_eq!(unsafe { kernel.can_implement_raw(std::ptr::null::<c_void>()) }, Status::NullArgument);
        match kernel.problem_kind() {
            ProblemKind::Gemm => {
                assert_eq!(kernel.entry().family, "gemm");
                let ok = BoltGemmProblem::packed(256, 512, 128, kernel.spec().layouts);
                assert_eq!(kernel.can_implement(&ok), Status::Ok, "{}", kernel.symbol());
                assert_eq!(kernel.workspace_size(&ok), 256);
                let misaligned = BoltGemmProblem::packed(256, 512, 100, kernel.spec().layouts);
                assert_eq!(kernel.can_implement(&misaligned), Status::MisalignedOperand);
                let empty = BoltGemmProblem::packed(0, 512, 128, kernel.spec().layouts);
                assert_eq!(kernel.can_implement(&empty), Status::UnsupportedProblem);
                assert_eq!(kernel.can_implement(&BoltConv2dProblem::default()), Status::UnsupportedProblem);
            }
            ProblemKind::Conv2d => {
                assert_eq!(kernel.entry().family, "conv2d_fprop");
                let p =
                    BoltConv2dProblem { n: 1, h: 8, w: 8, c: 16, k: 32, r: 3, s: 3, p: 8, q: 8, ..Default::default() };
                assert_eq!(kernel.can_implement(&p), Status::Ok);
                assert_eq!(kernel.can_implement(&BoltGemmProblem::default()), Status::UnsupportedProblem);
            }
        }
        assert!(std::ptr::eq(lib.get(kernel.symbol()).unwrap().entry(), kernel.entry()));
    }

    // Same inputs, fresh build directory: everything comes from the cache.
    let warm = builder_with(dir.path().join("warm"), cache.clone(), |o| o.sm80_kernels_per_unit = 2)
        .build(&StandIn::default(), &specs)
        .unwrap();
    assert_eq!(warm.nvcc_invocations, 0, "{warm:?}");
    assert!(warm.units.iter().all(|u| !u.compiled));
    assert_eq!(warm.symbols, cold.symbols);
    assert_eq!(fs::read(&warm.library).unwrap(), fs::read(&cold.library).unwrap());
    eprintln!("warm: nvcc ran {} times, {:.2}s total", warm.nvcc_invocations, warm.total_seconds);
    assert_eq!(KernelLibrary::open(&warm.library).unwrap().kernels().len(), 6);

    // The typed set-up API. Refusals come back as errors naming the kernel and the function;
    // the stand-in's initialize and update touch no device, so their success shows here too
    // (nothing is launched: the pointers are fake).
    let kernel = lib.kernels().iter().find(|k| k.problem_kind() == ProblemKind::Gemm).unwrap();
    let ok = BoltGemmProblem::packed(256, 512, 128, kernel.spec().layouts);
    let fake = 0x1000 as *mut c_void;
    let args = BoltArgs { d: fake, ..Default::default() };
    let null = std::ptr::null_mut();
    let err = unsafe { kernel.initialize(&ok, &args, fake, 255, null) }.unwrap_err();
    assert_eq!(err.status, Status::WorkspaceTooSmall);
    assert_eq!(err.to_string(), format!("{}_initialize: workspace too small", kernel.symbol()));
    let err = unsafe { kernel.initialize(&ok, &BoltArgs::default(), fake, 256, null) }.unwrap_err();
    assert_eq!(err.status, Status::NullArgument);
    let err = unsafe { kernel.initialize(&BoltConv2dProblem::default(), &args, fake, 256, null) }.unwrap_err();
    assert_eq!(err.status, Status::UnsupportedProblem, "a problem of the other kind is refused in Rust");
    let mut params = unsafe { kernel.initialize(&ok, &args, fake, 256, null) }.unwrap();
    assert_eq!(kernel.params_size(), 16);
    assert!(params.bytes() >= kernel.params_size() && params.bytes() % bolt_codegen::abi::PARAMS_ALIGNMENT == 0);
    assert_eq!(params.symbol(), kernel.symbol());
    assert_eq!(unsafe { params.update(&BoltArgs::default()) }.unwrap_err().status, Status::NullArgument);
    unsafe { params.update(&args) }.unwrap();

    // A kernel stays usable after its library handle is dropped.
    let kernel = lib.kernels()[0].clone();
    drop(lib);
    assert_eq!(unsafe { kernel.can_implement_raw(std::ptr::null()) }, Status::NullArgument);
}

#[test]
fn damaged_cache_entries_are_detected_and_rebuilt() {
    init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let cache_dir = dir.path().join("cache");
    let specs = gemms(2);
    let build = |out: &str| {
        builder_with(dir.path().join(out), cache_dir.clone(), |o| o.sm80_kernels_per_unit = 1)
            .build(&StandIn::default(), &specs)
            .unwrap()
    };
    let first = build("a");
    assert_eq!((first.nvcc_compiles, first.nvcc_links), (2, 1));

    // Truncate one object: detected by its stored size, recompiled; the library (keyed by
    // the objects' keys) is still a hit.
    let object = &first.units[0].object;
    let len = fs::metadata(object).unwrap().len();
    fs::OpenOptions::new().write(true).open(object).unwrap().set_len(len / 2).unwrap();
    let cache = Cache::open(&cache_dir).unwrap();
    assert!(cache.get(EntryKind::Object, &first.units[0].object_key).is_none());
    let second = build("b");
    assert_eq!((second.nvcc_compiles, second.nvcc_links), (1, 0));
    assert!(second.units[0].compiled && !second.units[1].compiled);
    assert_eq!(fs::metadata(object).unwrap().len(), len);

    // Corrupt the cached library without changing its size: caught by the content hash.
    let cached_lib = fs::read_dir(cache_dir.join("libs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "so"))
        .unwrap();
    let mut bytes = fs::read(&cached_lib).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    fs::write(&cached_lib, &bytes).unwrap();
    let third = build("c");
    assert_eq!((third.nvcc_compiles, third.nvcc_links), (0, 1));
    assert_eq!(KernelLibrary::open(&third.library).unwrap().kernels().len(), 2);
}

#[test]
fn a_failing_unit_reports_its_specs_and_log() {
    init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let specs = gemms(2);
    let source = StandIn::default();
    let broken = bolt_codegen::builder::KernelSource::symbol(&source, &specs[1]);
    let source = StandIn { broken: vec![broken.clone()], ..StandIn::default() };
    let b = builder_with(dir.path().join("out"), dir.path().join("cache"), |o| o.sm80_kernels_per_unit = 1);
    let err = b.build(&source, &specs).unwrap_err();
    let message = err.to_string();
    eprintln!("{message}");
    let BuildError::Compile { failures, units } = err else { panic!("expected a compile error, got {message}") };
    assert_eq!((failures.len(), units), (1, 2));
    let failure = &failures[0];
    assert_eq!(failure.kernels.len(), 1);
    assert_eq!(failure.kernels[0].0, broken);
    assert_eq!(failure.kernels[0].1, serde_json::to_string(&specs[1]).unwrap());
    assert!(message.contains(&broken) && message.contains(&failure.kernels[0].1));
    assert!(message.contains(&failure.log.display().to_string()));
    let log = fs::read_to_string(&failure.log).unwrap();
    assert!(log.contains("deliberately broken") && log.contains("nvcc"), "{log}");
    assert!(failure.errors.contains("deliberately broken"));
    // The healthy unit was compiled and cached: fixing the broken one recompiles only it.
    let fixed = b.build(&StandIn::default(), &specs).unwrap();
    assert_eq!(fixed.nvcc_compiles, 1);
}

#[test]
fn rejected_and_other_arch_specs_are_reported_not_built() {
    init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let mut specs = gemms(1);
    let mut split = specs[0].clone();
    if let TileConfig::Sm80(t) = &mut split.tile {
        t.split_k = 4;
    }
    specs.push(split.clone());
    let mut hopper = specs[0].clone();
    hopper.arch = Arch::Sm90;
    specs.push(hopper);
    let source = StandIn { reject_split_k: true, ..StandIn::default() };
    let report = builder_with(dir.path().join("out"), dir.path().join("cache"), |o| o.archs = Some(vec![Arch::Sm80]))
        .build(&source, &specs)
        .unwrap();
    assert_eq!(report.symbols.len(), 1);
    assert_eq!(report.rejected.len(), 1);
    assert_eq!(report.rejected[0].spec, split);
    assert!(report.rejected[0].reason.contains("split-K"));
    assert_eq!(report.skipped_other_arch, 1);
    assert_eq!(report.nvcc_compiles, 1);

    // Nothing left to build is an error that says why.
    let err = builder(dir.path().join("none"), dir.path().join("cache")).build(&source, &[split]).unwrap_err();
    assert!(matches!(err, BuildError::NoKernels { .. }));
    assert!(err.to_string().contains("split-K"), "{err}");
}

#[test]
fn loader_checks_the_manifest_against_the_library() {
    init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let report =
        builder(dir.path().join("out"), dir.path().join("cache")).build(&StandIn::default(), &gemms(1)).unwrap();
    let mut manifest = Manifest::read(&report.manifest).unwrap();

    // A manifest symbol the library lacks: the error names it.
    let mut ghost = manifest.kernels[0].clone();
    ghost.symbol = "bolt_ghost_kernel".into();
    manifest.kernels.insert(0, ghost);
    let ghost_manifest = dir.path().join("ghost.manifest.json");
    manifest.write(&ghost_manifest).unwrap();
    let err = KernelLibrary::open_with_manifest(&report.library, &ghost_manifest).unwrap_err();
    assert!(
        matches!(&err, LoadError::MissingSymbol { symbol, .. } if symbol == "bolt_ghost_kernel_can_implement"),
        "{err}"
    );
    assert!(err.to_string().contains("bolt_ghost_kernel_can_implement"));

    // Another ABI version.
    let mut other_abi = Manifest::read(&report.manifest).unwrap();
    other_abi.abi_version += 1;
    other_abi.write(&ghost_manifest).unwrap();
    assert!(matches!(
        KernelLibrary::open_with_manifest(&report.library, &ghost_manifest),
        Err(LoadError::AbiMismatch { .. })
    ));

    // A library that is not the one the manifest describes.
    let copy = dir.path().join("libcopy.so");
    let mut bytes = fs::read(&report.library).unwrap();
    bytes.extend_from_slice(b"tail");
    fs::write(&copy, bytes).unwrap();
    fs::copy(&report.manifest, Manifest::path_for(&copy)).unwrap();
    let err = KernelLibrary::open(&copy).unwrap_err();
    assert!(matches!(err, LoadError::Stale { .. }), "{err}");

    // No manifest at all.
    fs::remove_file(Manifest::path_for(&copy)).unwrap();
    assert!(matches!(KernelLibrary::open(&copy), Err(LoadError::Manifest(_))));
}

#[test]
fn concurrent_builds_share_one_cache_without_compiling_twice() {
    init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let specs = gemms(3);
    let reports: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|i| {
                let (out, cache, specs) = (dir.path().join(format!("out{i}")), cache.clone(), specs.clone());
                s.spawn(move || {
                    builder_with(out, cache, |o| o.sm80_kernels_per_unit = 1)
                        .build(&StandIn::default(), &specs)
                        .unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let units = reports[0].units.len();
    assert_eq!(units, 3);
    assert_eq!(reports.iter().map(|r| r.nvcc_compiles).sum::<usize>(), units);
    assert_eq!(reports.iter().map(|r| r.nvcc_links).sum::<usize>(), 1);
    for r in &reports {
        assert_eq!(KernelLibrary::open(&r.library).unwrap().kernels().len(), 3);
    }
}

#[test]
fn glue_kernels_build_into_the_same_library() {
    use bolt_codegen::abi::{BoltGlueArgs, BoltGlueProblem};
    use bolt_codegen::glue::{CastSpec, Direction, GlueSpec, PadSpec, TransposeSpec};
    use bolt_codegen::spec::Element;
    init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let glue = [
        GlueSpec::Transpose(TransposeSpec { direction: Direction::NchwToNhwc, element: Element::F16 }),
        GlueSpec::PadChannels(PadSpec { element: Element::F16, alignment: 8 }),
        GlueSpec::Cast(CastSpec { from: Element::F32, to: Element::F16 }),
    ];
    let build = |out: &str| {
        builder(dir.path().join(out), dir.path().join("cache"))
            .build_all(&StandIn::default(), &gemms(1), &[], &glue, &[], &[], &[])
            .unwrap()
    };
    let cold = build("cold");
    assert_eq!((cold.units.len(), cold.symbols.len()), (2, 4));
    let lib = KernelLibrary::open(&cold.library).unwrap();
    assert_eq!((lib.kernels().len(), lib.glue_kernels().len()), (1, 3));
    let manifest = lib.manifest();
    for g in &manifest.glue {
        assert_eq!(manifest.units[g.unit].nvcc_arch, "sm_80");
        assert!(manifest.units[g.unit].symbols.contains(&g.symbol));
    }
    let pad = lib.glue(&glue[1]).unwrap();
    let problem = glue[1].problem(1, 3, 8, 8);
    assert_eq!(problem.c_padded, 8);
    assert_eq!(pad.can_implement(&problem), Status::Ok);
    assert_eq!(pad.can_implement(&BoltGlueProblem { c_padded: 4, ..problem }), Status::UnsupportedProblem);
    let fake = BoltGlueArgs { x: 0x1000 as *const c_void, y: 0x1000 as *mut c_void };
    let null = std::ptr::null_mut();
    let err = unsafe { pad.initialize(&problem, &BoltGlueArgs::default(), null) }.unwrap_err();
    assert_eq!(err.to_string(), format!("{}_initialize: null argument", pad.symbol()));
    // Glue set-up touches no device; nothing is launched (the pointers are fake).
    let params = unsafe { pad.initialize(&problem, &fake, null) }.unwrap();
    assert_eq!(params.symbol(), pad.symbol());
    // Warm: nothing compiles.
    let warm = build("warm");
    assert_eq!(warm.nvcc_invocations, 0);
    assert_eq!(KernelLibrary::open(&warm.library).unwrap().glue_kernels().len(), 3);
}
