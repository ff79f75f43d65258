//! The direct depthwise conv kernel (codegen/src/depthwise.rs): a unit of several specs
//! (f16 / bf16 / f32, channel vectors of 8 down to 1, 1 to 4 output columns per thread, 3x3 and
//! 5x5 filters, strides 1 and 2, a dilation, MobileNetV2's bias + ReLU6, a SiLU, a C operand,
//! ragged column strips and an odd channel count) compiled for sm_80 and linked twice. An
//! executable runs each kernel's launch (its grid, a thread per CUDA thread) emulated on the host
//! and the outputs are compared with a direct f64 loop through the epilogue's meaning
//! (`Expr::eval`); a library answers the ABI's host-side calls. Needs the toolchain, no GPU.

mod host_build;

use std::ffi::c_void;
use std::path::Path;

use bolt_codegen::abi::{BoltArgs, BoltConv2dProblem, CanImplementFn, Status};
use bolt_codegen::epilogue::{Activation, Epilogue, EvalEnv, NormalForm};
use bolt_codegen::spec::{
    Alignment, Arch, ConvFeatures, DirectTile, Element, Family, GroupMode, KernelSpec, Layout, TileConfig, Types,
};

struct Case {
    spec: KernelSpec,
    p: BoltConv2dProblem,
    alpha: f32,
    beta: f32,
}

fn spec(element: Element, vector: u32, pixels: u32, epilogue: Epilogue) -> KernelSpec {
    KernelSpec {
        family: Family::Conv2dFprop(ConvFeatures { unit_stride: false, groups: GroupMode::Depthwise, analytic: false }),
        arch: Arch::Sm80,
        types: Types { input: element, accumulator: Element::F32, output: element },
        layouts: [Layout::RowMajor; 3],
        alignment: Alignment { a: vector, b: 1, c: vector },
        tile: TileConfig::Direct(DirectTile { vector, pixels }),
        epilogue,
    }
}

fn form(beta_source: bool, bias: bool, activation: Activation) -> Epilogue {
    Epilogue::new(NormalForm { beta_source, bias, activation, residual: None }).unwrap()
}

/// A depthwise problem with the output size its geometry gives.
fn problem(n: i32, h: i32, w: i32, c: i32, rs: i32, pad: i32, stride: i32, dilation: i32) -> BoltConv2dProblem {
    let out = |x: i32| (x + 2 * pad - dilation * (rs - 1) - 1) / stride + 1;
    BoltConv2dProblem {
        n,
        h,
        w,
        c,
        k: c,
        r: rs,
        s: rs,
        p: out(h),
        q: out(w),
        pad_h: pad,
        pad_w: pad,
        stride_h: stride,
        stride_w: stride,
        dilation_h: dilation,
        dilation_w: dilation,
        groups: c,
    }
}

fn cases() -> Vec<Case> {
    let relu6 = Activation::Clip { min: 0.0.into(), max: 6.0.into() };
    vec![
        // MobileNetV2: 3x3, stride 1, bias + ReLU6; 11 columns in strips of 4.
        Case {
            spec: spec(Element::F16, 8, 4, form(false, true, relu6)),
            p: problem(2, 9, 11, 16, 3, 1, 1, 1),
            alpha: 1.0,
            beta: 0.0,
        },
        // Stride 2, SiLU, strips of 2 over 7 columns.
        Case {
            spec: spec(Element::F16, 8, 2, form(false, true, Activation::Silu)),
            p: problem(1, 10, 13, 24, 3, 1, 2, 1),
            alpha: 1.0,
            beta: 0.0,
        },
        // 5x5 dilated by 2, f32 vectors of 4, alpha only.
        Case {
            spec: spec(Element::F32, 4, 1, form(false, false, Activation::Identity)),
            p: problem(1, 12, 12, 8, 5, 4, 1, 2),
            alpha: 0.5,
            beta: 0.0,
        },
        // bf16, a C operand scaled by beta and a bias under ReLU.
        Case {
            spec: spec(Element::BF16, 2, 4, form(true, true, Activation::Relu)),
            p: problem(2, 6, 7, 6, 3, 1, 1, 1),
            alpha: 1.0,
            beta: 0.75,
        },
        // Three channels: scalar accesses; no padding (a valid conv), stride 2.
        Case {
            spec: spec(Element::F32, 1, 4, form(false, true, Activation::HardSwish)),
            p: problem(1, 9, 9, 3, 3, 0, 2, 1),
            alpha: 1.0,
            beta: 0.0,
        },
    ]
}

fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 4.0 - 2.0
        })
        .collect()
}

