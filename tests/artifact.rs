//! Artifacts end to end without a GPU: `compile` builds real kernel libraries with nvcc
//! (through the content-hash cache in ~/.cache/bolt, so warm runs take seconds), the reader
//! checks every file, and the `reference` device runs the artifact's own plan and weights.
//!
//! What "outputs equal the original model" checks here: the artifact's planned graph, weights
//! in kernel layout, serialisation and reading, run by the reference executor, against the
//! original graph run by the same executor. It checks the rewriting and the format, not the
//! reference's kernels (tests/models.rs and tests/conformance.rs check those against
//! onnxruntime and the ONNX test cases); the GPU kernels need a GPU (`bolt run --device cuda
//! --check`).

mod common;

use bolt::artifact::format::{DimRange, KernelChoice, PLAN_FILE, WEIGHTS_FILE};
use bolt::artifact::{compile, Artifact, CompileOptions, Precision};
use bolt::ir::*;
use bolt::runtime::{self, DeviceKind, RunOptions};
use bolt_codegen::glue::GlueSpec;
use bolt_codegen::spec::{Arch, TileConfig};
use common::nets::Net;
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

/// Builds `g` into `dir`, runs the artifact on the reference device and compares with `g` on
/// the reference at the precision's tolerance. Returns the artifact.
fn build_and_check(
    g: &Graph,
    dir: &Path,
    archs: &[Arch],
    precision: Option<Precision>,
    dims: Vec<DimRange>,
) -> Artifact {
    let opts = CompileOptions { archs: archs.to_vec(), precision, dims: dims.clone(), ..CompileOptions::new(dir) };
    let report = compile(g, &opts).unwrap_or_else(|e| panic!("compile {}: {e}", g.name));
    println!("{}: {report}", g.name);
    assert!(report.kernel_nodes + report.chain_nodes > 0, "{}: no kernel node in the plan", g.name);
    let art = Artifact::open(dir).unwrap();
    assert_eq!(art.plan.kernels.len(), report.kernel_nodes);
    assert_eq!(art.plan.chains.len(), report.chain_nodes);
    let lib = bolt_codegen::loader::KernelLibrary::open(art.library.as_ref().unwrap()).unwrap();
    // Every kernel the plan names is in the library, for every bucket and arch asked for.
    for k in &art.plan.kernels {
        for bucket in &k.buckets {
            let archs_here: Vec<Arch> = bucket.iter().map(|c| c.arch).collect();
            assert_eq!(archs_here, archs, "{}: one kernel per arch", k.node);
            for c in bucket {
                assert!(lib.get(&c.symbol).is_some(), "{} missing from the library", c.symbol);
            }
        }
    }
    // The plan's data movement runs as glue kernels of the same library: no layout
    // transpose, channel padding or float cast is left to the host.
    for g in &art.plan.glue {
        assert!(lib.glue(&g.spec).is_some(), "glue {} missing from the library", g.symbol);
    }
    // Stitched regions likewise.
    for s in &art.plan.stitch {
        let k =
            lib.stitch(&s.symbol).unwrap_or_else(|| panic!("stitched kernel {} missing from the library", s.symbol));
        assert_eq!(k.spec(), &s.spec);
    }
    let graph = art.graph();
    for h in &art.plan.host_ops {
        let n = graph.nodes.iter().find(|n| n.name == h.node).unwrap();
        assert!(!is_data_movement(&n.op), "{}: {} ({}) left on the host: {}", g.name, h.node, h.op_type, h.reason);
    }
    let (rtol, atol) = art.manifest.precision.tolerance();
    let sizes: Vec<HashMap<String, usize>> = if dims.is_empty() {
        vec![HashMap::new()]
    } else {
        // The smallest and largest size of every range (different buckets).
        vec![
            dims.iter().map(|d| (d.name.clone(), d.min)).collect(),
            dims.iter().map(|d| (d.name.clone(), d.max)).collect(),
        ]
    };
    for b in sizes {
        kernels_take_the_runtime_problems(&art, &lib, &b);
        let inputs = bolt::compile::synthetic_inputs(g, &b, 5).unwrap();
        let want = bolt::reference::run(g, &inputs).unwrap();
        let mut exec = runtime::open(&art, DeviceKind::Reference, &RunOptions::default()).unwrap();
        let got = runtime::outputs_as_f32(exec.run(&inputs).unwrap());
        for o in &g.outputs {
            let (a, w) = (got[o].to_f64_vec(), want[o].to_f64_vec());
            assert_eq!(got[o].shape, want[o].shape, "{o}");
            for (i, (x, y)) in a.iter().zip(&w).enumerate() {
                assert!((x - y).abs() <= atol + rtol * y.abs(), "{} {o}[{i}] at {b:?}: {x} vs {y}", g.name);
            }
        }
    }
    art
}

/// What the cuda device would set up at `sizes`, short of a GPU: the problem it derives for
/// every kernel, chain and glue node (as `runtime::cuda` does, from the bound plan) is one the
/// library's kernel takes (`<symbol>_can_implement`, a host-side check).
fn kernels_take_the_runtime_problems(
    art: &Artifact,
    lib: &bolt_codegen::loader::KernelLibrary,
    sizes: &HashMap<String, usize>,
) {
    use bolt_codegen::abi::Status;
    use bolt_profiler::workload::Problem;
    let graph = bolt::plan::edit::bind_inputs(&art.graph(), sizes).unwrap();
    let bucket = art.plan.bucket_for(sizes);
    let (uses, skipped) = bolt::plan::lower::workloads(&graph, sizes);
    let (chains, _) = bolt::plan::lower::chains(&graph, &uses, &skipped);
    for k in &art.plan.kernels {
        let u = uses.iter().find(|u| u.node == k.node).unwrap();
        for c in &k.buckets[bucket] {
            let kernel = lib.get(&c.symbol).unwrap();
            let status = match &u.workload.problem {
                Problem::Gemm(p) => kernel.can_implement(p),
                Problem::Conv2d(p) => kernel.can_implement(p),
            };
            assert_eq!(status, Status::Ok, "{} on {:?}", c.symbol, u.workload.problem);
        }
    }
    for c in &art.plan.chains {
        let u = chains.iter().find(|u| u.node == c.node).unwrap();
        let kernel = lib.b2b(&c.buckets[bucket].symbol).unwrap();
        assert_eq!(kernel.can_implement(&u.problem), Status::Ok, "{} on {:?}", kernel.symbol, u.problem);
    }
    for gl in &art.plan.glue {
        let n = graph.nodes.iter().find(|n| n.name == gl.node).unwrap();
        let u = bolt::plan::lower::glue(&graph, n, sizes).unwrap().unwrap();
        assert_eq!(u.spec, gl.spec);
        assert_eq!(
            lib.glue(&gl.spec).unwrap().can_implement(&u.problem),
            Status::Ok,
            "{} on {:?}",
            gl.symbol,
            u.problem
        );
    }
    for a in &art.plan.attention {
        let n = graph.nodes.iter().find(|n| n.name == a.node).unwrap();
        let Op::Attention(op) = &n.op else { panic!("{}: not an attention node", a.node) };
        let shapes: Vec<Vec<usize>> =
            n.inputs.iter().flatten().map(|x| bolt::plan::edit::bound_shape(&graph, x, sizes).unwrap()).collect();
        let refs: Vec<&[usize]> = shapes.iter().map(|s| s.as_slice()).collect();
        let (problem, _) = bolt::plan::lower::attention_problem(op, &a.spec, &refs).unwrap();
        let kernel = lib.attention(&a.spec).unwrap_or_else(|| panic!("attention kernel {} missing", a.symbol));
        assert_eq!(kernel.can_implement(&problem), Status::Ok, "{} on {problem:?}", a.symbol);
    }
}

/// The data movement the planner inserts (NCHW <-> NHWC transposes, channel padding) and
/// float casts: what glue kernels run.
fn is_data_movement(op: &Op) -> bool {
    use bolt::plan::layout::{TO_NCHW, TO_NHWC};
    match op {
        Op::Transpose { perm: Some(p) } => p[..] == TO_NHWC || p[..] == TO_NCHW,
        Op::FitLastAxis { .. } => true,
        Op::Cast { to, .. } => to.is_float(),
        _ => false,
    }
}

/// A ResNet bottleneck block: 1x1 -> 3x3 -> 1x1 convs with BN-free biases, a residual add
/// and ReLUs, NCHW as exporters write it.
fn bottleneck() -> Graph {
    let mut n = Net::new(DType::F32);
    let x = n.input("x", &[2, 64, 14, 14]);
    let a = n.conv(&x, 64, 32, 1, 1, 0);
    let a = n.relu(&a);
    let b = n.conv(&a, 32, 32, 3, 1, 1);
    let b = n.relu(&b);
    let c = n.conv(&b, 32, 64, 1, 1, 0);
    let s = n.op("add", Op::Binary(Binary::Add), &[&c, &x]);
    let y = n.relu(&s);
    let mut g = n.finish(&[&y]);
    g.name = "resnet-bottleneck".into();
    g
}

/// One BERT encoder layer (single attention head): Q/K/V projections, softmax(QK^T/sqrt(d))V,
/// output projection + residual + LayerNorm, GELU feed-forward + residual + LayerNorm.
fn bert_layer() -> Graph {
    let (s, h, f) = (16, 64, 256);
    let mut n = Net::new(DType::F32);
    let x = n.input("x", &[1, s, h]);
    let q = n.linear(&x, h, h);
    let k = n.linear(&x, h, h);
    let v = n.linear(&x, h, h);
    let kt = n.op("kt", Op::Transpose { perm: Some(vec![0, 2, 1]) }, &[&k]);
    let qk = n.op("qk", Op::MatMul, &[&q, &kt]);
    let scale = n.b.initializer("scale", Tensor::scalar_f32(1.0 / (h as f32).sqrt()));
    let qk = n.op("scaled", Op::Binary(Binary::Mul), &[&qk, &scale]);
    let p = n.op("softmax", Op::Softmax { axis: -1 }, &[&qk]);
    let ctx = n.op("ctx", Op::MatMul, &[&p, &v]);
    let o = n.linear(&ctx, h, h);
    let r = n.op("res1", Op::Binary(Binary::Add), &[&o, &x]);
    let ln = |n: &mut Net, x: &str| {
        let gamma = n.b.initializer(&format!("{x}_gamma"), Tensor::from_f32(vec![h], vec![1.0; h]));
        let beta = n.b.initializer(&format!("{x}_beta"), Tensor::from_f32(vec![h], vec![0.0; h]));
        n.op("ln", Op::LayerNormalization { axis: -1, epsilon: 1e-5, stash_type: DType::F32 }, &[x, &gamma, &beta])
    };
    let r = ln(&mut n, &r);
    let f1 = n.linear(&r, h, f);
    let f1 = n.op("gelu", Op::Unary(Unary::Gelu { approximate: GeluApprox::None }), &[&f1]);
    let f2 = n.linear(&f1, f, h);
    let r2 = n.op("res2", Op::Binary(Binary::Add), &[&f2, &r]);
    let y = ln(&mut n, &r2);
    let mut g = n.finish(&[&y]);
    g.name = "bert-layer".into();
    g
}

fn range(name: &str, min: usize, max: usize) -> DimRange {
    DimRange { name: name.into(), min, max }
}

#[test]
fn default_model_sm80_with_shape_buckets() {
    let dir = tempfile::tempdir().unwrap();
    let g = bolt::models::default_model().unwrap();
    let art = build_and_check(&g, dir.path(), &[Arch::Sm80], None, vec![range("N", 1, 16)]);
    // f32 models run in TF32 by default, and the manifest says so.
    assert_eq!(art.manifest.precision, Precision::Tf32);
    assert!(art.manifest.numerics.contains("TF32"));
    assert_eq!(art.plan.buckets.len(), 3, "1..16: buckets 1, 4, 16");
    // The run-time rule: the smallest bucket covering the size.
    let at = |n: usize| art.plan.bucket_for(&HashMap::from([("N".to_string(), n)]));
    assert_eq!((at(1), at(3), at(4), at(5), at(16), at(40)), (0, 1, 1, 2, 2, 2));
    // Memory was planned for N <= 16 (a dim no bucket lists, at 1): a larger size would write
    // past the arena, which the CUDA executor then plans again and grows before the run.
    let fits = |k: &str, n: usize| art.plan.check_fits(&HashMap::from([(k.to_string(), n)]));
    assert!(fits("N", 16).is_ok() && fits("N", 1).is_ok() && fits("other", 1).is_ok());
    let why = fits("N", 40).unwrap_err();
    assert!(why.contains("'N' is 40") && why.contains("N <= 16"), "{why}");
    assert!(fits("other", 2).unwrap_err().contains("other <= 1"));
}

#[test]
fn default_model_f16_sm80() {
    let dir = tempfile::tempdir().unwrap();
    let g = bolt::models::default_model().unwrap();
    let art = build_and_check(&g, dir.path(), &[Arch::Sm80], Some(Precision::F16), vec![range("N", 2, 2)]);
    // Weights were cast at compile time.
    assert!(art.weights.values().all(|w| !w.dtype().is_float() || w.dtype() == DType::F16));
    // At batch 2 the planner fuses the two MLP GEMMs: one library then holds GEMM/conv
    // kernels, the chain kernel and the glue kernels (one Builder call).
    let lib = bolt_codegen::loader::KernelLibrary::open(art.library.as_ref().unwrap()).unwrap();
    assert_eq!(art.plan.chains.len(), 1, "{:?}", art.plan.host_ops);
    assert!(!art.plan.kernels.is_empty() && !art.plan.glue.is_empty());
    assert!(lib.b2b(&art.plan.chains[0].buckets[0].symbol).is_some());
    assert!(!lib.kernels().is_empty() && !lib.glue_kernels().is_empty());
}

