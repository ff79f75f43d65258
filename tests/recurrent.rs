//! Recurrent layers (RNN, GRU, LSTM) with constant weights are planned as one GEMM for every
//! step's input projection (both directions at once) and a `RecurrentScan` over the
//! projections. The planned graph must equal the layer on the reference executor for every
//! cell, direction, layout and optional input; this checks the rewriting (the reference's
//! recurrence itself is checked against the ONNX conformance cases and, on the corpus's LSTM
//! and GRU models, against onnxruntime).

mod common;

use bolt::ir::builder::GraphBuilder;
use bolt::ir::{Cell, DType, Graph, Op, Recurrent, RnnDirection, Shape, Tensor};
use std::collections::HashMap;
use std::path::PathBuf;

struct Case {
    cell: Cell,
    direction: RnnDirection,
    batch_major: bool,
    /// sequence_lens, initial states, peepholes, bias, clip.
    extras: bool,
}

const SEQ: usize = 5;
const BATCH: usize = 3;
const INPUT: usize = 4;
const HIDDEN: usize = 6;

fn layer(c: &Case) -> (Graph, HashMap<String, Tensor>) {
    let dirs = c.direction.count();
    let rows = c.cell.gates() * HIDDEN;
    let lstm = matches!(c.cell, Cell::Lstm { .. });
    let mut b = GraphBuilder::new("recurrent");
    let xs = if c.batch_major { [BATCH, SEQ, INPUT] } else { [SEQ, BATCH, INPUT] };
    let x = b.input("x", DType::F32, Shape::from_static(&xs));
    let small = |shape: &[usize], seed: u64| {
        let t = common::random_tensor(shape, seed);
        Tensor::from_f32(shape.to_vec(), t.to_f32_vec().iter().map(|v| v * 0.5).collect())
    };
    let w = b.initializer("w", small(&[dirs, rows, INPUT], 1));
    let r = b.initializer("r", small(&[dirs, rows, HIDDEN], 2));
    let state = if c.batch_major { [BATCH, dirs, HIDDEN] } else { [dirs, BATCH, HIDDEN] };
    let mut inputs: Vec<String> = vec![x.clone(), w, r];
    let mut feeds = HashMap::from([(x, common::random_tensor(&xs, 3))]);
    if c.extras {
        inputs.push(b.initializer("b", small(&[dirs, 2 * rows], 4)));
        inputs.push(b.initializer("lens", Tensor::from_i64_as(DType::I32, vec![BATCH], &[5, 2, 4]).unwrap()));
        let h0 = b.input("h0", DType::F32, Shape::from_static(&state));
        feeds.insert(h0.clone(), common::random_tensor(&state, 5));
        inputs.push(h0);
        if lstm {
            let c0 = b.input("c0", DType::F32, Shape::from_static(&state));
            feeds.insert(c0.clone(), common::random_tensor(&state, 6));
            inputs.push(c0);
            inputs.push(b.initializer("p", small(&[dirs, 3 * HIDDEN], 7)));
        }
    }
    let activations = c.cell.default_activations().repeat(dirs);
    let op = Op::Recurrent(Recurrent {
        cell: c.cell,
        direction: c.direction,
        hidden_size: Some(HIDDEN),
        activations,
        clip: c.extras.then_some(1.5),
        batch_major: c.batch_major,
    });
    let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    let outs = b.node_multi("layer", op, &refs, if lstm { 3 } else { 2 });
    for o in &outs {
        b.output(o);
    }
    (b.finish().unwrap(), feeds)
}

#[test]
fn recurrent_layers_plan_to_a_projection_gemm_and_a_scan_that_equal_them() {
    let cells = [
        Cell::Rnn,
        Cell::Gru { linear_before_reset: false },
        Cell::Gru { linear_before_reset: true },
        Cell::Lstm { input_forget: false },
        Cell::Lstm { input_forget: true },
    ];
    let mut n = 0;
    for cell in cells {
        for direction in [RnnDirection::Forward, RnnDirection::Reverse, RnnDirection::Bidirectional] {
            for (batch_major, extras) in [(false, false), (true, true), (false, true)] {
                let case = Case { cell, direction, batch_major, extras };
                let (g, feeds) = layer(&case);
                let plan = bolt::plan::plan(&g).unwrap();
                let ops: Vec<&str> = plan.graph.nodes.iter().map(|n| n.op.op_type()).collect();
                assert!(ops.contains(&"BoltRecurrentScan") && !ops.contains(&"LSTM"), "{ops:?}");
                assert_eq!(plan.partitioning.partitions.len(), 1, "one projection GEMM: {ops:?}");
                let want = bolt::reference::run(&g, &feeds).unwrap();
                let got = bolt::reference::run(&plan.graph, &feeds).unwrap();
                for o in &g.outputs {
                    for (a, b) in want[o].to_f32_vec().iter().zip(got[o].to_f32_vec()) {
                        assert!(
                            (a - b).abs() <= 1e-5,
                            "{cell:?} {direction:?} major {batch_major} extras {extras} {o}: {a} vs {b}"
                        );
                    }
                }
                n += 1;
            }
        }
    }
    assert_eq!(n, 45);
}

