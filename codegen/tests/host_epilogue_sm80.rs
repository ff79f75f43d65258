//! The rendered sm80 epilogue functors, compiled for the host (CUTLASS's epilogue functors are
//! CUTLASS_HOST_DEVICE) and applied to a few arrays, against `Expr::eval`: checks the custom
//! functors' math and that each normal form is wired to the right functor, operand and beta.
//! Needs nvcc (host code only, no GPU).

mod common;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;

use bolt_codegen::epilogue::{Activation, EvalEnv, ResidualAt};
use bolt_codegen::sm80::{self, Beta, COperand, EpilogueKind};
use bolt_codegen::spec::KernelSpec;
use bolt_cutlass::{Arch, Toolchain};
use common::*;

const N: usize = 64;
const ALPHA: f32 = 1.25;
const BETA: f32 = 0.75;

fn inputs() -> ([f32; N], [f32; N], [f32; N]) {
    let mut acc = [0.0; N];
    let mut c = [0.0; N];
    let mut bias = [0.0; N];
    for i in 0..N {
        // acc sweeps [-8, 8); c and bias are scrambled over [-2, 2].
        acc[i] = -8.0 + 16.0 * i as f32 / N as f32;
        c[i] = ((i * 37 % 29) as f32 / 7.0 - 2.0).clamp(-2.0, 2.0);
        bias[i] = ((i * 11 % 17) as f32 / 4.0 - 2.0).clamp(-2.0, 2.0);
    }
    (acc, c, bias)
}

fn array(name: &str, values: &[f32]) -> String {
    let items: Vec<String> = values.iter().map(|v| format!("{v:?}f")).collect();
    format!("static float const {name}[{N}] = {{{}}};\n", items.join(", "))
}

/// The C++ that applies case `i`'s EpilogueOp the way the kernel templates wire it.
fn case_source(i: usize, spec: &KernelSpec) -> String {
    let epilogue = sm80::render_epilogue(spec).unwrap_or_else(|e| panic!("{e}"));
    let (_, ctx) = sm80::context(spec, "k").unwrap();
    let l = ctx.epilogue;
    let beta = match l.beta {
        Beta::Zero => "0.f",
        Beta::Arg => "beta",
        Beta::One => "1.f",
    };
    let body = match l.kind {
        EpilogueKind::LinearCombination => {
            let source = match l.c_operand {
                COperand::None => "kZero",
                COperand::Source => "c",
                COperand::Bias => "bias",
            };
            format!("      x[j] = {source}[i + j];\n    }}\n    out = op.is_source_needed() ? op(a, x) : op(a);\n")
        }
        EpilogueKind::ResidualBlock => {
            let bias = if l.reads_bias { "bias" } else { "kZero" };
            format!("      x[j] = c[i + j];\n      b[j] = {bias}[i + j];\n    }}\n    op(out, t, a, x, b);\n")
        }
    };
    format!(
        "namespace case_{i} {{\n\
         using ElementC = float;\nusing ElementAccumulator = float;\nusing ElementCompute = float;\n\
         constexpr int kAlignmentC = 4;\n{epilogue}\n\
         void run(float const *acc, float const *c, float const *bias, float alpha, float beta, float *d) {{\n\
         \x20 EpilogueOp op(EpilogueOp::Params(alpha, {beta}));\n\
         \x20 for (int i = 0; i < {N}; i += 4) {{\n\
         \x20   cutlass::Array<float, 4> a, x, b, t, out;\n\
         \x20   for (int j = 0; j < 4; ++j) {{\n\
         \x20     a[j] = acc[i + j];\n{body}\
         \x20   for (int j = 0; j < 4; ++j) {{\n\
         \x20     d[i + j] = out[j];\n\
         \x20   }}\n\
         \x20 }}\n\
         }}\n\
         }}  // namespace case_{i}\n"
    )
}