/// The f16 default model's MLP chain is fused at batch 2 but has no chain kernel at batch 1
/// (one row has no aligned tiling): with a 1..2 range the artifact runs it unfused, as two
/// GEMM kernels, rather than leave the chain to the host, and says so.
#[test]
fn a_chain_without_a_kernel_in_some_bucket_runs_unfused() {
    let dir = tempfile::tempdir().unwrap();
    let g = bolt::models::default_model().unwrap();
    let opts = CompileOptions {
        precision: Some(Precision::F16),
        dims: vec![range("N", 1, 2)],
        ..CompileOptions::new(dir.path())
    };
    let report = compile(&g, &opts).unwrap();
    let why = report.chains_unfused.as_deref().expect("the chain is unfused");
    assert!(why.contains("no chain kernel"), "{why}");
    assert!(report.to_string().contains("back-to-back chains run unfused"), "{report}");
    let art = Artifact::open(dir.path()).unwrap();
    assert!(art.plan.chains.is_empty());
    assert!(art.plan.nodes.iter().all(|n| !matches!(n.op, Op::FusedChain(_))), "{:?}", art.plan.host_ops);
    assert!(art.plan.kernels.iter().any(|k| k.node.starts_with("fc")), "{:?}", art.plan.kernels);
}

/// One sm90a artifact. A single GEMM (+bias, GELU): each sm90a kernel costs ~1-2 min of
/// nvcc on 2 cores cold, so CI builds one (the default model's four take ~5 min).
#[test]
fn linear_gelu_sm90a() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = Net::new(DType::F32);
    let x = n.input("x", &[8, 64]);
    let y = n.linear(&x, 64, 128);
    let y = n.op("gelu", Op::Unary(Unary::Gelu { approximate: GeluApprox::None }), &[&y]);
    let mut g = n.finish(&[&y]);
    g.name = "linear-gelu".into();
    let art = build_and_check(&g, dir.path(), &[Arch::Sm90], None, vec![]);
    assert_eq!(art.manifest.archs, vec![Arch::Sm90]);
}

#[test]
fn resnet_bottleneck_sm80() {
    let dir = tempfile::tempdir().unwrap();
    let art = build_and_check(&bottleneck(), dir.path(), &[Arch::Sm80], None, vec![]);
    // Convs in kernel layout: OHWI weights.
    let conv_w = art.plan.weights.iter().filter(|w| w.shape.len() == 4).collect::<Vec<_>>();
    assert!(!conv_w.is_empty());
    assert!(art.plan.arena.bytes < art.plan.arena.naive_bytes, "the arena reuses memory");
    // NCHW in and out around the NHWC convs: transposes run as glue kernels.
    let transposes = art.plan.glue.iter().filter(|g| matches!(g.spec, GlueSpec::Transpose(_))).count();
    assert!(transposes >= 2, "{:?}", art.plan.glue);
}

/// A MobileNetV2 block (1x1 expand + ReLU, 3x3 depthwise + ReLU at strides 1 and 2, 1x1
/// project): its depthwise convs run Bolt's direct kernel (codegen/src/depthwise.rs) with bias
/// and activation fused, from the same library as the CUTLASS convs, in f16 and TF32; every
/// kernel takes the problem the runtime derives and the reference device equals the model.
/// The direct kernels' arithmetic is checked on the host in codegen/tests/depthwise.rs.
#[test]
fn depthwise_convs_run_the_direct_kernel_sm80() {
    let mut n = Net::new(DType::F32);
    let x = n.input("x", &[2, 16, 14, 14]);
    let a = n.conv(&x, 16, 32, 1, 1, 0);
    let a = n.relu(&a);
    let b = n.depthwise(&a, 32, 3, 1, 1);
    let b = n.relu(&b);
    let c = n.depthwise(&b, 32, 3, 2, 1);
    let c = n.relu(&c);
    let y = n.conv(&c, 32, 16, 1, 1, 0);
    let mut g = n.finish(&[&y]);
    g.name = "mobilenet-block".into();
    for precision in [Some(Precision::F16), None] {
        let dir = tempfile::tempdir().unwrap();
        let art = build_and_check(&g, dir.path(), &[Arch::Sm80], precision, vec![]);
        let direct: Vec<&KernelChoice> = art
            .plan
            .kernels
            .iter()
            .flat_map(|k| k.buckets.iter().flatten())
            .filter(|c| matches!(c.spec.tile, TileConfig::Direct(_)))
            .collect();
        assert_eq!(direct.len(), 2, "{precision:?}: {:?}", art.plan.kernels);
        for c in direct {
            assert!(c.spec.epilogue.expr.reads_bias() && c.spec.epilogue.name().contains("relu"), "{:?}", c.spec);
        }
    }
}

/// A back-to-back chain (f16 GEMM 64 -> 64 -> 32 with bias + ReLU, 2048 rows: the planner's
/// traffic model fuses it, as tests/plan_b2b.rs shows): the artifact runs it as one chain
/// kernel from the same library as the other kernels, and the reference device (which runs
/// the planned chain node) equals the original model.
#[test]
fn b2b_chain_artifact_sm80() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = Net::new(DType::F16);
    let mut x = n.input("x", &[2048, 64]);
    for w in [[64, 64], [64, 32]] {
        let y = n.linear(&x, w[0], w[1]);
        x = n.relu(&y);
    }
    let mut g = n.finish(&[&x]);
    g.name = "gemm-chain".into();
    let art = build_and_check(&g, dir.path(), &[Arch::Sm80], None, vec![]);
    assert_eq!(art.plan.chains.len(), 1, "{:?}", art.plan.host_ops);
    let chain = &art.plan.chains[0];
    assert_eq!(chain.scalars.len(), 2);
    let lib = bolt_codegen::loader::KernelLibrary::open(art.library.as_ref().unwrap()).unwrap();
    let k = lib.b2b(&chain.buckets[0].symbol).expect("the chain kernel is in the model's library");
    assert_eq!(k.spec, chain.buckets[0].spec);
    // Its unit carries sm_80 SASS and compute_80 PTX, like every sm80 unit.
    let flags = &lib.manifest().nvcc_flags["sm_80 b2b"];
    assert!(flags.iter().any(|f| f.contains("code=compute_80")), "{flags:?}");
    // The chain's layers are not also kernel nodes; nothing else is left to the host.
    assert!(art.plan.kernels.is_empty() && art.plan.host_ops.is_empty(), "{:?}", art.plan.host_ops);
}

/// The reference device runs glue nodes with `runtime::glue`, written apart from the reference
/// executor's ops; here the two agree exactly on random shapes, odd sizes included, for every
/// glue family (the plan's ops, lowered by `plan::lower::glue_for` as the runtimes do).
#[test]
fn host_glue_equals_the_reference_ops() {
    use bolt::plan::layout::{TO_NCHW, TO_NHWC};
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(14);
    let mut families = std::collections::HashSet::new();
    for case in 0..60 {
        let shape: Vec<usize> = (0..4).map(|_| rng.gen_range(1..8)).collect();
        let dtype = [DType::F32, DType::F16, DType::BF16][case % 3];
        let values: Vec<f64> = (0..shape.iter().product::<usize>()).map(|_| rng.gen_range(-70000.0..70000.0)).collect();
        let x = Tensor::from_f64_as(dtype, shape.clone(), &values).unwrap();
        let last = shape[3];
        let (op, yt) = match case % 4 {
            0 => (Op::Transpose { perm: Some(TO_NHWC.to_vec()) }, dtype),
            1 => (Op::Transpose { perm: Some(TO_NCHW.to_vec()) }, dtype),
            // Padded to the vector width or a smaller even size.
            2 => (Op::FitLastAxis { to: last.div_ceil(2) * 2 + 2 * rng.gen_range(0..3) }, dtype),
            _ => {
                let to = if dtype == DType::F32 { [DType::F16, DType::BF16][case % 2] } else { DType::F32 };
                (Op::Cast { to, saturate: true }, to)
            }
        };
        let (spec, problem) = bolt::plan::lower::glue_for(&op, &x.shape, dtype, yt, &[]).unwrap().unwrap();
        families.insert(std::mem::discriminant(&spec));
        let got = bolt::runtime::glue::run(&spec, &problem, &x).unwrap();
        let want = bolt::reference::eval_op(&op, &[Some(&x)]).unwrap().remove(0);
        assert_eq!(got, want, "{op:?} on {dtype} {shape:?}");
    }
    assert_eq!(families.len(), 3);
    // A truncation is no glue kernel but device copies (`fit_blocks`); what no glue kernel
    // takes stays on the host, with a reason.
    let x = Tensor::from_f32(vec![2, 5], vec![0.0; 10]);
    assert!(bolt::plan::lower::glue_for(&Op::FitLastAxis { to: 3 }, &x.shape, DType::F32, DType::F32, &[]).is_none());
    assert!(bolt::plan::lower::glue_for(&Op::FitLastAxis { to: 7 }, &x.shape, DType::F32, DType::F32, &[])
        .unwrap()
        .is_err());
    assert!(bolt::plan::lower::glue_for(
        &Op::Transpose { perm: Some(vec![1, 0]) },
        &x.shape,
        DType::F32,
        DType::F32,
        &[]
    )
    .is_none());
}

/// Pad kernels on the reference device (`runtime::glue`, from the spec's definition) equal the
/// reference executor's Pad (checked against the ONNX conformance cases) on random shapes of
/// rank 1 to 4, pads of the last two axes or of any one axis (given by `axes` or all of them,
/// wider than the axis for reflect and wrap), every mode, a constant value or none; pads of
/// other pairs of axes, crops and run-time pads are refused with a reason.
#[test]
fn host_pads_equal_the_reference_pad() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(23);
    let modes = [PadMode::Constant, PadMode::Reflect, PadMode::Edge, PadMode::Wrap];
    for case in 0..80 {
        let rank = rng.gen_range(1..5);
        let shape: Vec<usize> = (0..rank).map(|_| rng.gen_range(1..6)).collect();
        let dtype = [DType::F32, DType::F16, DType::BF16][case % 3];
        let values: Vec<f64> = (0..shape.iter().product::<usize>()).map(|_| rng.gen_range(-9.0..9.0)).collect();
        let x = Tensor::from_f64_as(dtype, shape.clone(), &values).unwrap();
        let mode = modes[case % 4];
        // The last two axes, or one axis anywhere (keras pads [N, T, C] along T).
        let padded: Vec<usize> =
            if rng.gen_bool(0.5) { (rank - rank.min(2)..rank).collect() } else { vec![rng.gen_range(0..rank)] };
        let mut begins = vec![0i64; rank];
        let mut ends = vec![0i64; rank];
        for &k in &padded {
            begins[k] = rng.gen_range(0..8);
            ends[k] = rng.gen_range(0..8);
        }
        // Pads for every axis, or for the padded ones through `axes` (negative, as torch writes).
        let (pads, axes) = if rng.gen_bool(0.5) {
            (Tensor::from_i64(vec![2 * rank], [begins, ends].concat()), None)
        } else {
            let axes: Vec<i64> = padded.iter().map(|&k| k as i64 - rank as i64).collect();
            let sel = |v: &[i64]| padded.iter().map(|&k| v[k]).collect::<Vec<_>>();
            (
                Tensor::from_i64(vec![2 * padded.len()], [sel(&begins), sel(&ends)].concat()),
                Some(Tensor::from_i64(vec![padded.len()], axes)),
            )
        };
        let value = (mode == PadMode::Constant && rng.gen_bool(0.5))
            .then(|| Tensor::from_f64_as(dtype, vec![], &[-2.5]).unwrap());
        let inputs = [Some(&x), Some(&pads), value.as_ref(), axes.as_ref()];
        let op = Op::Pad { mode };
        let (spec, problem) = bolt::plan::lower::glue_for(&op, &x.shape, dtype, dtype, &inputs).unwrap().unwrap();
        let got = bolt::runtime::glue::run_op(&op, &spec, &problem, &inputs).unwrap();
        let want = bolt::reference::eval_op(&op, &inputs).unwrap().remove(0);
        assert_eq!(got, want, "{mode:?} of {dtype} {shape:?} by {pads:?} (axes {axes:?})");
    }
    let x = Tensor::from_f32(vec![2, 3, 4], vec![0.0; 24]);
    let refused = |pads: Vec<i64>, constants: bool| {
        let pads = Tensor::from_i64(vec![pads.len()], pads);
        let inputs = [Some(&x), constants.then_some(&pads)];
        bolt::plan::lower::glue_for(&Op::Pad { mode: PadMode::Reflect }, &x.shape, DType::F32, DType::F32, &inputs)
            .unwrap()
            .unwrap_err()
    };
    assert!(refused(vec![1, 0, 1, 0, 0, 0], true).contains("one axis, or the last two"));
    assert!(refused(vec![1, 1, 0, 0, 0, 0], true).contains("one axis, or the last two"));
    assert!(refused(vec![0, 0, -1, 0, 0, 0], true).contains("crop"));
    assert!(refused(vec![0, 0, 1, 0, 0, 0], false).contains("run time"));
}