/// The scan kernels' own code (the template's per-step phases), compiled with nvcc and its
/// launch emulated on the host (a thread per CUDA thread, built with ThreadSanitizer: a phase
/// reading another unit's state without a barrier fails the run), equals the reference executor's
/// recurrence (checked against the ONNX conformance cases) on random projections, weights,
/// lengths and states, for every cell and direction, both layouts, f32 and f16.
#[test]
fn scan_kernels_run_on_the_host_equal_the_reference() {
    use bolt_codegen::recurrent::{render_unit, symbol_for};
    use std::process::Command;
    let tc = bolt_cutlass::Toolchain::discover().unwrap_or_else(|e| panic!("{e}"));
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("recurrent");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(bolt_codegen::abi::HEADER_NAME), bolt_codegen::abi::HEADER).unwrap();
    std::fs::write(dir.join(bolt_codegen::abi::HOST_LAUNCH_HEADER_NAME), bolt_codegen::abi::HOST_LAUNCH_HEADER).unwrap();
    let mut cases = Vec::new();
    for (k, cell) in [
        Cell::Rnn,
        Cell::Gru { linear_before_reset: false },
        Cell::Gru { linear_before_reset: true },
        Cell::Lstm { input_forget: false },
        Cell::Lstm { input_forget: true },
    ]
    .into_iter()
    .enumerate()
    {
        for (m, direction) in
            [RnnDirection::Forward, RnnDirection::Reverse, RnnDirection::Bidirectional].into_iter().enumerate()
        {
            let dtype = if (k + m) % 2 == 0 { DType::F32 } else { DType::F16 };
            let r = Recurrent {
                cell,
                direction,
                hidden_size: None,
                activations: cell.default_activations().repeat(direction.count()),
                clip: (m == 1).then_some(0.8),
                batch_major: (k + m) % 3 == 0,
            };
            cases.push((r, dtype, (k * 3 + m) % 2 == 0));
        }
    }
    let specs: Vec<_> = cases.iter().map(|(r, d, _)| bolt::plan::lower::recurrent_spec(r, *d).unwrap()).collect();
    let symbols: Vec<String> = specs.iter().map(symbol_for).collect();
    let pairs: Vec<_> = specs.iter().zip(&symbols).map(|(s, n)| (s, n.as_str())).collect();
    let mut main = String::from(HOST_MAIN_HEAD);
    for s in &symbols {
        main += &HOST_RUNNER.replace("SYM", s);
    }
    main += "int main(int argc, char **argv) {\n  std::string which = argv[1];\n  BoltRecurrentProblem p{atoll(argv[2]), atoll(argv[3]), atoll(argv[4])};\n";
    for s in &symbols {
        main += &format!("  if (which == \"{s}\") return run_{s}(p, argv[5]);\n");
    }
    main += "  return 2;\n}\n";
    let source = dir.join("recurrent.cu");
    std::fs::write(&source, render_unit(&pairs).unwrap() + &main).unwrap();
    let object = dir.join("recurrent.o");
    let tsan = ["-Xcompiler=-fsanitize=thread", "-Xcompiler=-g"];
    tc.compile(&source, &object)
        .arch(bolt_cutlass::Arch::Sm80)
        .include(&dir)
        .arg(tsan[0])
        .arg(tsan[1])
        .run()
        .unwrap_or_else(|e| panic!("{e}"));
    let exe = dir.join("recurrent_host");
    let o = Command::new(tc.nvcc()).args(tsan).args(["-cudart", "static", "-o"]).arg(&exe).arg(&object).output().unwrap();
    assert!(o.status.success(), "link: {}", String::from_utf8_lossy(&o.stderr));

    let (seq, batch, hidden) = (6usize, 3usize, 5usize);
    for (((r, dtype, extras), spec), symbol) in cases.iter().zip(&specs).zip(&symbols) {
        let dirs = r.direction.count();
        let rows = r.cell.gates() * hidden;
        let lstm = matches!(r.cell, Cell::Lstm { .. });
        let xw_shape = if r.batch_major { [batch, seq, dirs * rows] } else { [seq, batch, dirs * rows] };
        let state = if r.batch_major { [batch, dirs, hidden] } else { [dirs, batch, hidden] };
        let t = |shape: &[usize], seed: u64| {
            let v = common::random_tensor(shape, seed).to_f64_vec();
            Tensor::from_f64_as(*dtype, shape.to_vec(), &v.iter().map(|x| x * 0.6).collect::<Vec<_>>()).unwrap()
        };
        let xw = t(&xw_shape, 1);
        let rt = t(&[dirs, hidden, rows], 2);
        let bias = extras.then(|| t(&[dirs, 2 * rows], 3));
        let lens = extras.then(|| Tensor::from_i64_as(DType::I32, vec![batch], &[6, 2, 0]).unwrap());
        let h0 = extras.then(|| t(&state, 4));
        let c0 = (*extras && lstm).then(|| t(&state, 5));
        let peep = (*extras && lstm).then(|| t(&[dirs, 3 * hidden], 6));
        let inputs = [Some(&xw), Some(&rt), bias.as_ref(), lens.as_ref(), h0.as_ref(), c0.as_ref(), peep.as_ref()];
        let want = bolt::reference::eval_op(&Op::RecurrentScan(r.clone()), &inputs).unwrap();
        let problem = bolt::plan::lower::recurrent_problem(r, &xw.shape, &rt.shape).unwrap();
        assert_eq!((problem.seq, problem.batch, problem.hidden), (seq as i64, batch as i64, hidden as i64));
        let case_dir = dir.join(symbol);
        let _ = std::fs::remove_dir_all(&case_dir);
        std::fs::create_dir_all(&case_dir).unwrap();
        let write = |name: &str, t: Option<&Tensor>| {
            if let Some(t) = t {
                let bytes: Vec<u8> = t.to_f32_vec().iter().flat_map(|v| v.to_le_bytes()).collect();
                std::fs::write(case_dir.join(name), bytes).unwrap();
            }
        };
        for (name, t) in [("xw", Some(&xw)), ("rt", Some(&rt)), ("bias", bias.as_ref()), ("lens", lens.as_ref())] {
            write(name, t);
        }
        for (name, t) in [("h0", h0.as_ref()), ("c0", c0.as_ref()), ("peepholes", peep.as_ref())] {
            write(name, t);
        }
        let out = Command::new(&exe)
            .arg(symbol)
            .args([seq, batch, hidden].map(|v| v.to_string()))
            .arg(&case_dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{symbol}: {}", String::from_utf8_lossy(&out.stderr));
        let tol = if *dtype == DType::F16 { 4e-3 } else { 2e-5 };
        for (k, name) in ["y", "yh", "yc"].iter().enumerate().take(want.len()) {
            let bytes = std::fs::read(case_dir.join(name)).unwrap();
            let got: Vec<f32> = bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
            let w = want[k].to_f32_vec();
            assert_eq!(got.len(), w.len(), "{symbol} {name}");
            for (i, (g, e)) in got.iter().zip(&w).enumerate() {
                assert!((g - e).abs() <= tol * e.abs().max(1.0), "{symbol} ({spec:?}) {name}[{i}]: {g} vs {e}");
            }
        }
    }
}

