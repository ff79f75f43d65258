"""CPU references (numpy, float64) and the tolerance policy (bench/README.md, "Tolerance").

The epilogue here must equal Bolt's `Expr::eval` (codegen/src/epilogue.rs): the package carries
sample points of it (`epilogue_samples`) and `check_epilogue_samples` compares, so a drift
between this file and the Rust semantics fails the kernels suite, dry run included.
"""

import math

import numpy as np

# ---- tolerance policy ------------------------------------------------------------------------
# f16 output, f32 accumulate. One rounding of the output to f16 is 2^-11 relative; CUTLASS's
# epilogue evaluates activations with fast approximations (tanh, exp, erf) in f32, about 1e-4
# relative. Elementwise bound: |out - ref| <= ATOL + RTOL * |ref| with RTOL = 2^-9 (4 output
# ulps) and ATOL = 2^-10 for values near zero (inputs are scaled so that |acc| is O(1)); f32
# accumulation-order differences are ~sqrt(K) * 2^-24, far below. Chains (b2b) round an
# intermediate to f16 too: a tie flipping there moves the next layer by ~1 ulp of O(1) values,
# so they get CHAIN_FACTOR times the bound. Normwise ||out - ref|| / ||ref|| must stay under
# NORMWISE (10x the expected ~3e-4 of f16 rounding). NaN/Inf or an element still holding the
# poison value never passes.
RTOL = 2.0 ** -9
ATOL = 2.0 ** -10
CHAIN_FACTOR = 4.0
NORMWISE = 3e-3

POLICY = {
    "elementwise": "|out - ref| <= atol + rtol * |ref| for every element",
    "rtol": RTOL, "atol": ATOL, "normwise_max": NORMWISE, "chain_factor": CHAIN_FACTOR,
    "reference": "numpy float64 on the f16-quantized inputs, epilogue in float64 (= Expr::eval), "
                 "chain intermediates rounded to f16 as the kernels store them",
    "inputs": "uniform [-1, 1) activations, weights scaled by K^-1/2, bias in [-0.5, 0.5), fresh per case",
    "poison": "outputs filled with NaN before the run: an unwritten element fails",
}


def tolerance(layers=1):
    f = CHAIN_FACTOR if layers > 1 else 1.0
    return {"rtol": RTOL * f, "atol": ATOL * f, "normwise_max": NORMWISE * f}


def compare(out, ref, layers=1):
    """Errors of `out` (any float array) against `ref` (float64) under the policy."""
    tol = tolerance(layers)
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if out.shape != ref.shape:
        raise ValueError(f"output shape {out.shape} != reference shape {ref.shape}")
    finite = np.isfinite(out)
    err = np.abs(np.where(finite, out, 0.0) - ref)
    bound = tol["atol"] + tol["rtol"] * np.abs(ref)
    nonfinite = int(out.size - finite.sum())
    violations = int((err > bound).sum()) + nonfinite
    rel = err / np.maximum(np.abs(ref), tol["atol"])
    ref_norm = float(np.linalg.norm(ref)) or 1.0
    normwise = float(np.linalg.norm(err)) / ref_norm
    worst = int(np.argmax(err - bound)) if out.size else 0
    return {
        "max_abs_err": float(err.max()) if out.size else 0.0,
        "max_rel_err": float(rel.max()) if out.size else 0.0,
        "normwise_rel_err": normwise,
        "nonfinite": nonfinite,
        "violations": violations,
        "worst_index": list(np.unravel_index(worst, out.shape)) if out.size else [],
        **tol,
        "ok": bool(violations == 0 and normwise <= tol["normwise_max"]),
    }


# ---- epilogue ----------------------------------------------------------------------------------
def _erf(x):
    v = np.vectorize(math.erf, otypes=[np.float64])
    return v(x)