/// Values as `e` holds them, and their little-endian bytes.
fn encode(e: Element, v: &[f64]) -> (Vec<f64>, Vec<u8>) {
    match e {
        Element::F32 => {
            (v.iter().map(|&x| x as f32 as f64).collect(), v.iter().flat_map(|&x| (x as f32).to_le_bytes()).collect())
        }
        Element::F16 => {
            let h: Vec<half::f16> = v.iter().map(|&x| half::f16::from_f64(x)).collect();
            (h.iter().map(|x| x.to_f64()).collect(), h.iter().flat_map(|x| x.to_le_bytes()).collect())
        }
        Element::BF16 => {
            let h: Vec<half::bf16> = v.iter().map(|&x| half::bf16::from_f64(x)).collect();
            (h.iter().map(|x| x.to_f64()).collect(), h.iter().flat_map(|x| x.to_le_bytes()).collect())
        }
    }
}

fn decode(e: Element, b: &[u8]) -> Vec<f64> {
    match e {
        Element::F32 => b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64).collect(),
        Element::F16 => b.chunks_exact(2).map(|c| half::f16::from_le_bytes(c.try_into().unwrap()).to_f64()).collect(),
        Element::BF16 => b.chunks_exact(2).map(|c| half::bf16::from_le_bytes(c.try_into().unwrap()).to_f64()).collect(),
    }
}

/// The convolution by its definition, NHWC input, [C, R, S] filter, through the epilogue.
fn reference(c: &Case, x: &[f64], w: &[f64], src: &[f64], bias: &[f64]) -> Vec<f64> {
    let p = c.p;
    let mut out = Vec::new();
    for n in 0..p.n {
        for op in 0..p.p {
            for q in 0..p.q {
                for k in 0..p.k {
                    let mut acc = 0.0;
                    for r in 0..p.r {
                        for s in 0..p.s {
                            let h = op * p.stride_h - p.pad_h + r * p.dilation_h;
                            let ww = q * p.stride_w - p.pad_w + s * p.dilation_w;
                            if h >= 0 && h < p.h && ww >= 0 && ww < p.w {
                                let xi = (((n * p.h + h) * p.w + ww) * p.c + k) as usize;
                                acc += x[xi] * w[((k * p.r + r) * p.s + s) as usize];
                            }
                        }
                    }
                    let at = (((n * p.p + op) * p.q + q) * p.k + k) as usize;
                    let env = EvalEnv {
                        acc,
                        alpha: c.alpha as f64,
                        beta: c.beta as f64,
                        source: src.get(at).copied().unwrap_or(0.0),
                        bias: bias.get(k as usize).copied().unwrap_or(0.0),
                    };
                    out.push(c.spec.epilogue.expr.eval(&env));
                }
            }
        }
    }
    out
}

fn c_problem(p: &BoltConv2dProblem) -> String {
    let f = [
        p.n,
        p.h,
        p.w,
        p.c,
        p.k,
        p.r,
        p.s,
        p.p,
        p.q,
        p.pad_h,
        p.pad_w,
        p.stride_h,
        p.stride_w,
        p.dilation_h,
        p.dilation_w,
        p.groups,
    ];
    format!("{{{}}}", f.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", "))
}

/// A host `main` running every case by its operator's launch, emulated (operands from
/// `<c>_<name>.bin`, output, first NaN, to `<c>_d.bin`).
fn test_main(dir: &Path, cases: &[Case]) -> String {
    let mut m = String::from(
        "\n#include <cstdio>\n#include <vector>\n#include \"bolt_host_launch.h\"\nstatic std::vector<char> slurp(char const *path) {\n  std::vector<char> b;\n  FILE *f = std::fopen(path, \"rb\");\n  if (!f) return b;\n  int ch;\n  while ((ch = std::fgetc(f)) != EOF) b.push_back(char(ch));\n  std::fclose(f);\n  return b;\n}\nint main() {\n",
    );
    for (i, c) in cases.iter().enumerate() {
        let symbol = bolt_codegen::render::symbol_for(&c.spec);
        let file = |name: &str| dir.join(format!("{i}_{name}.bin")).display().to_string();
        let out_bytes = (c.p.n * c.p.p * c.p.q * c.p.k) as usize * c.spec.types.output.size_bytes();
        m += &format!(
            "  {{\n    BoltConv2dProblem p = {};\n    BoltArgs args = {{}};\n    std::vector<char> x = slurp(\"{}\"), w = slurp(\"{}\"), c = slurp(\"{}\"), bias = slurp(\"{}\");\n    std::vector<char> d({out_bytes}, char(0xff));\n    args.a = x.data(); args.b = w.data(); args.d = d.data();\n    args.c = c.empty() ? nullptr : c.data(); args.bias = bias.empty() ? nullptr : bias.data();\n    args.alpha = {:e}f; args.beta = {:e}f;\n    {symbol}::Operator op;\n    if (op.initialize({symbol}::Kernel::make_arguments(p, args), nullptr, nullptr) != cutlass::Status::kSuccess) return 1;\n    bolt_host::run(op);\n    FILE *f = std::fopen(\"{}\", \"wb\");\n    std::fwrite(d.data(), 1, d.size(), f);\n    std::fclose(f);\n  }}\n",
            c_problem(&c.p),
            file("x"),
            file("w"),
            file("c"),
            file("bias"),
            c.alpha,
            c.beta,
            file("d"),
        );
    }
    m + "  return 0;\n}\n"
}

