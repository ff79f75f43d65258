//! Builds the fused kernel the candidate function picks for every two-layer chain of
//! `b2b.json` (bias + ReLU in both layers, f16 with f32 accumulation) into one library, and
//! writes `workloads.json` next to it: per chain, the kernel's symbol and the exact
//! `BoltB2b*Problem` to run. `codegen/bench/b2b_gpu.py` runs them on a GPU (numerics against a
//! layer-by-layer reference, fused vs unfused timings).
//!
//! cargo run --release -p bolt-codegen --example b2b_workloads -- [b2b.json] [out_dir]

use std::path::PathBuf;

use bolt_codegen::abi::{BoltB2bConv2dProblem, BoltB2bGemmProblem, BoltConv2dProblem};
use bolt_codegen::b2b::{self, B2bFamily, B2bProblem};
use bolt_codegen::epilogue::{Activation, Epilogue, NormalForm};
use bolt_codegen::spec::{Element, Types};
use serde_json::{json, Value};

fn conv(nhwc: [i32; 4], k: i32, r: i32, pad: i32, stride: i32) -> BoltConv2dProblem {
    let [n, h, w, c] = nhwc;
    let out = |x: i32| (x + 2 * pad - r) / stride + 1;
    BoltConv2dProblem {
        n,
        h,
        w,
        c,
        k,
        r,
        s: r,
        p: out(h),
        q: out(w),
        pad_h: pad,
        pad_w: pad,
        stride_h: stride,
        stride_w: stride,
        dilation_h: 1,
        dilation_w: 1,
        groups: 1,
    }
}

fn problem_json(p: &B2bProblem) -> Value {
    match p {
        B2bProblem::Gemm(g) => json!({
            "kind": "gemm", "layers": g.layers, "m": g.m, "k": g.k, "n": g.n,
            "lda": g.lda, "ldc": g.ldc, "ldd": g.ldd,
        }),
        B2bProblem::Conv2d(c) => json!({
            "kind": "conv2d", "layers": c.layers,
            "conv": c.conv.iter().map(|x| vec![
                x.n, x.h, x.w, x.c, x.k, x.r, x.s, x.p, x.q, x.pad_h, x.pad_w,
                x.stride_h, x.stride_w, x.dilation_h, x.dilation_w, x.groups,
            ]).collect::<Vec<_>>(),
        }),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let workloads = PathBuf::from(args.get(1).map_or("/work/shared/workloads/b2b.json", String::as_str));
    let out = PathBuf::from(args.get(2).map_or("target/b2b_workloads", String::as_str));
    let w: Value = serde_json::from_str(&std::fs::read_to_string(&workloads).expect("read b2b.json")).unwrap();
    let relu =
        Epilogue::new(NormalForm { beta_source: false, bias: true, activation: Activation::Relu, residual: None })
            .unwrap();
    let epilogues = [relu.clone(), relu];
    let types = Types { input: Element::F16, accumulator: Element::F32, output: Element::F16 };

    let mut chains: Vec<(String, B2bFamily, B2bProblem, Value)> = Vec::new();
    let gemm = |m: i64, k: i64, n0: i64, n1: i64| B2bProblem::Gemm(BoltB2bGemmProblem::packed(m, k, &[n0, n1]));
    let g = |p: &Value, k: &str| p[k].as_i64().unwrap();
    for (i, p) in w["cutlass_example_shapes"].as_array().unwrap().iter().enumerate() {
        let problem = gemm(g(p, "M"), g(p, "K0"), g(p, "N0"), g(p, "N1"));
        chains.push((format!("cutlass_example_{i}"), B2bFamily::Gemm, problem, p.clone()));
    }
    for (i, p) in w["gemm_pairs_bolt_table1"]["problems"].as_array().unwrap().iter().enumerate() {
        let problem = gemm(g(p, "M"), g(p, "K0"), g(p, "N0"), g(p, "N1"));
        chains.push((format!("gemm_table1_{i}"), B2bFamily::Gemm, problem, p.clone()));
    }
    for (i, p) in w["conv_pairs_bolt_table2"]["problems"].as_array().unwrap().iter().enumerate() {
        let v = |k: &str| g(p, k) as i32;
        let c0 = conv([32, v("H"), v("W"), v("C")], v("K0"), 3, 1, v("stride"));
        let c1 = conv([32, c0.p, c0.q, v("K0")], v("K1"), 1, 0, 1);
        let mut problem = BoltB2bConv2dProblem { layers: 2, ..Default::default() };
        problem.conv[0] = c0;
        problem.conv[1] = c1;
        chains.push((format!("conv_table2_{i}"), B2bFamily::Conv2dFprop, B2bProblem::Conv2d(problem), p.clone()));
    }

    let mut specs = Vec::new();
    let mut entries = Vec::new();
    for (name, family, problem, source) in chains {
        let c = b2b::candidates(family, types, &problem, &epilogues).unwrap_or_else(|e| panic!("{name}: {e}"));
        let (spec, cost) = c.specs[0].clone();
        entries.push(json!({
            "name": name,
            "family": format!("{family:?}"),
            "symbol": b2b::symbol_for(&spec),
            "residency": format!("{:?}", spec.residency),
            "original_problem": problem_json(&problem),
            "problem": problem_json(&c.problem),
            "padded_input_channels": c.padded_input_channels,
            "cost": cost,
            "workload": source,
        }));
        specs.push(spec);
    }
    let lib = b2b::build_library(&specs, &out, "bolt_b2b_workloads", None, &[]).unwrap_or_else(|e| panic!("{e}"));
    println!(
        "{} chains, {} kernels in {} ({:.1}s of nvcc; compiled now: max {} registers, {} B spilled)",
        entries.len(),
        lib.symbols.len(),
        lib.library.display(),
        lib.nvcc_seconds.iter().sum::<f64>(),
        lib.resources.iter().map(|r| r.registers).max().unwrap_or(0),
        lib.resources.iter().map(|r| r.spill_store_bytes).sum::<u32>()
    );
    let index = json!({ "library": lib.library.file_name().unwrap().to_string_lossy(), "chains": entries });
    let path = out.join("workloads.json");
    std::fs::write(&path, serde_json::to_string_pretty(&index).unwrap() + "\n").unwrap();
    println!("wrote {}", path.display());
}