def activation(name, params, x):
    x = np.asarray(x, dtype=np.float64)
    if name == "identity":
        return x
    if name == "relu":
        return np.maximum(x, 0.0)
    if name == "gelu_erf":
        return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))
    if name == "gelu_tanh":
        c = math.sqrt(2.0 / math.pi)
        return 0.5 * x * (1.0 + np.tanh(c * (x + 0.044715 * x ** 3)))
    if name == "hardswish":
        return x * np.clip(x / 6.0 + 0.5, 0.0, 1.0)
    if name == "hardsigmoid":
        return np.clip(params["alpha"] * x + params["beta"], 0.0, 1.0)
    if name == "softplus":
        return np.maximum(x, 0.0) + np.log1p(np.exp(-np.abs(x)))
    if name == "sigmoid":
        return 1.0 / (1.0 + np.exp(-x))
    if name == "silu":
        return x / (1.0 + np.exp(-x))
    if name == "tanh":
        return np.tanh(x)
    if name == "leaky_relu":
        return np.where(x >= 0.0, x, params["alpha"] * x)
    if name == "clip":
        return np.minimum(np.maximum(x, params["min"]), params["max"])
    raise ValueError(f"unknown activation {name!r}")


def epilogue(form, acc, alpha=1.0, beta=0.0, source=None, bias=None):
    """act(alpha*acc [+ beta*C] [+ bias] [+ residual]) [+ residual] in float64."""
    x = alpha * np.asarray(acc, dtype=np.float64)
    if form["beta_source"]:
        x = x + beta * source
    if form["bias"]:
        x = x + bias
    if form["residual"] == "before":
        x = x + source
    x = activation(form["activation"], form.get("activation_params") or {}, x)
    if form["residual"] == "after":
        x = x + source
    return x


def check_epilogue_samples(samples):
    """Max |numpy epilogue - Expr::eval| over the package's sample points, per epilogue."""
    worst = {}
    for name, s in samples.items():
        pts = np.array(s["points"], dtype=np.float64)
        acc, alpha, beta, src, bias, want = pts.T
        got = np.array([epilogue(s["form"], a, al, be, so, bi) for a, al, be, so, bi in zip(acc, alpha, beta, src, bias)])
        worst[name] = float(np.max(np.abs(got - want)))
    return worst


# ---- GEMM / conv ---------------------------------------------------------------------------------
def f16(x):
    return np.asarray(x, dtype=np.float16).astype(np.float64)


def gemm_acc(a, w):
    """A[M,K] @ W[N,K]^T (weights as nn.Linear stores them), batched over a leading axis."""
    return np.matmul(a, np.swapaxes(w, -1, -2))


def conv2d_acc(x, w, p):
    """NHWC x, KRSC w (C per group), NPQK out, via im2col in float64."""
    n, h, wd, c = x.shape
    k, r, s, cg = w.shape
    g = p["groups"]
    xp = np.pad(x, ((0, 0), (p["pad_h"], p["pad_h"]), (p["pad_w"], p["pad_w"]), (0, 0)))
    out = np.empty((n, p["p"], p["q"], k))
    kg = k // g
    for gi in range(g):
        cols = []
        for ri in range(r):
            for si in range(s):
                y0, x0 = ri * p["dilation_h"], si * p["dilation_w"]
                patch = xp[:, y0:y0 + p["stride_h"] * (p["p"] - 1) + 1:p["stride_h"],
                           x0:x0 + p["stride_w"] * (p["q"] - 1) + 1:p["stride_w"], gi * cg:(gi + 1) * cg]
                cols.append(patch)
        col = np.stack(cols, axis=3).reshape(n * p["p"] * p["q"], r * s * cg)  # (r, s, c) order = KRSC
        wg = w[gi * kg:(gi + 1) * kg].reshape(kg, r * s * cg)
        out[..., gi * kg:(gi + 1) * kg] = (col @ wg.T).reshape(n, p["p"], p["q"], kg)
    return out