/// Reads raw f32 files (absent: an empty vector) and writes the outputs as f32.
const HOST_MAIN_HEAD: &str = r#"
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
static std::vector<float> read_f32(std::string const &path) {
  std::vector<float> v;
  FILE *f = fopen(path.c_str(), "rb");
  if (!f) return v;
  float x;
  while (fread(&x, sizeof x, 1, f) == 1) v.push_back(x);
  fclose(f);
  return v;
}
template <class E> static std::vector<E> as(std::vector<float> const &v) {
  std::vector<E> o;
  for (float x : v) o.push_back(E(x));
  return o;
}
template <class E> static void write_f32(std::string const &path, std::vector<E> const &v) {
  FILE *f = fopen(path.c_str(), "wb");
  for (E x : v) { float y = float(x); fwrite(&y, sizeof y, 1, f); }
  fclose(f);
}
#include "bolt_host_launch.h"
"#;

/// One kernel's host run: the operator's launch emulated (a block per sequence and direction,
/// a thread per unit and the block's barriers real), outputs first poisoned with NaN.
const HOST_RUNNER: &str = r#"
static int run_SYM(BoltRecurrentProblem p, std::string dir) {
  using E = SYM::Element;
  auto in = [&](char const *name) { return as<E>(read_f32(dir + "/" + name)); };
  std::vector<E> xw = in("xw"), rt = in("rt"), bias = in("bias"), h0 = in("h0"), c0 = in("c0"), pe = in("peepholes");
  std::vector<int32_t> lens;
  for (float x : read_f32(dir + "/lens")) lens.push_back(int32_t(x));
  int64_t const D = SYM::kDirections;
  std::vector<E> y(p.seq * D * p.batch * p.hidden, E(NAN)), yh(D * p.batch * p.hidden, E(NAN)), yc(D * p.batch * p.hidden, E(NAN));
  auto ptr = [](std::vector<E> const &v) { return v.empty() ? nullptr : v.data(); };
  SYM::Pointers a{ptr(xw), ptr(rt), ptr(bias), ptr(h0), ptr(c0), ptr(pe), lens.empty() ? nullptr : lens.data(), y.data(), yh.data(), yc.data()};
  SYM::Operator op;
  if (op.initialize(SYM::Operator::Arguments{p, a}, nullptr, nullptr) != cutlass::Status::kSuccess) return 3;
  bolt_host::run(op);
  write_f32(dir + "/y", y);
  write_f32(dir + "/yh", yh);
  write_f32(dir + "/yc", yc);
  return 0;
}
"#;