/// Pool kernels on the reference device (`runtime::glue`, from the spec's definition) equal the
/// reference executor's pools (checked against the ONNX conformance cases) on random windows:
/// kernel, stride, dilation, pads (explicit or SAME), ceil mode and the average's divisor, NCHW and (as the
/// planner runs them inside conv regions) channels-last.
#[test]
fn host_pools_equal_the_reference_pools() {
    use bolt::ir::{AutoPad, Window};
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(15);
    for case in 0..120 {
        let kernel: Vec<usize> = (0..2).map(|_| rng.gen_range(1..5)).collect();
        let dilations: Vec<usize> = (0..2).map(|_| rng.gen_range(1..3)).collect();
        let strides: Vec<usize> = (0..2).map(|_| rng.gen_range(1..4)).collect();
        let pads: Vec<usize> = (0..4).map(|k| rng.gen_range(0..kernel[k % 2])).collect();
        // Explicit pads, or SAME's (worked out from the input size by the kernel).
        let auto_pad = [AutoPad::NotSet, AutoPad::SameUpper, AutoPad::SameLower][(case / 16) % 3];
        let window = Window {
            kernel_shape: Some(kernel.clone()),
            strides: Some(strides),
            pads: (auto_pad == AutoPad::NotSet).then_some(pads),
            dilations: Some(dilations.clone()),
            auto_pad,
        };
        let ceil_mode = rng.gen_bool(0.5);
        let pool = match case % 4 {
            0 => Op::MaxPool { window, ceil_mode, storage_order: 0 },
            1 => Op::AveragePool { window, ceil_mode, count_include_pad: rng.gen_bool(0.5) },
            2 => Op::GlobalAveragePool,
            _ => Op::GlobalMaxPool,
        };
        let span = |d: usize| dilations[d] * (kernel[d] - 1) + 1;
        let nchw = vec![
            rng.gen_range(1..3),
            rng.gen_range(1..6),
            span(0) + rng.gen_range(0..7),
            span(1) + rng.gen_range(0..7),
        ];
        // Every pool in both layouts and both types: pool case % 4, layout (case / 4) % 2, type (case / 8) % 2.
        let dtype = [DType::F32, DType::F16][(case / 8) % 2];
        let values: Vec<f64> = (0..nchw.iter().product::<usize>()).map(|_| rng.gen_range(-8.0..8.0)).collect();
        let x = Tensor::from_f64_as(dtype, nchw.clone(), &values).unwrap();
        let channels_last = (case / 4) % 2 == 1;
        let (op, x) = if channels_last {
            let nhwc = bolt::reference::eval_op(&Op::Transpose { perm: Some(vec![0, 2, 3, 1]) }, &[Some(&x)]).unwrap();
            (Op::ChannelsLast(std::sync::Arc::new(pool)), nhwc.into_iter().next().unwrap())
        } else {
            (pool, x)
        };
        let (spec, problem) = bolt::plan::lower::glue_for(&op, &x.shape, dtype, dtype, &[])
            .expect("a pool is a glue op")
            .unwrap_or_else(|e| panic!("{op:?} on {:?}: {e}", x.shape));
        let got = bolt::runtime::glue::run(&spec, &problem, &x).unwrap();
        let want = bolt::reference::eval_op(&op, &[Some(&x)]).unwrap().remove(0);
        assert_eq!(got.shape, want.shape, "{op:?} on {:?}", x.shape);
        let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
        for (i, (a, b)) in g.iter().zip(&w).enumerate() {
            // Both sum in f64 in the window's row-major order and round once.
            assert!(
                a == b || (a - b).abs() <= 1e-6 * b.abs(),
                "{op:?} on {dtype} {:?}, output {i}: {a} vs {b}",
                x.shape
            );
        }
    }
    // 1-D pools are not 2-D pool kernels.
    let one_d = Op::AveragePool {
        window: Window {
            kernel_shape: Some(vec![3]),
            strides: None,
            pads: None,
            dilations: None,
            auto_pad: AutoPad::NotSet,
        },
        ceil_mode: false,
        count_include_pad: false,
    };
    assert!(bolt::plan::lower::glue_for(&one_d, &[1, 2, 5], DType::F32, DType::F32, &[]).unwrap().is_err());
}

/// Resize kernels on the reference device (`runtime::glue`, from the spec's definition) equal
/// the reference executor's Resize (checked against the ONNX conformance cases) on random
/// nearest and linear resizes: scales up and down or sizes, every coordinate mode and rounding
/// they take (linear with and without exclude_outside), on NCHW data and on NHWC data (the
/// spatial axes 1 and 2, as inside conv regions). Nearest copies values (equal bit for bit);
/// linear blends them (equal to the rounding of the output type).
#[test]
fn host_resizes_equal_the_reference_resize() {
    use bolt::ir::{AspectPolicy, CoordTransform, NearestMode, ResizeAttrs, ResizeMode};
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(17);
    let coords = [
        CoordTransform::Asymmetric,
        CoordTransform::HalfPixel,
        CoordTransform::PytorchHalfPixel,
        CoordTransform::AlignCorners,
    ];
    let modes = [NearestMode::Floor, NearestMode::Ceil, NearestMode::RoundPreferFloor, NearestMode::RoundPreferCeil];
    let mut kinds = std::collections::HashSet::new();
    for case in 0..240 {
        let linear = case >= 120;
        let attrs = ResizeAttrs {
            mode: if linear { ResizeMode::Linear } else { ResizeMode::Nearest },
            coord: coords[case % 4],
            nearest: modes[(case / 4) % 4],
            cubic_coeff_a: -0.75,
            exclude_outside: linear && (case / 4) % 2 == 1,
            extrapolation_value: 0.0,
            antialias: false,
            axes: None,
            aspect: AspectPolicy::Stretch,
        };
        let nhwc = case % 2 == 1;
        let spatial = if nhwc { [1, 2] } else { [2, 3] };
        let shape: Vec<usize> =
            (0..4).map(|d| if spatial.contains(&d) { rng.gen_range(1..7) } else { rng.gen_range(1..4) }).collect();
        let dtype = [DType::F32, DType::F16][case % 3 % 2];
        let values: Vec<f64> = (0..shape.iter().product::<usize>()).map(|_| rng.gen_range(-8.0..8.0)).collect();
        let x = Tensor::from_f64_as(dtype, shape.clone(), &values).unwrap();
        let (scales, sizes) = if case % 3 == 2 {
            let mut z: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
            for d in spatial {
                z[d] = rng.gen_range(1..10);
            }
            (None, Some(Tensor::from_i64(vec![4], z)))
        } else {
            let pick = [0.5f32, 0.75, 1.5, 2.0, 3.0];
            let mut v = vec![1.0f32; 4];
            for d in spatial {
                v[d] = pick[rng.gen_range(0..pick.len())];
            }
            (Some(Tensor::from_f32(vec![4], v)), None)
        };
        let op = Op::Resize(attrs);
        let constants = [None, None, scales.as_ref(), sizes.as_ref()];
        let want = bolt::reference::eval_op(&op, &[Some(&x), None, scales.as_ref(), sizes.as_ref()]).unwrap().remove(0);
        if want.is_empty() {
            continue; // a scale that floors an axis to 0
        }
        let (spec, problem) = bolt::plan::lower::glue_for(&op, &x.shape, dtype, dtype, &constants)
            .expect("a resize is a glue op")
            .unwrap_or_else(|e| panic!("{op:?} on {shape:?}: {e}"));
        kinds.insert(format!("{:?}", spec));
        let got = bolt::runtime::glue::run(&spec, &problem, &x).unwrap();
        let what = format!("{op:?} on {dtype} {shape:?}, scales {scales:?} sizes {sizes:?}");
        if linear {
            assert_eq!((got.dtype(), &got.shape), (want.dtype(), &want.shape), "{what}");
            let ulp = if dtype == DType::F16 { 1e-3 } else { 1e-6 };
            for (g, w) in got.to_f64_vec().iter().zip(want.to_f64_vec()) {
                assert!((g - w).abs() <= ulp * w.abs().max(1.0), "{what}: {g} vs {w}");
            }
        } else {
            assert_eq!(got, want, "{what}");
        }
    }
    assert!(kinds.len() > 40, "{} kinds of resize kernel", kinds.len());
    // Cubic resizes stay on the host, with the reason.
    let cubic = ResizeAttrs { mode: ResizeMode::Cubic, nearest: NearestMode::Floor, ..Default::default() };
    let scales = Tensor::from_f32(vec![4], vec![1.0, 1.0, 2.0, 2.0]);
    let why = bolt::plan::lower::glue_for(
        &Op::Resize(cubic),
        &[1, 2, 3, 3],
        DType::F32,
        DType::F32,
        &[None, None, Some(&scales), None],
    )
    .unwrap()
    .unwrap_err();
    assert!(why.contains("nearest or linear"), "{why}");
}

/// DepthToSpace kernels on the reference device equal the reference executor's DepthToSpace
/// (both modes, several blocksizes), NCHW and channels-last.
/// A Resize to the size of another map, its sizes computed from that map's Shape (the FPN
/// upsampling paddle2onnx writes): the plan takes the sizes from the output's inferred dims, so
/// it is a glue kernel with run-time scales, not a host op; on the reference device the
/// artifact gives the model's outputs.
#[test]
fn a_resize_to_a_computed_size_is_a_glue_kernel() {
    use bolt::ir::{ResizeAttrs, ResizeMode};
    let dir = tempfile::tempdir().unwrap();
    let mut n = Net::new(DType::F32);
    let x = n.input("x", &[1, 4, 5, 7]);
    let y = n.input("y", &[1, 4, 10, 9]);
    let size = n.op("size", Op::Shape { start: 0, end: None }, &[&y]);
    let up =
        n.op("up", Op::Resize(ResizeAttrs { mode: ResizeMode::Linear, ..Default::default() }), &[&x, "", "", &size]);
    let sum = n.op("sum", Op::Binary(bolt::ir::Binary::Add), &[&up, &y]);
    let g = n.finish(&[&sum]);
    let report = compile(&g, &CompileOptions::new(dir.path())).unwrap();
    let art = Artifact::open(dir.path()).unwrap();
    let resize = art.plan.glue.iter().find(|u| u.node.starts_with("up")).expect("the resize is a glue kernel");
    assert!(format!("{:?}", resize.spec).contains("scales: None"), "{:?}", resize.spec);
    assert!(art.plan.host_ops.iter().all(|h| h.op_type != "Resize"), "{report}");
    let inputs = bolt::compile::synthetic_inputs(&g, &HashMap::new(), 3).unwrap();
    let want = bolt::reference::run(&g, &inputs).unwrap();
    let got = runtime::open(&art, DeviceKind::Reference, &RunOptions::default()).unwrap().run(&inputs).unwrap();
    for (a, w) in got[&sum].to_f64_vec().iter().zip(want[&sum].to_f64_vec()) {
        assert!((a - w).abs() <= 1e-5 * (1.0 + w.abs()), "{a} vs {w}");
    }
}

#[test]
fn host_depth_to_space_equals_the_reference() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(18);
    for case in 0..40 {
        let (b, crd) = (rng.gen_range(1..4), case % 2 == 0);
        let nchw = vec![rng.gen_range(1..3), rng.gen_range(1..4) * b * b, rng.gen_range(1..5), rng.gen_range(1..5)];
        let values: Vec<f32> = (0..nchw.iter().product::<usize>()).map(|_| rng.gen_range(-9.0..9.0)).collect();
        let x = Tensor::from_f32(nchw, values);
        let d2s = Op::DepthToSpace { blocksize: b, crd };
        let (op, x) = if case % 4 >= 2 {
            let t = bolt::reference::eval_op(&Op::Transpose { perm: Some(vec![0, 2, 3, 1]) }, &[Some(&x)]).unwrap();
            (Op::ChannelsLast(std::sync::Arc::new(d2s)), t.into_iter().next().unwrap())
        } else {
            (d2s, x)
        };
        let (spec, problem) = bolt::plan::lower::glue_for(&op, &x.shape, DType::F32, DType::F32, &[]).unwrap().unwrap();
        let got = bolt::runtime::glue::run(&spec, &problem, &x).unwrap();
        let want = bolt::reference::eval_op(&op, &[Some(&x)]).unwrap().remove(0);
        assert_eq!(got, want, "{op:?} on {:?}", x.shape);
    }
}