def operand_shapes(problem):
    """(A shape, B shape, D shape) of a gemm / conv2d problem as the harness allocates them."""
    if problem["kind"] == "gemm":
        m, n, k, b = problem["m"], problem["n"], problem["k"], problem["batch"]
        lead = (b,) if b > 1 else ()
        return lead + (m, k), lead + (n, k), lead + (m, n)
    p = problem
    return (p["n"], p["h"], p["w"], p["c"]), (p["k"], p["r"], p["s"], p["c"] // p["groups"]), (p["n"], p["p"], p["q"], p["k"])


def random_operands(problem, rng, epilogue_form):
    """f16-representable inputs (float64 arrays): activations U[-1,1), weights scaled by K^-1/2."""
    sa, sb, sd = operand_shapes(problem)
    kdim = sb[-1] * (sb[1] * sb[2] if problem["kind"] == "conv2d" else 1)
    a = f16(rng.uniform(-1, 1, sa))
    b = f16(rng.uniform(-1, 1, sb) / math.sqrt(kdim))
    needs_c = epilogue_form["beta_source"] or epilogue_form["residual"] is not None
    c = f16(rng.uniform(-1, 1, sd)) if needs_c else None
    bias = f16(rng.uniform(-0.5, 0.5, sd[-1])) if epilogue_form["bias"] else None
    return a, b, c, bias


def reference(problem, form, a, b, c, bias, alpha=1.0, beta=1.0):
    acc = gemm_acc(a, b) if problem["kind"] == "gemm" else conv2d_acc(a, b, problem)
    return epilogue(form, acc, alpha, beta, c, bias)


def row_softmax(x):
    """Softmax along the last axis in float64, max-subtracted."""
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def kernel_reference(family, problem, form, a, b, c, bias, alpha=1.0, beta=1.0):
    """What a kernel of `family` writes, in float64, and the scale its output is compared at:
    the epilogue's output (scale 1), or for gemm_softmax the softmax of that output's rows as
    the kernel stores it (f16) times the row width, so its elements are about 1 and the
    tolerance policy measures them like any other output's (multiply the kernel's by it too)."""
    d = reference(problem, form, a, b, c, bias, alpha, beta)
    if family != "gemm_softmax":
        return d, 1.0
    n = d.shape[-1]
    return row_softmax(f16(d)) * n, float(n)


def shrink(problem):
    """A small problem of the same kind and parameters, for CPU-only checks of the checker."""
    p = dict(problem)
    if p["kind"] == "gemm":
        p.update(m=min(p["m"], 64), n=min(p["n"], 48), k=min(p["k"], 96), batch=min(p["batch"], 2))
        p.update(lda=p["k"], ldb=p["k"], ldc=p["n"], ldd=p["n"], batch_stride_a=p["m"] * p["k"],
                 batch_stride_b=p["n"] * p["k"], batch_stride_c=p["m"] * p["n"], batch_stride_d=p["m"] * p["n"])
        return p
    p.update(n=1, h=min(p["h"], 9), w=min(p["w"], 9))
    p["p"] = (p["h"] + 2 * p["pad_h"] - p["dilation_h"] * (p["r"] - 1) - 1) // p["stride_h"] + 1
    p["q"] = (p["w"] + 2 * p["pad_w"] - p["dilation_w"] * (p["s"] - 1) - 1) // p["stride_w"] + 1
    return p


def checker_selftest(problem, form, rng):
    """The comparator on a small instance: the reference computed in float32 and rounded to
    f16 (what a correct kernel returns) must pass; one element off by 16 output ulps and one
    unwritten (NaN) element must each fail. Proves the policy is neither vacuous nor too tight."""
    p = shrink(problem)
    a, b, c, bias = random_operands(p, rng, form)
    ref = reference(p, form, a, b, c, bias, 0.75, 0.5)
    acc32 = (gemm_acc(a.astype(np.float32), b.astype(np.float32)) if p["kind"] == "gemm"
             else conv2d_acc(a, b, p).astype(np.float32))
    good = f16(epilogue(form, acc32.astype(np.float64), 0.75, 0.5, c, bias))
    bad = good.copy().reshape(-1)
    i = int(np.argmax(np.abs(ref).reshape(-1)))
    bad[i] += 16 * 2.0 ** -10 * max(abs(ref.reshape(-1)[i]), 1.0)
    nan = good.copy().reshape(-1)
    nan[0] = np.nan
    r_good = compare(good, ref)
    r_bad = compare(bad.reshape(ref.shape), ref)
    r_nan = compare(nan.reshape(ref.shape), ref)
    return {"shape": {k: v for k, v in p.items() if k != "kind"},
            "rounded_f16_passes": r_good["ok"], "rounded_f16_max_abs_err": r_good["max_abs_err"],
            "off_by_16ulp_fails": not r_bad["ok"], "unwritten_fails": not r_nan["ok"],
            "ok": bool(r_good["ok"] and not r_bad["ok"] and not r_nan["ok"])}