#[test]
fn direct_depthwise_kernels_compute_the_convolution_and_answer_the_abi() {
    let dir = host_build::scratch("depthwise");

    let cases = cases();
    let mut expected = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        bolt_codegen::validate::validate(&c.spec).unwrap_or_else(|e| panic!("case {i}: {e}"));
        let p = c.p;
        let e = c.spec.types.input;
        let seed = i as u64 * 10;
        let (x, xb) = encode(e, &values((p.n * p.h * p.w * p.c) as usize, seed));
        let (w, wb) = encode(e, &values((p.k * p.r * p.s) as usize, seed + 1));
        let out_e = c.spec.types.output;
        let reads = |b: bool, n: usize, s: u64| if b { encode(out_e, &values(n, s)) } else { (Vec::new(), Vec::new()) };
        let (src, sb) = reads(c.spec.epilogue.expr.reads_source(), (p.n * p.p * p.q * p.k) as usize, seed + 2);
        let (bias, bb) = reads(c.spec.epilogue.expr.reads_bias(), p.k as usize, seed + 3);
        for (name, bytes) in [("x", xb), ("w", wb), ("c", sb), ("bias", bb)] {
            std::fs::write(dir.join(format!("{i}_{name}.bin")), bytes).unwrap();
        }
        expected.push(reference(c, &x, &w, &src, &bias));
    }
    let symbols: Vec<String> = cases.iter().map(|c| bolt_codegen::render::symbol_for(&c.spec)).collect();
    let unit: Vec<(&KernelSpec, &str)> = cases.iter().zip(&symbols).map(|(c, s)| (&c.spec, s.as_str())).collect();
    let unit = bolt_codegen::render::render_unit(&unit).unwrap() + &test_main(&dir, &cases);
    let built = host_build::build(&dir, "depthwise", &unit);

    // The kernels' own launches, emulated on the host.
    host_build::run(&built);
    for (i, (c, want)) in cases.iter().zip(&expected).enumerate() {
        let got = decode(c.spec.types.output, &std::fs::read(dir.join(format!("{i}_d.bin"))).unwrap());
        assert_eq!(got.len(), want.len(), "case {i}");
        // f32 accumulation, then one rounding to the output type.
        let tol = match c.spec.types.output {
            Element::F32 => 1e-5,
            Element::F16 => 2e-3,
            Element::BF16 => 1e-2,
        };
        for (k, (g, w)) in got.iter().zip(want).enumerate() {
            assert!((g - w).abs() <= tol * (1.0 + w.abs()), "{} case {i} output {k}: {g} vs {w}", symbols[i]);
        }
    }

    // The ABI's host side: what each kernel implements, and its pointer checks.
    let lib = unsafe { libloading::Library::new(&built.library) }.unwrap();
    for (c, symbol) in cases.iter().zip(&symbols) {
        let f = |suffix: &str| format!("{symbol}{suffix}");
        let can_implement = *unsafe { lib.get::<CanImplementFn>(f("_can_implement").as_bytes()) }.unwrap();
        let status = |p: &BoltConv2dProblem| unsafe { can_implement(p as *const _ as *const c_void) }.status();
        let p = c.p;
        assert_eq!(status(&p), Status::Ok, "{symbol}");
        assert_eq!(status(&BoltConv2dProblem { groups: 1, ..p }), Status::UnsupportedProblem, "{symbol}: groups");
        assert_eq!(status(&BoltConv2dProblem { k: 2 * p.c, ..p }), Status::UnsupportedProblem, "{symbol}: K != C");
        assert_eq!(status(&BoltConv2dProblem { q: 0, ..p }), Status::UnsupportedProblem, "{symbol}: no output");
        if let TileConfig::Direct(t) = c.spec.tile {
            if t.vector > 1 {
                let odd = p.c + 1;
                let q = BoltConv2dProblem { c: odd, k: odd, groups: odd, ..p };
                assert_eq!(status(&q), Status::MisalignedOperand, "{symbol}: channels not in whole vectors");
            }
        }
        let mut setup = host_build::RawSetup::<BoltArgs>::new(&lib, symbol);
        let mut init = |args: &BoltArgs| setup.initialize(&c.p as *const _ as *const c_void, args);
        assert_eq!(init(&BoltArgs::default()), Status::NullArgument, "{symbol}");
        let aligned = 0x1000 as *const c_void;
        let mut fake = BoltArgs {
            a: aligned,
            b: aligned,
            c: aligned,
            bias: aligned,
            d: 0x1000 as *mut c_void,
            ..Default::default()
        };
        // Set-up needs no device (nothing is launched: the pointers are fake).
        assert_eq!(init(&fake), Status::Ok, "{symbol}");
        fake.a = 0x1001 as *const c_void;
        assert_eq!(init(&fake), Status::MisalignedOperand, "{symbol}");
    }
}