/// The cuda device runs Concat, Split, Slice, single-index Gather, truncations and views as
/// rectangles of device-to-device copies (`plan::lower::copy_blocks`, `slice_blocks`,
/// `gather_blocks`, `fit_blocks`); applied to host bytes here, they give the reference
/// executor's Concat, Split, Slice, Gather and FitLastAxis on every axis (negative too) and a
/// view's bytes, and refuse inputs that do not fit.
#[test]
fn copy_blocks_equal_the_reference_concat_and_views() {
    use bolt::plan::lower::copy_blocks;
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(16);
    let apply = |blocks: &[bolt::plan::lower::CopyBlock], inputs: &[Vec<u8>], out_len: usize| {
        let mut out = vec![0xAAu8; out_len];
        for b in blocks {
            for r in 0..b.height {
                let (s, d) = (b.src + r * b.src_pitch, b.dst + r * b.dst_pitch);
                out[d..d + b.width].copy_from_slice(&inputs[b.input][s..s + b.width]);
            }
        }
        out
    };
    let bytes = |t: &Tensor| t.to_f32_vec().iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>();
    for _ in 0..100 {
        let rank = rng.gen_range(1..5);
        let base: Vec<usize> = (0..rank).map(|_| rng.gen_range(1..5)).collect();
        let axis = rng.gen_range(0..rank) as i64 - if rng.gen_bool(0.5) { rank as i64 } else { 0 };
        let a = axis.rem_euclid(rank as i64) as usize;
        let xs: Vec<Tensor> = (0..rng.gen_range(1..5))
            .map(|_| {
                let mut s = base.clone();
                s[a] = rng.gen_range(0..4);
                let v: Vec<f32> = (0..s.iter().product::<usize>()).map(|_| rng.gen_range(-9.0..9.0)).collect();
                Tensor::from_f32(s, v)
            })
            .collect();
        let op = Op::Concat { axis };
        let refs: Vec<Option<&Tensor>> = xs.iter().map(Some).collect();
        let want = bolt::reference::eval_op(&op, &refs).unwrap().remove(0);
        let shapes: Vec<&[usize]> = xs.iter().map(|x| x.shape.as_slice()).collect();
        let blocks = copy_blocks(&op, &shapes, &[&want.shape], 4).unwrap();
        let got = apply(&blocks, &xs.iter().map(bytes).collect::<Vec<_>>(), want.len() * 4);
        assert_eq!(got, bytes(&want), "concat axis {axis} of {shapes:?}");
        // A view copies the bytes as they are.
        let flat = [want.len()];
        let view = copy_blocks(&Op::Flatten { axis: 0 }, &[&want.shape], &[&flat], 4).unwrap();
        assert_eq!(apply(&view, &[bytes(&want)], want.len() * 4), bytes(&want));
        // Split gives the inputs back (its sizes as a constant input).
        let split = Op::Split { axis, outputs: xs.len() };
        let sizes = Tensor::from_i64(vec![xs.len()], xs.iter().map(|x| x.shape[a] as i64).collect());
        let parts = bolt::reference::eval_op(&split, &[Some(&want), Some(&sizes)]).unwrap();
        assert_eq!(parts, xs, "split axis {axis}");
        let part_shapes: Vec<&[usize]> = parts.iter().map(|p| p.shape.as_slice()).collect();
        let blocks = copy_blocks(&split, &[&want.shape], &part_shapes, 4).unwrap();
        for (j, part) in parts.iter().enumerate() {
            let mine: Vec<_> = blocks.iter().filter(|b| b.output == j).copied().collect();
            assert_eq!(apply(&mine, &[bytes(&want)], part.len() * 4), bytes(part), "split part {j}");
        }
    }
    // An Expand copies its input once per index of the axes it broadcasts (dims of 1 and
    // missing leading dims), wherever they are.
    for _ in 0..200 {
        let rank = rng.gen_range(1..5);
        let out: Vec<usize> = (0..rank).map(|_| rng.gen_range(1..5)).collect();
        let drop = rng.gen_range(0..rank);
        let x_shape: Vec<usize> = out[drop..].iter().map(|&d| if rng.gen_bool(0.4) { 1 } else { d }).collect();
        let v: Vec<f32> = (0..x_shape.iter().product::<usize>()).map(|_| rng.gen_range(-9.0..9.0)).collect();
        let x = Tensor::from_f32(x_shape.clone(), v);
        let target = Tensor::from_i64(vec![rank], out.iter().map(|&d| d as i64).collect());
        let want = bolt::reference::eval_op(&Op::Expand, &[Some(&x), Some(&target)]).unwrap().remove(0);
        assert_eq!(want.shape, out);
        let blocks = copy_blocks(&Op::Expand, &[&x_shape], &[&out], 4).unwrap();
        assert_eq!(apply(&blocks, &[bytes(&x)], want.len() * 4), bytes(&want), "expand {x_shape:?} to {out:?}");
    }
    assert!(copy_blocks(&Op::Expand, &[&[2, 3]], &[&[4, 3]], 4).is_none(), "2 does not broadcast to 4");
    // A Slice of constant bounds (negative and clamped bounds, any axes) copies the box of its
    // input; steps other than 1 (reversals, strides) on axes before the last copy one box per
    // output index of those axes; on the last axis they are no copy.
    for case in 0..300 {
        let rank = rng.gen_range(1..5);
        let shape: Vec<usize> = (0..rank).map(|_| rng.gen_range(1..6)).collect();
        let v: Vec<f32> = (0..shape.iter().product::<usize>()).map(|_| rng.gen_range(-9.0..9.0)).collect();
        let x = Tensor::from_f32(shape.clone(), v);
        let mut axes: Vec<i64> = (0..rank as i64).filter(|_| rng.gen_bool(0.6)).collect();
        if axes.is_empty() {
            axes.push(0);
        }
        let axes: Vec<i64> = axes.iter().map(|&a| if rng.gen_bool(0.3) { a - rank as i64 } else { a }).collect();
        let starts: Vec<i64> = axes.iter().map(|_| rng.gen_range(-7..7)).collect();
        let ends: Vec<i64> =
            axes.iter().map(|_| if rng.gen_bool(0.2) { i64::MAX } else { rng.gen_range(-7..8) }).collect();
        let steps: Vec<i64> = axes.iter().map(|_| [1, 1, 1, 2, -1, -2][rng.gen_range(0..6)]).collect();
        let steps = if case % 3 == 0 { vec![1; axes.len()] } else { steps };
        let mut b = bolt::ir::builder::GraphBuilder::new("slice");
        let xi = b.input("x", DType::F32, Shape::from_static(&shape));
        let k = axes.len();
        let st = b.initializer("starts", Tensor::from_i64(vec![k], starts.clone()));
        let en = b.initializer("ends", Tensor::from_i64(vec![k], ends.clone()));
        let ax = b.initializer("axes", Tensor::from_i64(vec![k], axes.clone()));
        let sp = b.initializer("steps", Tensor::from_i64(vec![k], steps.clone()));
        let y = b.node("slice", Op::Slice, &[&xi, &st, &en, &ax, &sp]);
        b.output(&y);
        let g = b.finish().unwrap();
        let n = &g.nodes[0];
        let want = bolt::reference::eval_node(
            n,
            &[
                Some(&x),
                Some(&g.initializers["starts"]),
                Some(&g.initializers["ends"]),
                Some(&g.initializers["axes"]),
                Some(&g.initializers["steps"]),
            ],
        )
        .unwrap()
        .remove(0);
        let what = format!("slice {shape:?} starts {starts:?} ends {ends:?} axes {axes:?} steps {steps:?}");
        let copies = axes.iter().zip(&steps).all(|(&a, &st)| st == 1 || a.rem_euclid(rank as i64) + 1 < rank as i64);
        assert_eq!(bolt::plan::lower::is_copy_node(&g, n), copies, "{what}");
        match bolt::plan::lower::slice_blocks(&g, n, &shape, 4) {
            Some(blocks) => assert_eq!(apply(&blocks, &[bytes(&x)], want.len() * 4), bytes(&want), "{what}"),
            None => assert!(!copies, "{what}: no copies"),
        }
    }
    // A Gather of one constant index (a scalar drops the axis, shape [1] keeps it; negative
    // indices count from the end) copies that entry's box; several indices are no copy, an
    // index outside the axis has no copies (the host's Gather refuses it).
    for case in 0..200 {
        let rank = rng.gen_range(1..5);
        let shape: Vec<usize> = (0..rank).map(|_| rng.gen_range(1..6)).collect();
        let v: Vec<f32> = (0..shape.iter().product::<usize>()).map(|_| rng.gen_range(-9.0..9.0)).collect();
        let x = Tensor::from_f32(shape.clone(), v);
        let axis = rng.gen_range(0..rank) as i64 - if rng.gen_bool(0.3) { rank as i64 } else { 0 };
        let size = shape[axis.rem_euclid(rank as i64) as usize] as i64;
        let i = rng.gen_range(-size..size);
        let index = match case % 4 {
            0 => Tensor::from_i64(vec![], vec![i]),
            1 => Tensor::from_i64(vec![1], vec![i]),
            2 => Tensor::from_i64(vec![], vec![size + 1]),
            _ => Tensor::from_i64(vec![2], vec![i, 0]),
        };
        let mut b = bolt::ir::builder::GraphBuilder::new("gather");
        let xi = b.input("x", DType::F32, Shape::from_static(&shape));
        let ix = b.initializer("index", index.clone());
        let y = b.node("gather", Op::Gather { axis }, &[&xi, &ix]);
        b.output(&y);
        let g = b.finish().unwrap();
        let n = &g.nodes[0];
        let what = format!("gather {shape:?} axis {axis} index {index:?}");
        assert_eq!(bolt::plan::lower::is_copy_node(&g, n), case % 4 != 3, "{what}");
        let blocks = bolt::plan::lower::gather_blocks(&g, n, &shape, 4);
        match bolt::reference::eval_node(n, &[Some(&x), Some(&index)]) {
            Ok(mut want) if case % 4 != 3 => {
                let want = want.remove(0);
                let blocks = blocks.unwrap_or_else(|| panic!("{what}: no copies"));
                assert_eq!(apply(&blocks, &[bytes(&x)], want.len() * 4), bytes(&want), "{what}");
            }
            _ => assert!(blocks.is_none(), "{what}: copies"),
        }
    }
    // A FitLastAxis that truncates keeps the first `to` elements of every row.
    for _ in 0..50 {
        let rank = rng.gen_range(1..5);
        let shape: Vec<usize> = (0..rank).map(|_| rng.gen_range(1..7)).collect();
        let v: Vec<f32> = (0..shape.iter().product::<usize>()).map(|_| rng.gen_range(-9.0..9.0)).collect();
        let x = Tensor::from_f32(shape.clone(), v);
        let to = rng.gen_range(0..=shape[rank - 1]);
        let want = bolt::reference::eval_op(&Op::FitLastAxis { to }, &[Some(&x)]).unwrap().remove(0);
        let blocks = bolt::plan::lower::fit_blocks(&shape, to, 4).unwrap();
        assert_eq!(apply(&blocks, &[bytes(&x)], want.len() * 4), bytes(&want), "{shape:?} -> last axis {to}");
    }
    // Inputs that disagree off the axis, or do not add up to the output, have no copies.
    assert!(copy_blocks(&Op::Concat { axis: 1 }, &[&[2, 3], &[3, 3]], &[&[2, 6]], 4).is_none());
    assert!(copy_blocks(&Op::Concat { axis: 1 }, &[&[2, 3], &[2, 2]], &[&[2, 6]], 4).is_none());
    assert!(copy_blocks(&Op::Softmax { axis: 1 }, &[&[2, 3]], &[&[2, 3]], 4).is_none());
}

#[test]
fn bert_layer_sm80() {
    let dir = tempfile::tempdir().unwrap();
    let art = build_and_check(&bert_layer(), dir.path(), &[Arch::Sm80], None, vec![]);
    // The attention core (with its K transpose, read in place) is one attention kernel, both
    // LayerNorms are stitched kernels: nothing runs on the host.
    assert_eq!(art.plan.attention.len(), 1, "{:?}", art.plan.attention);
    assert_eq!(art.plan.stitch.len(), 2, "{:?}", art.plan.stitch);
    assert!(art.plan.host_ops.is_empty(), "{:?}", art.plan.host_ops);
}

/// A HuggingFace-style attention block of symbolic sequence length S: projections, head split
/// (Reshape + Transpose, Kᵀ by [0,2,3,1]), softmax(QKᵀ/√d + mask)V with a [1,1,1,S] mask, head
/// merge, output projection.
fn hf_attention_block() -> Graph {
    use bolt::ir::builder::GraphBuilder;
    let (heads, d) = (4usize, 16usize);
    let e = heads * d;
    let s = Dim::Sym("S".into());
    let mut b = GraphBuilder::new("hf-attention");
    let x = b.input("x", DType::F32, Shape(vec![Dim::Known(1), s.clone(), Dim::Known(e)]));
    let mask = b.input("mask", DType::F32, Shape(vec![Dim::Known(1), Dim::Known(1), Dim::Known(1), s]));
    let weight = |b: &mut GraphBuilder, name: &str, seed: u64| {
        let t = common::random_tensor(&[e, e], seed);
        let t = Tensor::from_f32(vec![e, e], t.to_f32_vec().iter().map(|v| v / (e as f32).sqrt()).collect());
        b.initializer(name, t)
    };
    let split = b.initializer("split", Tensor::from_i64(vec![4], vec![0, 0, heads as i64, d as i64]));
    let merge = b.initializer("merge", Tensor::from_i64(vec![3], vec![0, 0, e as i64]));
    let root = b.initializer("root_d", Tensor::scalar_f32((d as f32).sqrt()));
    let heads_of = |b: &mut GraphBuilder, name: &str, perm: Vec<usize>, seed: u64| {
        let w = weight(b, &format!("W{name}"), seed);
        let p = b.node(&format!("{name}_proj"), Op::MatMul, &[&x, &w]);
        let r = b.node(&format!("{name}_split"), Op::Reshape { allowzero: false }, &[&p, &split]);
        b.node(&format!("{name}_t"), Op::Transpose { perm: Some(perm) }, &[&r])
    };
    let q = heads_of(&mut b, "q", vec![0, 2, 1, 3], 1);
    let kt = heads_of(&mut b, "k", vec![0, 2, 3, 1], 2);
    let v = heads_of(&mut b, "v", vec![0, 2, 1, 3], 3);
    let qk = b.node("qk", Op::MatMul, &[&q, &kt]);
    let sc = b.node("scale", Op::Binary(Binary::Div), &[&qk, &root]);
    let sc = b.node("add_mask", Op::Binary(Binary::Add), &[&sc, &mask]);
    let p = b.node("softmax", Op::Softmax { axis: -1 }, &[&sc]);
    let ctx = b.node("pv", Op::MatMul, &[&p, &v]);
    let ctx = b.node("merge_t", Op::Transpose { perm: Some(vec![0, 2, 1, 3]) }, &[&ctx]);
    let ctx = b.node("merge_r", Op::Reshape { allowzero: false }, &[&ctx, &merge]);
    let wo = weight(&mut b, "Wo", 4);
    let y = b.node("o_proj", Op::MatMul, &[&ctx, &wo]);
    b.output(&y);
    b.finish().unwrap()
}