/// A bidirectional LSTM and a GRU after it, compiled for a range of sequence lengths: the
/// projections are GEMM kernels, each scan a recurrent kernel of the library (which takes the
/// problem the cuda device derives at both ends of the range), nothing but views on the host,
/// and the artifact on the reference device equals the model.
#[test]
fn recurrent_layers_compile_to_scan_kernels() {
    use bolt::artifact::format::DimRange;
    use bolt::artifact::{compile, Artifact, CompileOptions};
    use bolt::runtime::{self, DeviceKind, RunOptions};
    use bolt_codegen::spec::Arch;
    let s = bolt::ir::Dim::Sym("T".into());
    let mut b = GraphBuilder::new("recurrent-stack");
    let x = b.input("x", DType::F32, Shape(vec![s, bolt::ir::Dim::Known(2), bolt::ir::Dim::Known(INPUT)]));
    let small = |shape: &[usize], seed: u64| {
        let t = common::random_tensor(shape, seed);
        Tensor::from_f32(shape.to_vec(), t.to_f32_vec().iter().map(|v| v * 0.5).collect())
    };
    let lstm = Recurrent {
        cell: Cell::Lstm { input_forget: false },
        direction: RnnDirection::Bidirectional,
        hidden_size: Some(HIDDEN),
        activations: Cell::Lstm { input_forget: false }.default_activations().repeat(2),
        clip: None,
        batch_major: false,
    };
    let w = b.initializer("w1", small(&[2, 4 * HIDDEN, INPUT], 1));
    let r = b.initializer("r1", small(&[2, 4 * HIDDEN, HIDDEN], 2));
    let bias = b.initializer("b1", small(&[2, 8 * HIDDEN], 3));
    let outs = b.node_multi("lstm", Op::Recurrent(lstm), &[&x, &w, &r, &bias], 3);
    // [T, 2, 2, H] -> [T, 2, 2H]: directions side by side, as torch's bidirectional output.
    let t = b.node("t", Op::Transpose { perm: Some(vec![0, 2, 1, 3]) }, &[&outs[0]]);
    let shape = b.initializer("shape", Tensor::from_i64(vec![3], vec![0, 0, 2 * HIDDEN as i64]));
    let y = b.node("merge", Op::Reshape { allowzero: false }, &[&t, &shape]);
    let gru = Recurrent {
        cell: Cell::Gru { linear_before_reset: true },
        direction: RnnDirection::Forward,
        hidden_size: Some(HIDDEN),
        activations: Cell::Gru { linear_before_reset: true }.default_activations().to_vec(),
        clip: None,
        batch_major: false,
    };
    let w2 = b.initializer("w2", small(&[1, 3 * HIDDEN, 2 * HIDDEN], 4));
    let r2 = b.initializer("r2", small(&[1, 3 * HIDDEN, HIDDEN], 5));
    let outs2 = b.node_multi("gru", Op::Recurrent(gru), &[&y, &w2, &r2], 2);
    b.output(&outs2[0]);
    b.output(&outs[2]);
    let g = b.finish().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dims = vec![DimRange { name: "T".into(), min: 1, max: 9 }];
    let opts = CompileOptions { archs: vec![Arch::Sm80], dims, ..CompileOptions::new(dir.path()) };
    let report = compile(&g, &opts).unwrap();
    println!("{report}");
    let art = Artifact::open(dir.path()).unwrap();
    assert_eq!(art.plan.recurrent.len(), 2, "{:?}", art.plan.host_ops);
    assert!(art.plan.host_ops.iter().all(|h| matches!(h.op_type.as_str(), "Reshape")), "{:?}", art.plan.host_ops);
    let lib = bolt_codegen::loader::KernelLibrary::open(art.library.as_ref().unwrap()).unwrap();
    let graph = art.graph();
    for seq in [1usize, 9] {
        let feeds = HashMap::from([("x".to_string(), common::random_tensor(&[seq, 2, INPUT], 8))]);
        // The problems the cuda device derives, taken by the library's kernels.
        let bound = bolt::plan::edit::bind_inputs(&graph, &HashMap::from([("T".to_string(), seq)])).unwrap();
        for nr in &art.plan.recurrent {
            let n = graph.nodes.iter().find(|n| n.name == nr.node).unwrap();
            let Op::RecurrentScan(r) = &n.op else { panic!("{:?}", n.op) };
            let shape = |i: usize| bound.types[n.input(i).unwrap()].shape.as_ref().unwrap().as_static().unwrap();
            let p = bolt::plan::lower::recurrent_problem(r, &shape(0), &shape(1)).unwrap();
            let k = lib.recurrent(&nr.spec).unwrap_or_else(|| panic!("{} not in the library", nr.symbol));
            assert_eq!(k.can_implement(&p), bolt_codegen::abi::Status::Ok, "{p:?}");
            assert_eq!(p.seq, seq as i64);
        }
        let want = bolt::reference::run(&g, &feeds).unwrap();
        let mut exec = runtime::open(&art, DeviceKind::Reference, &RunOptions::default()).unwrap();
        let got = exec.run(&feeds).unwrap();
        for o in &g.outputs {
            assert_eq!(got[o].shape, want[o].shape, "{o}");
            for (a, w) in got[o].to_f32_vec().iter().zip(want[o].to_f32_vec()) {
                assert!((a - w).abs() <= 1e-4, "{o} at T={seq}: {a} vs {w}");
            }
        }
    }
    // A hidden size no block holds stays on the host, with why.
    let too_wide = bolt::ir::Recurrent {
        hidden_size: Some(1025),
        ..match &graph.nodes.iter().find(|n| n.name == "gru").unwrap().op {
            Op::RecurrentScan(r) => r.clone(),
            op => panic!("{op:?}"),
        }
    };
    let err = bolt::plan::lower::recurrent_problem(&too_wide, &[3, 2, 3 * 1025], &[1, 1025, 3 * 1025]).unwrap_err();
    assert!(err.contains("1025"), "{err}");
}