#[test]
fn rendered_epilogues_compute_what_the_tree_says() {
    let tc = Toolchain::discover().unwrap_or_else(|e| panic!("{e}"));
    let mut activations = Activation::all();
    // Other parameters than the defaults, and an open-ended clip.
    activations.push(Activation::HardSigmoid { alpha: (1.0f32 / 6.0).into(), beta: 0.25.into() });
    activations.push(Activation::LeakyRelu { alpha: 0.2.into() });
    activations.push(Activation::Clip { min: (-1.5).into(), max: f32::INFINITY.into() });
    let mut cases: Vec<KernelSpec> = Vec::new();
    for &a in &activations {
        for (beta_source, bias, residual) in [
            (false, false, None),
            (true, false, None),
            (false, true, None),
            (true, true, None),
            (false, false, Some(ResidualAt::BeforeActivation)),
            (false, true, Some(ResidualAt::BeforeActivation)),
            (false, false, Some(ResidualAt::AfterActivation)),
            (false, true, Some(ResidualAt::AfterActivation)),
        ] {
            let t = tile(F32, [128, 128, 16], [64, 64, 16], 3);
            cases.push(gemm(types(F32, F32, F32), [ROW; 3], 4, t, epilogue(beta_source, bias, a, residual)));
        }
    }

    let (acc, c, bias) = inputs();
    let mut src = String::from("#include <cstdio>\n");
    for h in sm80::INCLUDES {
        let _ = writeln!(src, "#include <{h}>");
    }
    src += &array("kAcc", &acc);
    src += &array("kC", &c);
    src += &array("kBias", &bias);
    src += &array("kZero", &[0.0; N]);
    for (i, spec) in cases.iter().enumerate() {
        src += &case_source(i, spec);
    }
    src += &format!("int main() {{\n  float d[{N}];\n");
    for i in 0..cases.len() {
        let _ = writeln!(
            src,
            "  case_{i}::run(kAcc, kC, kBias, {ALPHA:?}f, {BETA:?}f, d);\n  for (int j = 0; j < {N}; ++j) printf(\"{i} %d %.9g\\n\", j, d[j]);"
        );
    }
    src += "  return 0;\n}\n";

    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("host_epilogue_sm80");
    std::fs::create_dir_all(&dir).unwrap();
    let (cu, obj, exe) = (dir.join("epilogues.cu"), dir.join("epilogues.o"), dir.join("epilogues"));
    std::fs::write(&cu, &src).unwrap();
    let compiled = tc.compile(&cu, &obj).arch(Arch::Sm80).run().unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{} epilogues compiled for the host in {:.1}s", cases.len(), compiled.elapsed.as_secs_f64());
    let link = Command::new(tc.nvcc()).arg(&obj).arg("-o").arg(&exe).output().unwrap();
    assert!(link.status.success(), "linking failed: {}", String::from_utf8_lossy(&link.stderr));
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success());

    let out = String::from_utf8(run.stdout).unwrap();
    let mut checked = 0;
    let mut failures = Vec::new();
    for line in out.lines() {
        let mut f = line.split_whitespace();
        let (i, j): (usize, usize) = (f.next().unwrap().parse().unwrap(), f.next().unwrap().parse().unwrap());
        let got: f64 = f.next().unwrap().parse().unwrap();
        let env = EvalEnv {
            acc: acc[j] as f64,
            alpha: ALPHA as f64,
            beta: BETA as f64,
            source: c[j] as f64,
            bias: bias[j] as f64,
        };
        let want = cases[i].epilogue.expr.eval(&env);
        if got.is_nan() || (got - want).abs() > 2e-5 * (1.0 + want.abs()) {
            failures.push(format!(
                "{}: acc {} c {} bias {}: got {got}, want {want}",
                cases[i].epilogue.name(),
                acc[j],
                c[j],
                bias[j]
            ));
        }
        checked += 1;
    }
    assert_eq!(checked, cases.len() * N);
    assert!(
        failures.is_empty(),
        "{} mismatches, first ones:\n{}",
        failures.len(),
        failures[..failures.len().min(20)].join("\n")
    );
}