/// The attention block compiled for S in 1..37 in TF32 (f32 storage) and f16: its core is one
/// attention kernel writing the merged heads, the kernel takes the problems the cuda device
/// derives at both ends (ragged S: the mask staged into padded rows), and the reference device
/// (the kernel's meaning on those problems) matches the model on the reference executor.
#[test]
fn hf_attention_block_artifact_runs_one_attention_kernel() {
    let g = hf_attention_block();
    for precision in [None, Some(Precision::F16)] {
        let dir = tempfile::tempdir().unwrap();
        let art = build_and_check(&g, dir.path(), &[Arch::Sm80], precision, vec![range("S", 1, 37)]);
        assert_eq!(art.plan.attention.len(), 1, "{:?}", art.plan.host_ops);
        let spec = art.plan.attention[0].spec;
        assert!(spec.bias && spec.output == bolt_codegen::attention::OutputLayout::Bshd, "{spec:?}");
        // Only the head split / merge Reshapes (views: device copies) are not kernels.
        assert!(art.plan.host_ops.iter().all(|h| h.op_type == "Reshape"), "{:?}", art.plan.host_ops);
    }
}

/// Infinite constants (a one-sided Clip fused into the GEMM's epilogue, a `-inf` mask value in
/// a stitched kernel, a `ConstantOfShape` fill of `-inf` left with the host, a pad kernel's
/// `-inf`) survive the plan's
/// and the kernel library's JSON: they were written as `null`, which no reader takes back.
#[test]
fn infinite_constants_survive_the_artifact() {
    use bolt::ir::builder::GraphBuilder;
    let s = Dim::Sym("S".into());
    let mut b = GraphBuilder::new("infinities");
    let x = b.input("x", DType::F32, Shape(vec![s.clone(), Dim::Known(8)]));
    let keep = b.input("keep", DType::Bool, Shape(vec![s, Dim::Known(16)]));
    let w = b.initializer("w", common::random_tensor(&[8, 16], 7));
    let zero = b.initializer("zero", Tensor::scalar_f32(0.0));
    let minus_inf = b.initializer("minus_inf", Tensor::scalar_f32(f32::NEG_INFINITY));
    let y = b.node("mm", Op::MatMul, &[&x, &w]);
    let y = b.node("clip_below", Op::Clip, &[&y, &zero]);
    let shape = b.node("shape", Op::Shape { start: 0, end: None }, &[&y]);
    let fill = Tensor::from_f32(vec![1], vec![f32::NEG_INFINITY]);
    let fill = b.node("fill", Op::ConstantOfShape { value: Some(std::sync::Arc::new(fill)) }, &[&shape]);
    let a = b.node("where_fill", Op::Where, &[&keep, &y, &fill]);
    let a = b.node("exp_a", Op::Unary(Unary::Exp), &[&a]);
    let c = b.node("where_const", Op::Where, &[&keep, &minus_inf, &y]);
    let c = b.node("exp_c", Op::Unary(Unary::Exp), &[&c]);
    let pads = b.initializer("pads", Tensor::from_i64(vec![4], vec![0, 1, 0, 2]));
    let d = b.node("pad", Op::Pad { mode: PadMode::Constant }, &[&y, &pads, &minus_inf]);
    let d = b.node("exp_d", Op::Unary(Unary::Exp), &[&d]);
    b.output(&a);
    b.output(&c);
    b.output(&d);
    let g = b.finish().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let art = build_and_check(&g, dir.path(), &[Arch::Sm80], None, vec![range("S", 1, 9)]);
    let epilogue = format!("{:?}", art.plan.kernels[0]);
    assert!(epilogue.contains("inf"), "the clip's open bound is in the kernel: {epilogue}");
    assert!(!art.plan.stitch.is_empty(), "the masks run in stitched kernels");
    assert!(
        art.plan.glue.iter().any(|g| matches!(g.spec, GlueSpec::Pad(p) if p.value.0 == f32::NEG_INFINITY)),
        "the pad of -inf is a glue kernel: {:?}",
        art.plan.glue
    );
    let plan = std::fs::read_to_string(dir.path().join(PLAN_FILE)).unwrap();
    assert!(plan.contains("\"-inf\""), "the host's fill is in the plan");
}

/// The memory plan of real plans: no two tensors that are live at once share a byte, and the
/// arena is never larger than one allocation per tensor.
#[test]
fn arena_never_overlaps_live_tensors() {
    let mut graphs = vec![bolt::models::default_model().unwrap(), bottleneck(), bert_layer()];
    if let Some(dir) = common::testdata("models") {
        for m in ["resnet50", "mobilenet_v2", "bert_base", "vgg16", "ppocrv4_det"] {
            let p = dir.join(m).join("model.onnx");
            graphs.push(bolt::import::load(&p).unwrap_or_else(|e| panic!("{m}: {e}")).graph);
        }
    }
    for g in &graphs {
        for n in [1, 2] {
            // Every symbolic input dim at n x 32 (image sides must divide by 32 in PP-OCR).
            let bindings: HashMap<String, usize> = g
                .inputs
                .iter()
                .filter_map(|i| g.types[i].shape.as_ref())
                .flat_map(|s| s.0.iter())
                .filter_map(|d| if let Dim::Sym(k) = d { Some((k.clone(), n * 32)) } else { None })
                .collect();
            let opts = bolt::plan::PlanOptions { bindings: bindings.clone(), b2b: false, ..Default::default() };
            let plan = bolt::plan::plan_with(g, &opts).unwrap();
            // Every transpose, padding and float cast of real plans has a glue kernel.
            let mut glue = 0;
            let bound = bolt::plan::edit::bind_inputs(&plan.graph, &bindings).unwrap();
            for node in bound.nodes.iter().filter(|n| is_data_movement(&n.op)) {
                match bolt::plan::lower::glue(&bound, node, &bindings) {
                    Some(Ok(_)) => glue += 1,
                    other => panic!("{}: {} ({:?}) has no glue kernel: {other:?}", g.name, node.name, node.op),
                }
            }
            println!("{} (dims {n}): {glue} glue nodes", g.name);
            let arena = bolt::runtime::memory::plan_arena(&plan.graph, &bindings).unwrap();
            assert!(!arena.tensors.is_empty());
            if let Some((a, b)) = bolt::runtime::memory::find_overlap(&arena) {
                panic!("{}: '{}' and '{}' overlap: {a:?} {b:?}", g.name, a.name, b.name);
            }
            for t in &arena.tensors {
                assert!(t.offset + t.bytes <= arena.bytes && t.offset % 256 == 0, "{t:?}");
            }
            assert!(arena.bytes <= arena.naive_bytes);
            println!(
                "{} (dims {n}): arena {} bytes, one allocation per tensor {} bytes",
                g.name, arena.bytes, arena.naive_bytes
            );
        }
    }
}

/// `bolt run --every-tensor`'s artifact: every tensor a node computes becomes an output, the
/// memory plan keeps each to the end (no overlap, none reused), and the reference device
/// returns them with the values the planned graph computes (so a device's run can be compared
/// tensor by tensor, and the first differing node is the one to look at).
#[test]
fn every_tensor_observed_keeps_each_tensor_with_its_value() {
    let g = hf_attention_block();
    let dir = tempfile::tempdir().unwrap();
    let opts = CompileOptions { archs: Vec::new(), dims: vec![range("S", 1, 8)], ..CompileOptions::new(dir.path()) };
    compile(&g, &opts).unwrap();
    let mut art = Artifact::open(dir.path()).unwrap();
    let before = art.plan.outputs.clone();
    let added = runtime::observe_every_tensor(&mut art).unwrap();
    let computed: Vec<&String> =
        art.plan.nodes.iter().flat_map(|n| n.outputs.iter()).filter(|o| !o.is_empty() && !before.contains(o)).collect();
    assert_eq!(added.len(), computed.len());
    // The packed Q/K/V projection, the attention output (heads merged) and its reshape.
    assert!(added.len() >= 3, "{added:?}");
    assert_eq!(art.plan.outputs[..before.len()], before[..], "the model's outputs come first");
    let ends = art.plan.nodes.len();
    for (name, node) in &added {
        assert!(art.plan.nodes.iter().any(|n| &n.name == node && n.outputs.contains(name)));
        let t = art.plan.arena.tensors.iter().find(|t| &t.name == name).unwrap_or_else(|| panic!("{name} planned"));
        assert_eq!(t.last, ends, "{name} lives to the end");
    }
    assert!(bolt::runtime::memory::find_overlap(&art.plan.arena).is_none());

    let b: HashMap<String, usize> = [("S".to_string(), 5)].into();
    let inputs = bolt::compile::synthetic_inputs(&g, &b, 3).unwrap();
    let mut exec = runtime::open(&art, DeviceKind::Reference, &RunOptions::default()).unwrap();
    let got = exec.run(&inputs).unwrap();
    let plain = Artifact::open(dir.path()).unwrap();
    let want = runtime::open(&plain, DeviceKind::Reference, &RunOptions::default()).unwrap().run(&inputs).unwrap();
    for o in &before {
        assert_eq!(got[o].to_f64_vec(), want[o].to_f64_vec(), "observing changes no output ({o})");
    }
    for (name, _) in &added {
        let t = &got[name];
        assert!(!t.to_f64_vec().is_empty() && t.to_f64_vec().iter().all(|x| x.is_finite()), "{name}: {:?}", t.shape);
    }
}

/// The find_overlap check itself finds an overlap (so the property test above can fail).
#[test]
fn overlap_check_detects_a_collision() {
    use bolt::artifact::format::{ArenaPlan, ArenaTensor};
    let t = |name: &str, offset, first, last| ArenaTensor {
        name: name.into(),
        offset,
        bytes: 512,
        first,
        last,
        alias_of: None,
    };
    let bad = ArenaPlan { bytes: 1024, naive_bytes: 1024, tensors: vec![t("a", 0, 0, 2), t("b", 256, 1, 3)] };
    assert!(bolt::runtime::memory::find_overlap(&bad).is_some());
    let ok = ArenaPlan { bytes: 512, naive_bytes: 1024, tensors: vec![t("a", 0, 0, 1), t("b", 0, 2, 3)] };
    assert!(bolt::runtime::memory::find_overlap(&ok).is_none());
    // A view aliasing "a" is the same buffer: fine at a's offset within a's lifetime, a
    // collision elsewhere or outliving it.
    let view = |offset, last| ArenaTensor { alias_of: Some("a".into()), ..t("v", offset, 1, last) };
    let plan = |v| ArenaPlan { bytes: 1024, naive_bytes: 1536, tensors: vec![t("a", 0, 0, 2), v] };
    assert!(bolt::runtime::memory::find_overlap(&plan(view(0, 2))).is_none());
    assert!(bolt::runtime::memory::find_overlap(&plan(view(512, 2))).is_some(), "an alias off its root's bytes");
    assert!(bolt::runtime::memory::find_overlap(&plan(view(0, 3))).is_some(), "an alias outliving its root");
}

/// Views (Reshape, Flatten, Squeeze, Unsqueeze, Identity) of a tensor the arena holds are that
/// tensor's bytes: planned at its offset, with no copy to run, and the tensor lives until its
/// views' last reader. A view of a graph input or a weight is still a copy (their memory is
/// not the arena's).
#[test]
fn views_of_arena_tensors_are_aliases_not_copies() {
    let mut b = bolt::ir::builder::GraphBuilder::new("views");
    let x = b.input("x", DType::F32, Shape::from_static(&[4, 6]));
    let shape = b.initializer("shape", Tensor::from_i64(vec![2], vec![6, 4]));
    let w = b.initializer("w", Tensor::from_f32(vec![4, 6], vec![0.5; 24]));
    let of_input = b.node("of_input", Op::Reshape { allowzero: false }, &[&x, &shape]);
    let r1 = b.node("r1", Op::Unary(Unary::Relu), &[&x]);
    let v1 = b.node("v1", Op::Reshape { allowzero: false }, &[&r1, &shape]);
    let v2 = b.node("v2", Op::Identity, &[&v1]);
    let of_weight = b.node("of_weight", Op::Reshape { allowzero: false }, &[&w, &shape]);
    let r2 = b.node("r2", Op::Unary(Unary::Relu), &[&of_input]);
    let r3 = b.node("r3", Op::Unary(Unary::Relu), &[&v2]);
    let r4 = b.node("r4", Op::Unary(Unary::Relu), &[&of_weight]);
    for o in [&r2, &r3, &r4] {
        b.output(o);
    }
    let g = b.finish().unwrap();
    let arena = bolt::runtime::memory::plan_arena(&g, &Default::default()).unwrap();
    let get = |n: &str| arena.tensors.iter().find(|t| t.name == n).unwrap_or_else(|| panic!("{n} planned"));
    assert_eq!(get(&v1).alias_of.as_deref(), Some(r1.as_str()));
    assert_eq!(get(&v2).alias_of.as_deref(), Some(r1.as_str()), "a view of a view aliases the chain's first");
    assert_eq!((get(&v1).offset, get(&v2).offset), (get(&r1).offset, get(&r1).offset));
    let r3_at = g.nodes.iter().position(|n| n.outputs.contains(&r3)).unwrap();
    assert_eq!(get(&r1).last, r3_at, "r1 lives until its views' last reader");
    assert_eq!(get(&of_input).alias_of, None, "a view of a graph input is a copy");
    assert_eq!(get(&of_weight).alias_of, None, "a view of a weight is a copy");
    assert!(bolt::runtime::memory::find_overlap(&arena).is_none());
    // No other tensor was placed over r1 while its views are read.
    for t in arena.tensors.iter().filter(|t| t.alias_of.is_none() && t.name != r1) {
        let live = t.first <= get(&r1).last && get(&r1).first <= t.last;
        let bytes = t.offset < get(&r1).offset + get(&r1).bytes && get(&r1).offset < t.offset + t.bytes;
        assert!(!(live && bytes), "{t:?} placed over r1");
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// Rewrites `file` of `dir` and its manifest entry (size, blake3), so only the content is wrong.
fn rewrite_consistently(dir: &Path, file: &str, f: impl FnOnce(&mut serde_json::Value)) {
    let p = dir.join(file);
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    f(&mut v);
    let bytes = serde_json::to_vec(&v).unwrap();
    std::fs::write(&p, &bytes).unwrap();
    let mp = dir.join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&mp).unwrap()).unwrap();
    m["files"][file]["bytes"] = bytes.len().into();
    m["files"][file]["blake3"] = blake3::hash(&bytes).to_hex().to_string().into();
    std::fs::write(&mp, serde_json::to_vec(&m).unwrap()).unwrap();
}