/// Sequence lengths of another type than ONNX's int32 (the reference reads any integers) keep
/// the scan with the host, with why: the kernel reads int32 and would misread them.
#[test]
fn int64_sequence_lengths_stay_with_the_host() {
    use bolt::artifact::{compile, Artifact, CompileOptions};
    let case = Case { cell: Cell::Rnn, direction: RnnDirection::Forward, batch_major: false, extras: true };
    let (mut g, feeds) = layer(&case);
    let lens = Tensor::from_i64(vec![BATCH], vec![5, 2, 4]);
    g.types.insert("lens".into(), bolt::ir::TensorType::new(DType::I64, Shape::from_static(&[BATCH])));
    g.initializers.insert("lens".into(), std::sync::Arc::new(lens));
    let dir = tempfile::tempdir().unwrap();
    compile(&g, &CompileOptions { archs: vec![], ..CompileOptions::new(dir.path()) }).unwrap();
    let art = Artifact::open(dir.path()).unwrap();
    assert!(art.plan.recurrent.is_empty());
    let host = art.plan.host_ops.iter().find(|h| h.node == "layer").expect("the scan is a host op");
    assert!(host.reason.contains("int32"), "{}", host.reason);
    // And it still computes the layer.
    let mut exec = bolt::runtime::open(&art, bolt::runtime::DeviceKind::Reference, &Default::default()).unwrap();
    let got = exec.run(&feeds).unwrap();
    let want = bolt::reference::run(&g, &feeds).unwrap();
    for o in &g.outputs {
        // (The projection GEMM rounds its sums once: last-bit differences.)
        for (a, w) in got[o].to_f32_vec().iter().zip(want[o].to_f32_vec()) {
            assert!((a - w).abs() <= 1e-5, "{o}: {a} vs {w}");
        }
    }
}