/// A model with no GEMM or conv, only data movement (a cast to f16 and an NHWC transpose of
/// the result): the library holds glue kernels alone, the reference device runs them equal to
/// the model, and a plan naming another kernel than its glue spec's is refused by field.
#[test]
fn glue_only_artifact_and_a_mismatched_glue_symbol() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = Net::new(DType::F32);
    let x = n.input("x", &[2, 3, 5, 7]);
    let h = n.op("half", Op::Cast { to: DType::F16, saturate: true }, &[&x]);
    let t = n.op("nhwc", Op::Transpose { perm: Some(bolt::plan::layout::TO_NHWC.to_vec()) }, &[&h]);
    let g = n.finish(&[&t]);
    let report = compile(&g, &CompileOptions::new(dir.path())).unwrap();
    assert_eq!((report.kernel_nodes, report.glue_nodes, report.host_ops), (0, 2, 0), "{report}");
    let art = Artifact::open(dir.path()).unwrap();
    let inputs = bolt::compile::synthetic_inputs(&g, &HashMap::new(), 3).unwrap();
    let want = bolt::reference::run(&g, &inputs).unwrap();
    let got = runtime::open(&art, DeviceKind::Reference, &RunOptions::default()).unwrap().run(&inputs).unwrap();
    assert_eq!(got[&t], want[&t]);

    rewrite_consistently(dir.path(), PLAN_FILE, |p| p["glue"][0]["symbol"] = "bolt_glue_cast_f32_bf16".into());
    let e = Artifact::open(dir.path()).unwrap_err().to_string();
    assert!(e.contains("plan.json") && e.contains("'glue[0].symbol'"), "{e}");
}

/// A kernel reads its operands as its spec's types: a plan whose bias is of another type
/// (what the planner once wrote for a GEMM that took an output Cast, an f16 bias read as f32)
/// is refused when opened, naming the node, the tensor and the kernel, before anything runs.
#[test]
fn a_plan_whose_kernel_operands_disagree_with_its_kernels_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let g = bolt::models::default_model().unwrap();
    compile(&g, &CompileOptions::new(dir.path())).unwrap();
    let art = Artifact::open(dir.path()).unwrap();
    let fc2 = art.plan.kernels.iter().find(|k| k.node == "fc2").expect("fc2 is a kernel node");
    assert_eq!(fc2.buckets[0][0].spec.types.output, bolt_codegen::spec::Element::F32);
    rewrite_consistently(dir.path(), PLAN_FILE, |p| p["types"]["fc2.bolt_bias"]["dtype"] = "F16".into());
    let e = Artifact::open(dir.path()).unwrap_err().to_string();
    assert!(e.contains("plan.json") && e.contains("node 'fc2': bias 'fc2.bolt_bias' is f16"), "{e}");
    assert!(e.contains("reads F32"), "{e}");
}

/// Corrupt, truncated, version-mismatched and inconsistent artifacts: an error naming the file
/// and the field, never a panic; `bolt run` exits non-zero with it.
#[test]
fn bad_artifacts_are_refused_with_file_and_field() {
    let base = tempfile::tempdir().unwrap();
    let good = base.path().join("good");
    // No kernel node needs building for this check: a graph with no GEMM/conv.
    let mut n = Net::new(DType::F32);
    let x = n.input("x", &[2, 8]);
    let w = n.random("w", &[2, 8], 1.0);
    let y = n.op("add", Op::Binary(Binary::Add), &[&x, &w]);
    let g = n.finish(&[&y]);
    compile(&g, &CompileOptions::new(&good)).unwrap();
    Artifact::open(&good).unwrap();

    let case = |name: &str, f: &dyn Fn(&Path)| -> String {
        let d = base.path().join(name);
        copy_dir(&good, &d);
        f(&d);
        let e = Artifact::open(&d).expect_err(name).to_string();
        let out = Command::new(env!("CARGO_BIN_EXE_bolt")).arg("run").arg(&d).output().unwrap();
        assert!(!out.status.success(), "{name}: bolt run succeeded");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(&e), "{name}: bolt run said {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        e
    };
    let e = case("corrupt-weights", &|d| {
        let p = d.join(WEIGHTS_FILE);
        let mut b = std::fs::read(&p).unwrap();
        b[0] ^= 0xff;
        std::fs::write(&p, b).unwrap();
    });
    assert!(e.contains("weights.bin") && e.contains("blake3") && e.contains("corrupt"), "{e}");
    let e = case("truncated-plan", &|d| {
        let p = d.join(PLAN_FILE);
        let b = std::fs::read(&p).unwrap();
        std::fs::write(&p, &b[..b.len() / 2]).unwrap();
    });
    assert!(e.contains("plan.json") && e.contains("truncated"), "{e}");
    let e = case("format-version", &|d| {
        let p = d.join("manifest.json");
        let current = format!("\"format_version\": {}", bolt::artifact::format::FORMAT_VERSION);
        let s = std::fs::read_to_string(&p).unwrap().replace(&current, "\"format_version\": 99");
        std::fs::write(&p, s).unwrap();
    });
    assert!(e.contains("manifest.json") && e.contains("'format_version'") && e.contains("99"), "{e}");
    let e = case("abi-version", &|d| {
        let p = d.join("manifest.json");
        let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
        m["abi_version"] = 999.into();
        std::fs::write(&p, serde_json::to_vec(&m).unwrap()).unwrap();
    });
    assert!(e.contains("manifest.json") && e.contains("'abi_version'"), "{e}");
    let e = case("not-an-artifact", &|d| {
        let p = d.join("manifest.json");
        let s = std::fs::read_to_string(&p).unwrap().replace("bolt-artifact", "something-else");
        std::fs::write(&p, s).unwrap();
    });
    assert!(e.contains("manifest.json") && e.contains("'format'"), "{e}");
    let e = case("missing-manifest", &|d| std::fs::remove_file(d.join("manifest.json")).unwrap());
    assert!(e.contains("manifest.json") && e.contains("cannot read"), "{e}");
    let e = case("weights-out-of-range", &|d| {
        rewrite_consistently(d, PLAN_FILE, |v| v["weights"][0]["offset"] = 1_000_000.into())
    });
    assert!(e.contains("plan.json") && e.contains("weights[0]") && e.contains("outside"), "{e}");
    let e = case("plan-missing-field", &|d| {
        rewrite_consistently(d, PLAN_FILE, |v| {
            v.as_object_mut().unwrap().remove("arena");
        })
    });
    assert!(e.contains("plan.json") && e.contains("'arena'"), "{e}");
}

/// `bolt run --device cuda` where there is no driver (this machine): a clear error and a
/// non-zero exit. Without the `cuda` feature the binary says it lacks it.
#[test]
fn cuda_device_without_a_driver_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = Net::new(DType::F32);
    let x = n.input("x", &[2, 8]);
    let y = n.relu(&x);
    let g = n.finish(&[&y]);
    compile(&g, &CompileOptions::new(dir.path())).unwrap();
    let out =
        Command::new(env!("CARGO_BIN_EXE_bolt")).args(["run", "--device", "cuda"]).arg(dir.path()).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(!stderr.contains("panicked"), "{stderr}");
    if cfg!(feature = "cuda") {
        let driver_present = Path::new("/dev/nvidia0").exists();
        if !driver_present {
            assert!(stderr.contains("no CUDA driver") || stderr.contains("no GPU"), "{stderr}");
        }
    } else {
        assert!(stderr.contains("without the `cuda` feature"), "{stderr}");
    }
}

/// `bolt compile -o DIR` then `bolt run DIR --check` through the command line.
#[test]
fn compile_then_run_check_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let art = dir.path().join("a");
    let out = Command::new(env!("CARGO_BIN_EXE_bolt"))
        .args(["compile", "--dim", "N=2", "--no-run", "-o"])
        .arg(&art)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("precision tf32 (default for this model)"), "{stdout}");
    let out =
        Command::new(env!("CARGO_BIN_EXE_bolt")).args(["run", "--check", "--dim", "N=2"]).arg(&art).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("ok fc2_out"), "{stdout}");
    // --inputs FILE.npz, written by numpy (a writer nobody here wrote).
    match std::env::var("BOLT_PYTHON") {
        Ok(py) => {
            let npz = dir.path().join("in.npz");
            let code = format!(
                "import numpy as np; np.savez(r'{}', image=np.random.default_rng(0).uniform(-1, 1, (3, 3, 32, 32)).astype(np.float32))",
                npz.display()
            );
            let st = Command::new(py).args(["-c", &code]).status().unwrap();
            assert!(st.success());
            let out = Command::new(env!("CARGO_BIN_EXE_bolt"))
                .args(["run", "--check", "--inputs"])
                .arg(&npz)
                .arg(&art)
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
            assert!(stdout.contains("fc2_out: [3, 10]") && stdout.contains("ok fc2_out"), "{stdout}");
        }
        Err(_) => eprintln!("SKIPPED the .npz part: BOLT_PYTHON not set (tests/run.sh sets it)"),
    }
    // --check can fail: weights changed consistently (hashes updated) give other outputs.
    let bad = dir.path().join("tampered");
    copy_dir(&art, &bad);
    let wp = bad.join(WEIGHTS_FILE);
    let mut w = std::fs::read(&wp).unwrap();
    for b in w.iter_mut().take(4096) {
        *b = b.wrapping_add(17);
    }
    std::fs::write(&wp, &w).unwrap();
    let mp = bad.join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&mp).unwrap()).unwrap();
    m["files"][WEIGHTS_FILE]["blake3"] = blake3::hash(&w).to_hex().to_string().into();
    std::fs::write(&mp, serde_json::to_vec(&m).unwrap()).unwrap();
    let out =
        Command::new(env!("CARGO_BIN_EXE_bolt")).args(["run", "--check", "--dim", "N=2"]).arg(&bad).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success() && stdout.contains("MISMATCH fc2_out"), "{stdout}");
    // f32 is refused with the reason.
    let out = Command::new(env!("CARGO_BIN_EXE_bolt"))
        .args(["compile", "--no-run", "--precision", "f32", "-o"])
        .arg(dir.path().join("b"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("TF32"));
}

/// An artifact of a model nobody here wrote the outputs of: the repo's small CNN + MLP ONNX
/// graph, run on the reference device with its test data sets' inputs, against onnxruntime
/// CPU's outputs (testdata/models/small_conv_mlp, tests/python/make_models.py).
#[test]
fn small_conv_mlp_artifact_matches_onnxruntime() {
    artifact_matches_onnxruntime("models/small_conv_mlp", |_| (1, 8));
}

/// PP-OCRv4 det (paddle2onnx, from the rapidocr wheel): its spatial dims are unknown after the
/// first convs, yet every memory-intensive region between its kernels is a stitched kernel,
/// every other op but a Concat (device copies) a kernel, and the artifact (kernel specs run on the reference device) matches onnxruntime CPU on
/// both test images (320x320, 256x384).
#[test]
fn ppocrv4_det_artifact_stitches_every_region_and_matches_onnxruntime() {
    // One image at a time; sides from 64 to 384 (the detector needs multiples of 32).
    let sides = |d: &str| if d.ends_with(".0") { (1, 1) } else { (64, 384) };
    let Some(art) = artifact_matches_onnxruntime("models/ppocrv4_det", sides) else { return };
    assert!(art.plan.stitch.len() >= 30, "{} stitched nodes", art.plan.stitch.len());
    // Pools, resizes, the ConvTranspose (a 1x1 conv + DepthToSpace), BatchNormalization (a
    // multiply-add) and every element-wise op run as kernels; constants are weights; the one
    // Concat is device copies on a GPU.
    let left: Vec<&str> = art.plan.host_ops.iter().map(|h| h.op_type.as_str()).collect();
    assert_eq!(left, ["Concat"], "{:?}", art.plan.host_ops);
}

/// ResNet-50 (batch 1..2): its stem MaxPool and final GlobalAveragePool run as channels-last
/// pool kernels inside the one NHWC region (one transform in, one out), nothing but the
/// Flatten view is left to the host, and the artifact matches onnxruntime CPU at both batch
/// sizes of its test data.
#[test]
fn resnet50_artifact_pools_on_the_device_and_matches_onnxruntime() {
    let Some(art) = artifact_matches_onnxruntime("models/resnet50", |_| (1, 2)) else { return };
    let pools: Vec<String> = art
        .plan
        .glue
        .iter()
        .filter_map(|g| match g.spec {
            bolt_codegen::glue::GlueSpec::Pool(p) => Some(format!("{:?} {:?}", p.kind, p.layout)),
            _ => None,
        })
        .collect();
    assert_eq!(pools.len(), 2, "{pools:?}");
    assert!(pools.iter().all(|p| p.ends_with("Nhwc")), "{pools:?}");
    // The flatten, a view of the NHWC pool's [N, 1, 1, C] as [N, C].
    let host: Vec<&str> = art.plan.host_ops.iter().map(|h| h.op_type.as_str()).collect();
    assert_eq!(host, ["Reshape"], "{:?}", art.plan.host_ops);
}

/// Compiles the model under `testdata/<case>` (symbolic input dim `d` in `range_of(d)`), runs it
/// on the reference device with the case's test data sets and compares with onnxruntime CPU's
/// outputs at the precision's tolerance. `None` without test data.
fn artifact_matches_onnxruntime(case: &str, range_of: impl Fn(&str) -> (usize, usize)) -> Option<Artifact> {
    use bolt::cases::{compare, data_sets, read_tensor_pb, Tolerance};
    let case = common::testdata(case)?;
    let g = bolt::import::load(&case.join("model.onnx")).unwrap().graph;
    let mut sym: Vec<String> = g
        .inputs
        .iter()
        .filter_map(|i| g.types[i].shape.as_ref())
        .flat_map(|s| s.0.iter())
        .filter_map(|d| if let Dim::Sym(k) = d { Some(k.clone()) } else { None })
        .collect();
    sym.dedup();
    let dir = tempfile::tempdir().unwrap();
    let opts = CompileOptions {
        dims: sym
            .iter()
            .map(|k| {
                let (lo, hi) = range_of(k);
                range(k, lo, hi)
            })
            .collect(),
        source: bolt::artifact::Source::File(case.join("model.onnx")),
        ..CompileOptions::new(dir.path())
    };
    println!("{}", compile(&g, &opts).unwrap());
    let art = Artifact::open(dir.path()).unwrap();
    let (rtol, atol) = art.manifest.precision.tolerance();
    let mut exec = runtime::open(&art, DeviceKind::Reference, &RunOptions::default()).unwrap();
    let sets = data_sets(&case);
    assert!(!sets.is_empty());
    for set in sets {
        let read = |prefix: &str| {
            let mut v: Vec<_> = std::fs::read_dir(&set)
                .unwrap()
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
                .collect();
            v.sort();
            v.iter().map(|p| read_tensor_pb(p).unwrap()).collect::<Vec<_>>()
        };
        let inputs: HashMap<String, Tensor> =
            read("input_").into_iter().zip(&g.inputs).map(|((_, t), name)| (name.clone(), t)).collect();
        let got = runtime::outputs_as_f32(exec.run(&inputs).unwrap());
        for ((_, want), name) in read("output_").into_iter().zip(&g.outputs) {
            let c = compare(name, &got[name], &want, Tolerance { rtol: rtol.min(1e-3), atol: atol.min(1e-4) });
            println!("{}: {name} max abs err {:.2e}", set.display(), c.max_abs_err);
            assert!(c.failure.is_none(), "{}: {name}: {:?}", set.display(), c.failure);
        }
    }
    Some(art)
}

/// Bad inputs to a run: errors naming the input and what is wrong, never a panic.
#[test]
fn bad_inputs_name_the_input() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = Net::new(DType::F32);
    let x = n.input("x", &[2, 8]);
    let y = n.relu(&x);
    let g = n.finish(&[&y]);
    compile(&g, &CompileOptions::new(dir.path())).unwrap();
    let art = Artifact::open(dir.path()).unwrap();
    let mut exec = runtime::open(&art, DeviceKind::Reference, &RunOptions::default()).unwrap();
    let e = exec.run(&HashMap::new()).unwrap_err().to_string();
    assert!(e.contains("input 'x'") && e.contains("missing"), "{e}");
    let wrong = HashMap::from([("x".to_string(), Tensor::from_f32(vec![2, 4], vec![0.0; 8]))]);
    let e = exec.run(&wrong).unwrap_err().to_string();
    assert!(e.contains("input 'x'") && e.contains("dim 1 is 4"), "{e}");
    let ints = HashMap::from([("x".to_string(), Tensor::from_i64(vec![2, 8], vec![0; 16]))]);
    let e = exec.run(&ints).unwrap_err().to_string();
    assert!(e.contains("input 'x'") && e.contains("the model takes"), "{e}");
    let ok = HashMap::from([("x".to_string(), Tensor::from_f32(vec![2, 8], vec![-1.0; 16]))]);
    assert_eq!(exec.run(&ok).unwrap()[&g.outputs[0]].to_f32_vec(), vec![0.0; 16]);
}

/// A reference-only artifact (no arch: what TVM's `device=reference` modules embed) is built
/// without nvcc (an empty kernel cache holds no toolchain), round-trips through its packed
/// form, runs on the reference device like the original graph, and is refused by the cuda
/// device and by `--check` (its source is a host's subgraph, not a file) with the reason.
#[test]
fn reference_only_artifact_packs_runs_and_says_what_it_cannot_do() {
    let g = hf_attention_block();
    let dir = tempfile::tempdir().unwrap();
    let built = dir.path().join("built");
    let opts = CompileOptions {
        archs: Vec::new(),
        dims: vec![range("S", 1, 37)],
        cache_dir: Some(dir.path().join("empty-cache")),
        source: bolt::artifact::Source::Host("TVM function main".into()),
        ..CompileOptions::new(&built)
    };
    let report = compile(&g, &opts).unwrap();
    assert_eq!((report.nvcc_invocations, report.library.is_some()), (0, false), "{report}");
    assert!(report.attention_nodes + report.stitch_nodes > 0, "{report}");
    let packed = bolt::artifact::bundle::pack(&built).unwrap();
    let unpacked = dir.path().join("unpacked");
    bolt::artifact::bundle::unpack(&packed, &unpacked).unwrap();
    let art = Artifact::open(&unpacked).unwrap();
    assert!(art.manifest.archs.is_empty() && art.library.is_none());
    assert_eq!(art.manifest.source, "host:TVM function main");
    let (rtol, atol) = art.manifest.precision.tolerance();
    for s in [1, 37] {
        let b: HashMap<String, usize> = [("S".to_string(), s)].into();
        let inputs = bolt::compile::synthetic_inputs(&g, &b, 5).unwrap();
        let want = bolt::reference::run(&g, &inputs).unwrap();
        let mut exec = runtime::open(&art, DeviceKind::Reference, &RunOptions::default()).unwrap();
        let got = runtime::outputs_as_f32(exec.run(&inputs).unwrap());
        for o in &g.outputs {
            for (x, y) in got[o].to_f64_vec().iter().zip(want[o].to_f64_vec()) {
                assert!((x - y).abs() <= atol + rtol * y.abs(), "{o} at S={s}: {x} vs {y}");
            }
        }
    }
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_bolt")).arg("run").arg(&unpacked).args(args).output().unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let e = run(&["--check", "--dim", "S=4"]);
    assert!(e.contains("no file to rerun") && e.contains("TVM function main"), "{e}");
    if cfg!(feature = "cuda") && Path::new("/dev/nvidia0").exists() {
        let e = run(&["--device", "cuda", "--dim", "S=4"]);
        assert!(e.contains("reference-only"), "{e}");
    }
}

/// A classifier head (nn.Linear + softmax) compiled with its softmax inside the GEMM
/// (`--row-epilogue always`): for sm80 and for Hopper the plan names one sm80 GemmSoftmax
/// kernel (CUTLASS 3.x has none; an H100 runs it through PTX), the library holds it, it takes
/// the problem the runtime derives (can_implement, a workspace for D and the row partials),
/// and the artifact gives the model's outputs on the reference device.
#[test]
fn a_softmax_fused_into_its_gemm_builds_one_sm80_gemm_softmax_kernel() {
    let g = common::nets::softmax_head(40, 64, 96, -1);
    let p = g.outputs[0].clone();
    for archs in [vec![Arch::Sm80], vec![Arch::Sm90]] {
        let dir = tempfile::tempdir().unwrap();
        let opts = CompileOptions {
            archs: archs.clone(),
            row_epilogue: bolt::plan::row_epilogue::RowEpilogueMode::Always,
            ..CompileOptions::new(dir.path())
        };
        let report = compile(&g, &opts).unwrap();
        assert_eq!(report.kernel_nodes, 1, "{archs:?}: {report}");
        let art = Artifact::open(dir.path()).unwrap();
        assert!(art.plan.stitch.is_empty(), "{archs:?}: no stitched softmax left");
        let choice = &art.plan.kernels[0].buckets[0];
        assert_eq!(choice.len(), 1, "{archs:?}");
        assert_eq!(choice[0].arch, Arch::Sm80, "{archs:?}: the sm80 build");
        assert_eq!(choice[0].spec.family, bolt_codegen::spec::Family::GemmSoftmax);
        let lib = bolt_codegen::loader::KernelLibrary::open(art.library.as_ref().unwrap()).unwrap();
        let kernel = lib.get(&choice[0].symbol).expect("in the library");
        let problem = bolt_codegen::abi::BoltGemmProblem::packed(40, 96, 64, choice[0].spec.layouts);
        assert_eq!(kernel.can_implement(&problem), bolt_codegen::abi::Status::Ok);
        assert!(kernel.workspace_size(&problem) >= 40 * 96 * 4, "D lives in the workspace");
        let inputs = bolt::compile::synthetic_inputs(&g, &HashMap::new(), 3).unwrap();
        let want = bolt::reference::run(&g, &inputs).unwrap();
        let mut exec = runtime::open(&art, DeviceKind::Reference, &RunOptions::default()).unwrap();
        let got = runtime::outputs_as_f32(exec.run(&inputs).unwrap());
        let (rtol, atol) = art.manifest.precision.tolerance();
        for (i, (a, w)) in got[&p].to_f64_vec().iter().zip(want[&p].to_f64_vec()).enumerate() {
            assert!((a - w).abs() <= atol + rtol * w.abs(), "{archs:?} [{i}]: {a} vs {w}");
        }
    }
}

/// The compile report tells device work from host work: the default model's Flatten is a view
/// the cuda device runs itself (an alias of its input), not a host op; a cubic Resize (resize
/// kernels are nearest or linear) is what the host computes, listed with the reason.
#[test]
fn the_compile_report_separates_device_copies_from_host_ops() {
    let g = bolt::models::default_model().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let report = compile(&g, &CompileOptions::new(dir.path())).unwrap();
    // Aliased, so counted apart from copies: nothing runs for it.
    assert_eq!((report.device_copies, report.aliased_views, report.host_ops), (0, 1, 0), "{report}");
    assert!(report.to_string().contains("0 device copies, 1 aliased views"), "{report}");
    // The kernels it built, as chosen for its precision: one line per kernel with its nodes.
    assert_eq!(report.picks.iter().map(|(_, n)| n).sum::<usize>(), report.kernel_nodes, "{report}");
    assert!(report.picks.iter().all(|(p, _)| p.starts_with("bolt_") && p.contains("(est ")), "{:?}", report.picks);
    assert!(report.to_string().contains("kernels of the largest bucket:"), "{report}");
    assert!(report.host.is_empty() && !report.to_string().contains("on the host:"), "{report}");
    let art = Artifact::open(dir.path()).unwrap();
    let flatten = art.plan.host_ops.iter().find(|h| h.node == "flatten").expect("the Flatten is listed");
    assert!(flatten.on_device && flatten.reason.contains("alias"), "{flatten:?}");

    let mut n = Net::new(DType::F32);
    let x = n.input("x", &[1, 2, 3, 3]);
    let scales = n.b.initializer("scales", Tensor::from_f32(vec![4], vec![1.0, 1.0, 2.0, 2.0]));
    let attrs = ResizeAttrs { mode: ResizeMode::Cubic, nearest: NearestMode::Floor, ..Default::default() };
    let y = n.op("cubic", Op::Resize(attrs), &[&x, "", &scales]);
    let dir = tempfile::tempdir().unwrap();
    let report =
        compile(&n.finish(&[&y]), &CompileOptions { archs: Vec::new(), ..CompileOptions::new(dir.path()) }).unwrap();
    assert_eq!((report.host_ops, report.device_copies), (1, 0), "{report}");
    assert_eq!(report.host[0].0, "Resize");
    assert!(report.to_string().contains("on the host: Resize x1:"), "{report}");
}

/// A reflect Pad before an STFT-style strided 1-D conv (Silero VAD's front end): at the
/// default size of its symbolic length (1) the conv's window does not fit, so the model's
/// shapes do not bind; the pad's kernel needs only its constant pads, so it is still a glue
/// kernel (not a host op), and that kernel, run at a real length, gives the reference's Pad.
#[test]
fn a_constant_pad_is_a_glue_kernel_where_the_default_sizes_do_not_bind() {
    let mut b = bolt::ir::builder::GraphBuilder::new("stft_front");
    let x = b.input("x", DType::F32, Shape(vec![Dim::Known(1), Dim::Sym("T".into())]));
    let pads = b.initializer("pads", Tensor::from_i64(vec![4], vec![0, 0, 0, 8]));
    let padded = b.node("pad", Op::Pad { mode: PadMode::Reflect }, &[&x, &pads]);
    let axes = b.initializer("axes", Tensor::from_i64(vec![1], vec![1]));
    let col = b.node("unsq", Op::Unsqueeze, &[&padded, &axes]);
    let w = b.initializer("w", common::random_tensor(&[4, 1, 16], 5));
    let window =
        Window { kernel_shape: None, strides: Some(vec![8]), pads: None, dilations: None, auto_pad: AutoPad::NotSet };
    let conv = Op::Conv { window, group: 1 };
    let y = b.node("stft", conv, &[&col, &w]);
    b.output(&y);
    let g = b.finish().unwrap();
    let plan = bolt::plan::plan(&g).unwrap();
    let pad = plan.glue.iter().find(|d| d.node == "pad").expect("the pad has a glue decision");
    assert!(pad.kernel.is_some() && pad.reason.is_none(), "{pad:?}");

    let signal = common::random_tensor(&[1, 64], 6);
    let op = Op::Pad { mode: PadMode::Reflect };
    let (spec, problem) = bolt::plan::lower::glue_for(
        &op,
        &[1, 64],
        DType::F32,
        DType::F32,
        &[None, Some(&Tensor::from_i64(vec![4], vec![0, 0, 0, 8]))],
    )
    .unwrap()
    .unwrap();
    let got = bolt::runtime::glue::run(&spec, &problem, &signal).unwrap();
    let want = bolt::reference::eval_op(&op, &[Some(&signal), Some(&Tensor::from_i64(vec![4], vec![0, 0, 0, 8]))])
        .unwrap()
        .remove(0);
    assert_eq!(got, want);
}

/// Every element-wise function ONNX has beyond the epilogues' (trigonometric and hyperbolic
/// functions and their inverses, Sign, Elu, Selu, Celu, ThresholdedRelu, Softsign, Mish,
/// Shrink; parameters off their defaults) runs in a stitched kernel, nothing on the host, and
/// the artifact on the reference device (the kernel spec's own evaluation) gives the
/// reference executor's outputs for the original ops: so each op maps to the kernel function
/// it means, with its parameters.
#[test]
fn every_element_wise_function_is_a_stitched_kernel_with_the_reference_meaning() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = Net::new(DType::F32);
    let x = n.input("x", &[4, 33]);
    let scale = n.random("scale", &[33], 0.2);
    // Inside every function's domain: |0.45 x| < 1 (asin, acos, atanh), |x| + 1 >= 1 (acosh).
    let inner = n.op("inner", Op::Binary(Binary::Mul), &[&x, &scale]);
    let abs = n.op("abs", Op::Unary(Unary::Abs), &[&x]);
    let one = n.random("one", &[1], 0.0);
    let one = n.op("one_plus", Op::Unary(Unary::Exp), &[&one]);
    let above_one = n.op("above_one", Op::Binary(Binary::Add), &[&abs, &one]);
    let fns: Vec<(Unary, &str)> = vec![
        (Unary::Sin, &x),
        (Unary::Cos, &x),
        (Unary::Tan, &inner),
        (Unary::Asin, &inner),
        (Unary::Acos, &inner),
        (Unary::Atan, &x),
        (Unary::Sinh, &x),
        (Unary::Cosh, &x),
        (Unary::Asinh, &x),
        (Unary::Acosh, &above_one),
        (Unary::Atanh, &inner),
        (Unary::Sign, &x),
        (Unary::Elu { alpha: 0.7 }, &x),
        (Unary::Selu { alpha: 1.5, gamma: 1.2 }, &x),
        (Unary::Celu { alpha: 1.3 }, &x),
        (Unary::ThresholdedRelu { alpha: 0.4 }, &x),
        (Unary::Softsign, &x),
        (Unary::Mish, &x),
        (Unary::Shrink { bias: 0.25, lambd: 0.5 }, &x),
    ];
    let mut outputs = Vec::new();
    for (k, (f, arg)) in fns.iter().enumerate() {
        let y = n.op(&format!("f{k}"), Op::Unary(*f), &[arg]);
        // Weighted, so that two functions swapped would show.
        let w = n.random(&format!("w{k}"), &[33], 1.0);
        outputs.push(n.op(&format!("weighted{k}"), Op::Binary(Binary::Mul), &[&y, &w]));
    }
    let g = n.finish(&outputs.iter().map(String::as_str).collect::<Vec<_>>());
    let report = compile(&g, &CompileOptions::new(dir.path())).unwrap();
    let art = Artifact::open(dir.path()).unwrap();
    assert!(!art.plan.stitch.is_empty() && art.plan.host_ops.is_empty(), "{report}");
    let inputs = bolt::compile::synthetic_inputs(&g, &HashMap::new(), 3).unwrap();
    let want = bolt::reference::run(&g, &inputs).unwrap();
    let got = runtime::open(&art, DeviceKind::Reference, &RunOptions::default()).unwrap().run(&inputs).unwrap();
    for (k, y) in outputs.iter().enumerate() {
        for (a, w) in got[y].to_f64_vec().iter().zip(want[y].to_f64_vec()) {
            assert!((a - w).abs() <= 1e-5 * (1.0 + w.abs()), "{:?}: {a} vs {w}", fns[k].0);
        }
    }
}

/// NeMo's 128-mel front end (OnnxScript, from the onnx-asr wheel): its per-utterance
/// normalisation (masked mean and standard deviation over frames) reduces over rows whose
/// length is computed from the waveform's at run time (a dim shape inference cannot name).
/// The reductions read one masked input along those rows, so they stitch, the kernel's
/// problem checking the row at run time; the artifact matches onnxruntime CPU on both data
/// sets (2 x 16000 and 1 x 8000 samples). Left on the host: the Shape/Range length
/// computations and the integer division of the lengths.
#[test]
fn nemo_front_end_stitches_reductions_over_a_run_time_frame_count() {
    let sizes = |d: &str| if d == "batch_size" { (1, 2) } else { (8000, 16000) };
    let Some(art) = artifact_matches_onnxruntime("models/onnxasr_nemo128", sizes) else { return };
    assert!(art.plan.stitch.iter().any(|s| s.spec.reduces()), "no stitched reduction");
    let computed: Vec<&str> = art.plan.host_ops.iter().filter(|h| !h.on_device).map(|h| h.op_type.as_str()).collect();
    let normalisation = ["ReduceSum", "ReduceSumSquare", "Where", "Less", "Sub", "Sqrt"];
    assert!(computed.iter().all(|op| !normalisation.contains(op)), "{:?}", art.plan.host_ops);
}

/// A reduction over every axis (openWakeWord's log-mel front end clamps to the whole
/// spectrogram's maximum: `ReduceMax` without axes, then `max - 80`) is AStitch's global
/// scheme: the axes merge into one row (a view) that one stitched kernel reduces, and the
/// scalar arithmetic after it is a stitched kernel of one element. Nothing but views is left
/// to the host, and the artifact on the reference device matches onnxruntime on both data
/// sets (batches of 1 and 2: the maximum spans the batch).
#[test]
fn whole_tensor_reductions_are_one_row_stitched_kernels() {
    let sizes = |d: &str| if d == "batch_size" { (1, 2) } else { (1280, 1760) };
    let Some(art) = artifact_matches_onnxruntime("models/oww_melspectrogram", sizes) else { return };
    let computed: Vec<&str> = art.plan.host_ops.iter().filter(|h| !h.on_device).map(|h| h.op_type.as_str()).collect();
    assert!(computed.is_empty(), "{:?}", art.plan.host_ops);
    assert!(art.plan.stitch.iter().any(|s| s.spec.reduces()), "no stitched reduction");
}

/// WeSpeaker's front end (onnx-asr, OnnxScript) trims the waveform to whole hops with
/// `n - (n - 400) % 160`: shape arithmetic through Mod, a host-only op. Its value folds once
/// each bucket binds the length, so every tensor after the trim has a known shape and the
/// standalone artifact plans its memory (compiling it failed with "no known shape" before);
/// the artifact on the reference device matches onnxruntime on both data sets.
#[test]
fn wespeaker_front_end_compiles_with_its_frame_count_folded_per_bucket() {
    let sizes = |d: &str| if d == "batch_size" { (1, 2) } else { (8000, 16000) };
    artifact_matches_onnxruntime("models/onnxasr_wespeaker", sizes);
}

/// A vocoder's upsampling ConvTranspose (kernel 16, stride 8, pads 4, over a symbolic
/// length) compiles into an artifact as a conv kernel over the zero-spread input (its zeros
/// put in by a pad glue kernel between two views), and the artifact on the reference device
/// gives the original ConvTranspose's outputs at two lengths (one shape bucket each).
#[test]
fn overlapping_conv_transposes_compile_as_conv_kernels() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = bolt::ir::builder::GraphBuilder::new("upsample");
    let x = b.input("x", DType::F32, Shape(vec![Dim::Known(1), Dim::Known(6), Dim::Sym("T".into())]));
    let w = b.initializer("w", common::random_tensor(&[6, 4, 16], 1));
    let bias = b.initializer("bias", common::random_tensor(&[4], 2));
    let window = Window {
        kernel_shape: None,
        strides: Some(vec![8]),
        pads: Some(vec![4, 4]),
        dilations: None,
        auto_pad: AutoPad::NotSet,
    };
    let op = Op::ConvTranspose { window, group: 1, output_padding: None, output_shape: None };
    let y = b.node("up", op, &[&x, &w, &bias]);
    b.output(&y);
    let g = b.finish().unwrap();
    let opts = CompileOptions { archs: vec![], dims: vec![range("T", 5, 40)], ..CompileOptions::new(dir.path()) };
    compile(&g, &opts).unwrap();
    let art = Artifact::open(dir.path()).unwrap();
    assert!(art.plan.kernels.iter().any(|k| k.node == "up"), "{:?}", art.plan.host_ops);
    assert!(art.plan.host_ops.iter().all(|h| h.on_device), "{:?}", art.plan.host_ops);
    let mut exec = runtime::open(&art, DeviceKind::Reference, &RunOptions::default()).unwrap();
    for t in [5, 40] {
        let feeds = HashMap::from([("x".to_string(), common::random_tensor(&[1, 6, t], t as u64))]);
        let want = bolt::reference::run(&g, &feeds).unwrap();
        let got = exec.run(&feeds).unwrap();
        assert_eq!(got[&y].shape, [1, 4, 8 * t]);
        let (a, b) = (got[&y].to_f32_vec(), want[&y].to_f32_vec());
        assert!(a.iter().zip(&b).all(|(p, q)| (p - q).abs() <= 1e-4 * (1.0 + q.abs())), "T = {t}");
    }
}

/// A conv padded unevenly (TensorFlow's SAME padding at stride 2: pads [0, 0, 1, 1], or
/// `auto_pad` SAME_UPPER on an even size) was refused by the conv kernels, which pad
/// symmetrically, and ran on the host. It now reads its input through a zero pad of the
/// difference (a glue kernel) and runs as a kernel; the artifact on the reference device
/// gives the original conv's outputs.
#[test]
fn unevenly_padded_convs_compile_as_kernels_behind_a_pad() {
    let explicit = Window {
        kernel_shape: None,
        strides: Some(vec![2, 2]),
        pads: Some(vec![0, 0, 1, 1]),
        dilations: None,
        auto_pad: AutoPad::NotSet,
    };
    let same = Window { pads: None, auto_pad: AutoPad::SameUpper, ..explicit.clone() };
    for (window, size, out) in [(explicit, 9, 4), (same, 10, 5)] {
        let dir = tempfile::tempdir().unwrap();
        let mut b = bolt::ir::builder::GraphBuilder::new("uneven");
        let x = b.input("x", DType::F32, Shape::from_static(&[1, 8, size, size]));
        let w = b.initializer("w", common::random_tensor(&[16, 8, 3, 3], 1));
        let y = b.node("conv", Op::Conv { window, group: 1 }, &[&x, &w]);
        b.output(&y);
        let g = b.finish().unwrap();
        compile(&g, &CompileOptions { archs: vec![], ..CompileOptions::new(dir.path()) }).unwrap();
        let art = Artifact::open(dir.path()).unwrap();
        assert!(art.plan.kernels.iter().any(|k| k.node == "conv"), "{:?}", art.plan.host_ops);
        assert!(art.plan.host_ops.iter().all(|h| h.on_device), "{:?}", art.plan.host_ops);
        let feeds = HashMap::from([("x".to_string(), common::random_tensor(&[1, 8, size, size], 3))]);
        let want = bolt::reference::run(&g, &feeds).unwrap();
        let got = runtime::open(&art, DeviceKind::Reference, &RunOptions::default()).unwrap().run(&feeds).unwrap();
        assert_eq!(got[&y].shape, [1, 16, out, out]);
        let (a, b) = (got[&y].to_f32_vec(), want[&y].to_f32_vec());
        assert!(a.iter().zip(&b).all(|(p, q)| (p - q).abs() <= 1e-4 * (1.0 + q.abs())));
    }
}

/// InstanceNormalization (host-only as an op; PyTorch's GroupNorm and InstanceNorm export as
/// it) with constant scale and bias is planned as a row normalisation over the merged spatial
/// elements: one stitched kernel between two reshapes (views), nothing computed on the host
/// but the Shape the reshape back reads. The artifact's kernel spec gives the reference's
/// InstanceNormalization (its own f64 implementation) on odd spatial sizes; the ONNX
/// conformance case of PyTorch's export (`test_operator_symbolic_override`) checks the
/// planned graph against ONNX's outputs.
#[test]
fn instance_norms_are_stitched_row_normalisations() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = Net::new(DType::F32);
    let x = n.input("x", &[2, 8, 5, 7]);
    let scale = n.random("scale", &[8], 1.0);
    let bias = n.random("bias", &[8], 1.0);
    let norm = Op::Opaque {
        domain: String::new(),
        op_type: "InstanceNormalization".into(),
        attrs: vec![("epsilon".into(), AttrValue::Float(1e-3))],
        why: "host-only".into(),
    };
    let y = n.op("inorm", norm, &[&x, &scale, &bias]);
    let g = n.finish(&[&y]);
    let report = compile(&g, &CompileOptions::new(dir.path())).unwrap();
    let art = Artifact::open(dir.path()).unwrap();
    assert_eq!(art.plan.stitch.len(), 1, "{report}");
    assert!(art.plan.stitch[0].spec.reduces());
    let computed: Vec<&str> = art.plan.host_ops.iter().filter(|h| !h.on_device).map(|h| h.op_type.as_str()).collect();
    assert_eq!(computed, ["Shape"], "{:?}", art.plan.host_ops);
    let inputs = bolt::compile::synthetic_inputs(&g, &HashMap::new(), 3).unwrap();
    let want = bolt::reference::run(&g, &inputs).unwrap();
    let got = runtime::open(&art, DeviceKind::Reference, &RunOptions::default()).unwrap().run(&inputs).unwrap();
    assert_eq!(got[&y].shape, [2, 8, 5, 7]);
    for (a, w) in got[&y].to_f64_vec().iter().zip(want[&y].to_f64_vec()) {
        assert!((a - w).abs() <= 1e-5 * (1.0 + w.abs()), "{a} vs {w}");
    }
}
