"""The eight suites. Each takes (ctx, cases) and returns per-case records; `ctx.dry` selects the
host path (can_implement, CPU reference checks, no timings) or the GPU path (torch, CUDA events).
"""

import math
import time
import traceback

import numpy as np

from . import reference as ref
from .abi import STATUS
from .common import geomean

MEMCHECK_FAMILIES = ["gemm", "batched_gemm", "gemm_softmax", "conv2d_fprop", "conv2d_fprop_unit_stride", "conv2d_group_single",
                     "conv2d_group_multiple", "conv2d_depthwise"]


class Ctx:
    def __init__(self, package, libs, dry, timer=None, compile_mode="max-autotune", budget_s=None, seed=0):
        self.package, self.libs, self.dry, self.timer = package, libs, dry, timer
        self.compile_mode, self.budget_s, self.seed = compile_mode, budget_s, seed
        self.start = time.monotonic()
        self.peak = None  # TFLOP/s, set on the GPU path

    def over_budget(self):
        return self.budget_s is not None and time.monotonic() - self.start > self.budget_s


def base_record(case):
    keep = ("id", "suite", "workload", "source", "family", "problem", "epilogue", "flops", "bytes", "derived_from",
            "arch", "padded", "residency", "original_problem")
    r = {k: case[k] for k in keep if k in case}
    r["package_status"] = case.get("status")
    r["package_reason"] = case.get("reason", "")
    return r


def host_checks(ctx, case, kernels=None, problem=None):
    """can_implement of every packaged kernel of `case` on its (Bolt-side) problem."""
    kernels = case.get("kernels", []) if kernels is None else kernels
    problem = problem or (case.get("padded") or {}).get("problem") or case.get("problem")
    out = {}
    for k in kernels:
        s = ctx.libs.can_implement(k, problem)
        out[k["symbol"]] = STATUS.get(s, str(s))
    return out


def finish(rec, checks, extra_fail=None):
    """Status of a record from its host checks (dry run) or GPU checks."""
    bad = [f"{s}: can_implement = {v}" for s, v in checks.items() if v != "ok"]
    if extra_fail:
        bad.append(extra_fail)
    if rec["package_status"] in ("not-available", "not-built") and not checks:
        rec["status"] = rec["package_status"]
        rec["reason"] = rec["package_reason"]
    elif bad:
        rec["status"] = "failed"
        rec["reason"] = "; ".join(bad)
    else:
        rec["status"] = "dry-ok" if rec.get("mode") == "dry-run" else "ok"
        rec.setdefault("reason", "")
    return rec


def guarded(rec, checks, fn, *args):
    """fn(*args), the GPU part of one case: an exception there (a launch that fails, a CUDA
    error, a harness bug) fails that case with its reason, and the suite goes on."""
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001
        rec["traceback"] = traceback.format_exc()[-3000:]
        return finish(rec, checks, f"{type(e).__name__}: {e}")


# ================================================================================ GPU helpers
def _torch():
    import torch
    import torch.nn.functional as F
    return torch, F


def torch_epilogue(form, acc, alpha=1.0, beta=1.0, c=None, bias=None):
    """The epilogue in torch (f32 math on f16 tensors gives f16 like eager PyTorch would)."""
    torch, F = _torch()
    x = acc if alpha == 1.0 else acc * alpha
    if form["beta_source"]:
        x = x + beta * c
    if form["bias"]:
        x = x + bias
    if form["residual"] == "before":
        x = x + c
    a, p = form["activation"], form.get("activation_params") or {}
    x = {"identity": lambda v: v, "relu": F.relu, "gelu_erf": F.gelu, "gelu_tanh": lambda v: F.gelu(v, approximate="tanh"),
         "hardswish": F.hardswish, "softplus": F.softplus, "sigmoid": torch.sigmoid, "silu": F.silu, "tanh": torch.tanh,
         "hardsigmoid": lambda v: torch.clamp(p.get("alpha", 0.2) * v + p.get("beta", 0.5), 0, 1),
         "leaky_relu": lambda v: F.leaky_relu(v, p.get("alpha", 0.01)),
         "clip": lambda v: torch.clamp(v, p.get("min", 0.0), p.get("max", 6.0))}[a](x)
    if form["residual"] == "after":
        x = x + c
    return x


class Operands:
    """f16 device tensors of one gemm / conv problem (A, B as [N, K] / KRSC, optional C, bias)
    plus the views torch needs; `bolt_problem` may be a padded copy (zero-filled pads)."""

    def __init__(self, problem, form, gen, bolt_problem=None):
        torch, _ = _torch()
        sa, sb, sd = ref.operand_shapes(problem)
        kdim = sb[-1] * (sb[1] * sb[2] if problem["kind"] == "conv2d" else 1)
        dev, h = "cuda", torch.float16
        u = lambda shape, scale=1.0: ((torch.rand(shape, device=dev, generator=gen) * 2 - 1) * scale).to(h)  # noqa
        self.problem, self.form = problem, form
        self.a, self.b = u(sa), u(sb, kdim ** -0.5)
        needs_c = form["beta_source"] or form["residual"] is not None
        self.c = u(sd) if needs_c else None
        self.bias = u((sd[-1],), 0.5) if form["bias"] else None
        self.bolt_problem = bolt_problem or problem
        self._bolt = None

    def bolt_tensors(self):
        """(A, B, C, bias, D) in the Bolt problem's shapes: the originals, or zero-padded copies."""
        if self._bolt is None:
            torch, F = _torch()
            if self.bolt_problem is self.problem:
                self._bolt = [self.a, self.b, self.c, self.bias]
            else:
                sa, sb, sd = ref.operand_shapes(self.bolt_problem)

                def pad(t, shape):
                    if t is None:
                        return None
                    out = torch.zeros(shape, dtype=t.dtype, device=t.device)
                    out[tuple(slice(0, n) for n in t.shape)] = t
                    return out
                self._bolt = [pad(self.a, sa), pad(self.b, sb), pad(self.c, sd), pad(self.bias, (sd[-1],))]
            _, _, sd = ref.operand_shapes(self.bolt_problem)
            self._bolt.append(torch.full(sd, float("nan"), dtype=torch.float16, device="cuda"))
        return self._bolt

    def crop(self, d):
        """The original problem's region of a (padded) output."""
        _, _, sd = ref.operand_shapes(self.problem)
        return d[tuple(slice(0, n) for n in sd)]

    def torch_fn(self, alpha=1.0, beta=1.0):
        """The op in eager PyTorch: torch.matmul (cuBLAS) / conv2d channels_last (cuDNN), then
        the epilogue as separate element-wise ops."""
        torch, F = _torch()
        p, form = self.problem, self.form
        if p["kind"] == "gemm":
            a, b = self.a, self.b

            def fn():
                return torch_epilogue(form, torch.matmul(a, b.transpose(-1, -2)), alpha, beta, self.c, self.bias)
            return fn
        x = self.a.permute(0, 3, 1, 2)  # NHWC memory = channels_last NCHW view, no copy
        w = self.b.permute(0, 3, 1, 2)
        c = self.c.permute(0, 3, 1, 2) if self.c is not None else None
        bias = self.bias.view(1, -1, 1, 1) if self.bias is not None else None

        def conv():
            y = F.conv2d(x, w, None, (p["stride_h"], p["stride_w"]), (p["pad_h"], p["pad_w"]),
                         (p["dilation_h"], p["dilation_w"]), p["groups"])
            return torch_epilogue(form, y, alpha, beta, c, bias).permute(0, 2, 3, 1)
        return conv

    def reference(self, alpha=1.0, beta=1.0):
        """f32 PyTorch on the same f16 inputs (TF32 off), the check of timed kernels."""
        torch, F = _torch()
        p, form = self.problem, self.form
        f = lambda t: None if t is None else t.float()  # noqa: E731
        if p["kind"] == "gemm":
            acc = torch.matmul(self.a.float(), self.b.float().transpose(-1, -2))
            return torch_epilogue(form, acc, alpha, beta, f(self.c), f(self.bias))
        acc = F.conv2d(self.a.float().permute(0, 3, 1, 2), self.b.float().permute(0, 3, 1, 2), None,
                       (p["stride_h"], p["stride_w"]), (p["pad_h"], p["pad_w"]),
                       (p["dilation_h"], p["dilation_w"]), p["groups"]).permute(0, 2, 3, 1)
        return torch_epilogue(form, acc, alpha, beta, f(self.c), f(self.bias))


def compare_gpu(out, want, layers=1):
    """reference.compare's statistics, computed on the GPU in float64."""
    torch, _ = _torch()
    tol = ref.tolerance(layers)
    o, r = out.double(), want.double()
    finite = torch.isfinite(o)
    err = (torch.where(finite, o, torch.zeros_like(o)) - r).abs()
    bound = tol["atol"] + tol["rtol"] * r.abs()
    nonfinite = int((~finite).sum())
    violations = int((err > bound).sum()) + nonfinite
    normwise = float(err.norm() / (r.norm() if float(r.norm()) else 1.0))
    return {"max_abs_err": float(err.max()), "max_rel_err": float((err / r.abs().clamp_min(tol["atol"])).max()),
            "normwise_rel_err": normwise, "nonfinite": nonfinite, "violations": violations, **tol,
            "ok": bool(violations == 0 and normwise <= tol["normwise_max"])}


def bolt_runner(ctx, kernel, ops, alpha=1.0, beta=1.0):
    torch, _ = _torch()
    from .abi import BoltArgs
    a, b, c, bias, d = ops.bolt_tensors()
    d.fill_(float("nan"))  # poison: an element the kernel does not write fails the check
    ptr = lambda t: t.data_ptr() if t is not None else None  # noqa: E731
    args = BoltArgs(a=ptr(a), b=ptr(b), c=ptr(c), bias=ptr(bias), d=ptr(d), alpha=alpha, beta=beta)
    ws = ctx.libs.workspace_size(kernel, ops.bolt_problem)
    wbuf = torch.empty(ws, dtype=torch.uint8, device="cuda") if ws else None
    run = ctx.libs.runner(kernel, ops.bolt_problem, args, wbuf.data_ptr() if ws else 0, ws,
                          torch.cuda.current_stream().cuda_stream)
    run._keep = (args, wbuf)  # the struct and workspace must outlive the callable
    return run, d


def tune_and_check(ctx, case, ops, kernels, alpha=1.0, beta=1.0):
    """Bolt's tuning step on the GPU: time each packaged top-k kernel, keep the fastest, and
    check its output (NaN-poisoned before the run) against the f32 reference."""
    torch, _ = _torch()
    tried, best = [], None
    for k in kernels:
        st = ctx.libs.can_implement(k, ops.bolt_problem)
        if st != 0:
            tried.append({"symbol": k["symbol"], "can_implement": STATUS.get(st, str(st))})
            continue
        run, d = bolt_runner(ctx, k, ops, alpha, beta)
        t = ctx.timer(run)
        tried.append({"symbol": k["symbol"], "tile": k.get("tile"), "median_us": t["median_us"]})
        if best is None or t["median_us"] < best[1]["median_us"]:
            best = (k, t)
    if best is None:
        return None, tried, None
    run, d = bolt_runner(ctx, best[0], ops, alpha, beta)  # fresh NaN-poisoned output
    run()
    torch.cuda.synchronize()
    numerics = compare_gpu(ops.crop(d), ops.reference(alpha, beta))
    return {"symbol": best[0]["symbol"], "tile": best[0].get("tile"), "arch": best[0].get("arch"),
            "ptx_jit": best[0].get("ptx_jit"), **best[1]}, tried, numerics


def compiled(ctx, fn):
    """torch.compile(mode=ctx.compile_mode) of fn, with its compile seconds (first call)."""
    torch, _ = _torch()
    t0 = time.monotonic()
    cf = torch.compile(fn, mode=ctx.compile_mode)
    cf()
    torch.cuda.synchronize()
    return cf, time.monotonic() - t0


def perf(flops, t, peak):
    if not t:
        return None, None
    tf = flops / (t["median_us"] * 1e-6) / 1e12
    return tf, (100.0 * tf / peak if peak else None)


# ================================================================================ suite 1: kernels
def suite_kernels(ctx, cases):
    """Every family x epilogue kind against the CPU reference (numpy float64)."""
    samples = ref.check_epilogue_samples(ctx.package["epilogue_samples"])
    worst = max(samples.values()) if samples else 0.0
    records, rng = [], np.random.default_rng(ctx.seed)
    for case in cases:
        rec = base_record(case)
        rec["mode"] = "dry-run" if ctx.dry else "gpu"
        rec["tolerance"] = ref.tolerance(1)
        if case.get("status") != "ready":
            records.append(finish(rec, {}))
            continue
        checks = host_checks(ctx, case)
        if ctx.dry:
            rec["checker_selftest"] = ref.checker_selftest(case["problem"], case["epilogue"], rng)
            fail = None if rec["checker_selftest"]["ok"] else "checker self-test failed"
            records.append(finish(rec, checks, fail))
            continue
        if ctx.over_budget():
            rec.update(status="skipped", reason="time budget (--budget-s) spent")
            records.append(rec)
            continue
        records.append(guarded(rec, checks, gpu_kernel_case, ctx, case, rec, checks, rng))
    memcheck = {}
    for fam in MEMCHECK_FAMILIES:
        first = next((r["id"] for r in records if r.get("family") == fam and r["status"] in ("ok", "dry-ok")), None)
        if first:
            memcheck[fam] = first
    extra = {"epilogue_reference_vs_expr_eval_max_abs": samples, "epilogue_reference_ok": worst < 1e-9,
             "memcheck_plan": memcheck}
    if worst >= 1e-9:
        records.append({"id": "kernels:epilogue-reference", "status": "failed",
                        "reason": f"numpy epilogue differs from Expr::eval by {worst:g}"})
    return records, extra


def gpu_kernel_case(ctx, case, rec, checks, rng):
    """One kernel on one problem, inputs from the host, output against numpy float64."""
    k = case["kernels"][0]
    a, b, c, bias = ref.random_operands(case["problem"], rng, case["epilogue"])
    want, scale = ref.kernel_reference(case.get("family"), case["problem"], case["epilogue"], a, b, c, bias,
                                       0.75, 0.5)
    torch, _ = _torch()
    dev = lambda x: None if x is None else torch.from_numpy(x.astype(np.float16)).cuda()  # noqa: E731
    ops = Operands.__new__(Operands)
    ops.problem = ops.bolt_problem = case["problem"]
    ops.form, ops._bolt = case["epilogue"], None
    ops.a, ops.b, ops.c, ops.bias = dev(a), dev(b), dev(c), dev(bias)
    run, d = bolt_runner(ctx, k, ops, 0.75, 0.5)
    run()
    torch.cuda.synchronize()
    rec["numerics"] = ref.compare(d.float().cpu().numpy() * scale, want)
    rec["symbol"] = k["symbol"]
    return finish(rec, checks, None if rec["numerics"]["ok"] else "numerics outside tolerance")


# ================================================================================ suites 2: gemm / conv
def suite_gemm_conv(ctx, cases):
    records = []
    for case in cases:
        rec = base_record(case)
        rec["mode"] = "dry-run" if ctx.dry else "gpu"
        rec["analytic_top"] = case.get("analytic", {}).get("top", [])
        if case.get("status") != "ready":
            if ctx.dry or case.get("status") == "not-built":
                records.append(finish(rec, {}))
                continue
        checks = host_checks(ctx, case) if case.get("status") == "ready" else {}
        if ctx.dry:
            records.append(finish(rec, checks))
            continue
        if ctx.over_budget():
            rec.update(status="skipped", reason="time budget (--budget-s) spent")
            records.append(rec)
            continue
        records.append(guarded(rec, checks, gpu_compare, ctx, case, rec, checks))
    return records, {"profiler_truth": profiler_truth(records)}


def profiler_truth(records):
    """How the analytic ranking's first pick fares against the best timed of the packaged
    top-k (`bolt_tried`, in analytic order): how often it is the fastest, and within 10% of it.
    Says nothing of candidates outside the top-k (none is built)."""
    n = first = within = 0
    ratios = []
    for r in records:
        timed = [t for t in r.get("bolt_tried") or [] if "median_us" in t]
        tried = r.get("bolt_tried") or []
        if len(timed) < 2 or not tried or "median_us" not in tried[0]:
            continue
        best = min(t["median_us"] for t in timed)
        ratio = tried[0]["median_us"] / best
        n += 1
        first += ratio == 1.0
        within += ratio <= 1.10
        ratios.append(ratio)
    if not n:
        return {"cases": 0, "note": "no case with two or more timed candidates"}
    return {"cases": n, "top1_fastest": first / n, "top1_within_10pct": within / n,
            "geomean_top1_over_best": geomean(ratios), "worst_top1_over_best": max(ratios)}


def gpu_compare(ctx, case, rec, checks):
    """Bolt (tuned over the packaged top-k) vs eager PyTorch vs torch.compile, one case."""
    torch, _ = _torch()
    gen = torch.Generator(device="cuda").manual_seed(ctx.seed)
    padded = (case.get("padded") or {}).get("problem")
    ops = Operands(case["problem"], case["epilogue"], gen, padded)
    bolt = tried = numerics = None
    if case.get("status") == "ready":
        bolt, tried, numerics = tune_and_check(ctx, case, ops, case["kernels"])
    fn = ops.torch_fn()
    t_torch = ctx.timer(fn)
    rec["torch"] = t_torch
    try:
        cf, secs = compiled(ctx, fn)
        rec["torch_compile"] = {**ctx.timer(cf), "compile_seconds": secs, "mode": ctx.compile_mode}
    except Exception as e:  # noqa: BLE001 - a compile failure is a result, not a harness crash
        rec["torch_compile"] = {"error": f"{type(e).__name__}: {e}"[:400]}
    rec["bolt"], rec["bolt_tried"], rec["numerics"] = bolt, tried, numerics
    for key in ("bolt", "torch", "torch_compile"):
        t = rec.get(key)
        if t and "median_us" in t:
            t["tflops"], t["pct_peak"] = perf(case["flops"], t, ctx.peak)
    if bolt:
        rec["speedup_vs_torch"] = t_torch["median_us"] / bolt["median_us"]
        tc = rec["torch_compile"].get("median_us")
        rec["speedup_vs_torch_compile"] = tc / bolt["median_us"] if tc else None
    fail = None
    if case.get("status") == "ready" and bolt is None:
        fail = "no packaged kernel accepted the problem"
    elif numerics and not numerics["ok"]:
        fail = "numerics outside tolerance"
    return finish(rec, checks, fail)


# ================================================================================ suite 3: epilogue fusion
def suite_epilogue(ctx, cases):
    """Fig. 9: the fused kernel vs the same tiles with the plain epilogue then one separate
    element-wise kernel (bias + activation, one fused PyTorch-compiled kernel as TVM would)."""
    records = []
    for case in cases:
        rec = base_record(case)
        rec["mode"] = "dry-run" if ctx.dry else "gpu"
        if case.get("status") != "ready":
            records.append(finish(rec, {}))
            continue
        checks = host_checks(ctx, case)
        checks.update(host_checks(ctx, case, case.get("unfused_kernels", [])))
        if ctx.dry or ctx.over_budget():
            if not ctx.dry:
                rec.update(status="skipped", reason="time budget (--budget-s) spent")
                records.append(rec)
                continue
            records.append(finish(rec, checks))
            continue
        records.append(guarded(rec, checks, gpu_epilogue, ctx, case, rec, checks))
    sp = [r.get("speedup") for r in records if r.get("speedup")]
    return records, {"geomean_speedup": geomean(sp), "paper": "1.45x GEMM, 1.38x Conv2D average (T4)"}


def gpu_epilogue(ctx, case, rec, checks):
    torch, _ = _torch()
    gen = torch.Generator(device="cuda").manual_seed(ctx.seed)
    ops = Operands(case["problem"], case["epilogue"], gen)
    fused, tried, numerics = tune_and_check(ctx, case, ops, case["kernels"])
    plain_form = {"beta_source": False, "bias": False, "activation": "identity", "activation_params": {},
                  "residual": None, "name": "identity"}
    pops = Operands.__new__(Operands)
    pops.__dict__.update(ops.__dict__)
    pops.form, pops.c, pops.bias, pops._bolt = plain_form, None, None, None
    plain, _, _ = tune_and_check(ctx, case, pops, case.get("unfused_kernels", []))
    rec["fused"], rec["fused_tried"], rec["numerics"], rec["bolt_plain"] = fused, tried, numerics, plain
    if plain:
        _, _, _, _, d = pops.bolt_tensors()
        # NPQK / MN output: the bias broadcasts over the last axis in both families.
        form, bias = case["epilogue"], ops.bias
        ew = lambda: torch_epilogue(form, d, 1.0, 1.0, None, bias)  # noqa: E731
        try:
            ewc, secs = compiled(ctx, ew)
            rec["elementwise"] = {**ctx.timer(ewc), "kernel": "torch.compile of bias + activation", "compile_seconds": secs}
        except Exception as e:  # noqa: BLE001
            rec["elementwise"] = {**ctx.timer(ew), "kernel": f"eager (compile failed: {type(e).__name__})"}
        rec["unfused_us"] = plain["median_us"] + rec["elementwise"]["median_us"]
        if fused:
            rec["speedup"] = rec["unfused_us"] / fused["median_us"]
    rec["torch"] = ctx.timer(ops.torch_fn())
    fail = "numerics outside tolerance" if numerics and not numerics["ok"] else None
    return finish(rec, checks, fail)


# ================================================================================ suite 4: back-to-back
def suite_b2b(ctx, cases):
    records = []
    for case in cases:
        rec = base_record(case)
        rec["mode"] = "dry-run" if ctx.dry else "gpu"
        rec["paper_speedup"] = (case.get("workload_entry") or {}).get("paper_speedup")
        layers = case.get("unfused_layers", [])
        rec["unfused_layers"] = [{"workload": l["workload"], "status": l["status"], "reason": l.get("reason", ""),
                                  "kernels": [k["symbol"] for k in l.get("kernels", [])]} for l in layers]
        checks = {}
        if case.get("status") == "ready":
            checks.update(host_checks(ctx, case))
        for l in layers:
            if l.get("status") == "ready":
                checks.update(host_checks(ctx, l))
        if case.get("status") != "ready" and not checks:
            records.append(finish(rec, {}))
            continue
        if ctx.dry:
            records.append(finish(rec, checks))
            continue
        if ctx.over_budget():
            rec.update(status="skipped", reason="time budget (--budget-s) spent")
            records.append(rec)
            continue
        records.append(guarded(rec, checks, gpu_b2b, ctx, case, rec, checks, layers))
    sp = [r.get("speedup_vs_best_unfused") for r in records if r.get("speedup_vs_best_unfused")]
    return records, {"geomean_speedup_vs_best_unfused": geomean(sp), "paper": "Table 1: 1.24-1.46x, Table 2: 1.10-2.02x (T4)"}


def gpu_b2b(ctx, case, rec, checks, layers):
    torch, F = _torch()
    from .abi import BoltB2bArgs, BoltB2bLayerArgs
    gen = torch.Generator(device="cuda").manual_seed(ctx.seed)
    h, dev = torch.float16, "cuda"
    u = lambda shape, scale=1.0: ((torch.rand(shape, device=dev, generator=gen) * 2 - 1) * scale).to(h)  # noqa
    fused_kernel = case["kernels"][0] if case.get("status") == "ready" else None
    p = case.get("problem") or case["original_problem"]
    o = case["original_problem"]
    if o["kind"] == "b2b_gemm":
        m, k, (on0, n1) = o["m"], o["k"], o["n"][:2]
        pn0 = p["n"][0]
        a = u((m, k))
        w0, b0 = torch.zeros(pn0, k, device=dev, dtype=h), torch.zeros(pn0, device=dev, dtype=h)
        w0[:on0], b0[:on0] = u((on0, k), k ** -0.5), u((on0,), 0.5)
        w1 = torch.zeros(n1, pn0, device=dev, dtype=h)
        w1[:, :on0] = u((n1, on0), on0 ** -0.5)
        b1 = u((n1,), 0.5)
        d = torch.full((m, n1), float("nan"), device=dev, dtype=h)
        x_in = a
        if p["k"] != k:
            raise ValueError(f"{case['id']}: padded K {p['k']} != K {k}: not handled")

        def reference():
            x = torch.relu(a.float() @ w0[:on0].float().t() + b0[:on0].float()).to(h)
            return torch.relu(x.float() @ w1[:, :on0].float().t() + b1.float())

        def torch_unfused():
            return F.relu(F.linear(F.relu(F.linear(a, w0[:on0], b0[:on0])), w1[:, :on0], b1))
    else:
        c0, c1 = p["conv"][0], p["conv"][1]
        oc0 = o["conv"][0]
        n, hh, ww, c, k0, k1 = c0["n"], c0["h"], c0["w"], c0["c"], c0["k"], c1["k"]
        oc, ok0 = oc0["c"], oc0["k"]
        x_in = torch.zeros(n, hh, ww, c, device=dev, dtype=h)
        x_in[..., :oc] = u((n, hh, ww, oc))
        w0 = torch.zeros(k0, c0["r"], c0["s"], c, device=dev, dtype=h)
        w0[:ok0, :, :, :oc] = u((ok0, c0["r"], c0["s"], oc), (oc * c0["r"] * c0["s"]) ** -0.5)
        b0 = torch.zeros(k0, device=dev, dtype=h)
        b0[:ok0] = u((ok0,), 0.5)
        w1 = torch.zeros(k1, 1, 1, k0, device=dev, dtype=h)
        w1[..., :ok0] = u((k1, 1, 1, ok0), ok0 ** -0.5)
        b1 = u((k1,), 0.5)
        d = torch.full((n, c1["p"], c1["q"], k1), float("nan"), device=dev, dtype=h)
        stride, pad = (c0["stride_h"], c0["stride_w"]), (c0["pad_h"], c0["pad_w"])
        xa = x_in[..., :oc].permute(0, 3, 1, 2)
        wa = w0[:ok0, :, :, :oc].permute(0, 3, 1, 2)
        wb = w1[..., :ok0].permute(0, 3, 1, 2)

        def reference():
            x = torch.relu(F.conv2d(xa.float(), wa.float(), b0[:ok0].float(), stride, pad)).to(h)
            return torch.relu(F.conv2d(x.float(), wb.float(), b1.float())).permute(0, 2, 3, 1)

        def torch_unfused():
            return F.relu(F.conv2d(F.relu(F.conv2d(xa, wa, b0[:ok0], stride, pad)), wb, b1)).permute(0, 2, 3, 1)

    if fused_kernel:
        args = BoltB2bArgs(a=x_in.data_ptr(), c=None, d=d.data_ptr())
        args.layer[0] = BoltB2bLayerArgs(w0.data_ptr(), b0.data_ptr(), 1.0, 0.0)
        args.layer[1] = BoltB2bLayerArgs(w1.data_ptr(), b1.data_ptr(), 1.0, 0.0)
        run = ctx.libs.runner(fused_kernel, p, args, 0, 0, torch.cuda.current_stream().cuda_stream)
        run()
        torch.cuda.synchronize()
        rec["numerics"] = compare_gpu(d, reference(), layers=2)
        rec["fused"] = {"symbol": fused_kernel["symbol"], **ctx.timer(run)}
    rec["torch_unfused"] = ctx.timer(torch_unfused)
    # Bolt's unfused pair: each layer's best packaged kernel with its bias + ReLU epilogue,
    # timed on its own inputs (values do not change the time; each is checked on its own).
    times = []
    for lc in layers:
        if lc.get("status") != "ready":
            break
        lops = Operands(lc["problem"], lc["epilogue"], gen, (lc.get("padded") or {}).get("problem"))
        best, _, num = tune_and_check(ctx, lc, lops, lc["kernels"])
        if not best:
            break
        times.append({**best, "numerics_ok": (num or {}).get("ok")})
    if len(times) == 2:
        rec["bolt_unfused"] = {"layers": times, "median_us": times[0]["median_us"] + times[1]["median_us"]}
    cands = [rec["torch_unfused"]["median_us"]] + ([rec["bolt_unfused"]["median_us"]] if "bolt_unfused" in rec else [])
    rec["best_unfused_us"] = min(cands)
    if rec.get("fused"):
        rec["speedup_vs_best_unfused"] = rec["best_unfused_us"] / rec["fused"]["median_us"]
    fail = "numerics outside tolerance" if rec.get("numerics") and not rec["numerics"]["ok"] else None
    return finish(rec, checks, fail)


# ================================================================================ suite 5: padding
def suite_padding(ctx, cases):
    records = []
    for case in cases:
        rec = base_record(case)
        rec["mode"] = "dry-run" if ctx.dry else "gpu"
        variants = {"unpadded_sm80": case, "padded_sm80": case.get("padded_sm80"), "padded_primary": case.get("padded_primary")}
        rec["variants"] = {k: {"status": v.get("status"), "reason": v.get("reason", ""),
                               "alignment": v.get("alignment"), "kernels": [x["symbol"] for x in v.get("kernels", [])]}
                           for k, v in variants.items() if v}
        checks = {}
        for v in variants.values():
            if v and v.get("status") == "ready":
                checks.update(host_checks(ctx, v))
        if not checks or ctx.dry:
            records.append(finish(rec, checks))
            continue
        if ctx.over_budget():
            rec.update(status="skipped", reason="time budget (--budget-s) spent")
            records.append(rec)
            continue
        records.append(guarded(rec, checks, gpu_padding, ctx, case, rec, checks, variants))
    return records, {"paper": "Table 3: padded 1.60-1.99x, padding cost 9-24% (T4)"}


def gpu_padding(ctx, case, rec, checks, variants):
    torch, F = _torch()
    gen = torch.Generator(device="cuda").manual_seed(ctx.seed)
    ops = Operands(case["problem"], case["epilogue"], gen)
    fail = None
    for key, v in variants.items():
        if not v or v.get("status") != "ready":
            continue
        o = ops if key == "unpadded_sm80" else Operands.__new__(Operands)
        if o is not ops:
            o.__dict__.update(ops.__dict__)
            o.bolt_problem, o._bolt = v["problem"], None
        best, tried, num = tune_and_check(ctx, v, o, v["kernels"])
        rec["variants"][key].update(bolt=best, numerics=num)
        if num and not num["ok"]:
            fail = f"{key}: numerics outside tolerance"
    cpad = case["padded_sm80"]["problem"]["c"] - case["problem"]["c"]
    rec["pad_copy"] = ctx.timer(lambda: F.pad(ops.a, (0, cpad)))
    un = (rec["variants"]["unpadded_sm80"].get("bolt") or {}).get("median_us")
    pd = (rec["variants"].get("padded_sm80", {}).get("bolt") or {}).get("median_us")
    if un and pd:
        rec["speedup_padded"] = un / pd
        rec["speedup_padded_incl_copy"] = un / (pd + rec["pad_copy"]["median_us"])
        rec["pad_cost_pct"] = 100.0 * rec["pad_copy"]["median_us"] / (pd + rec["pad_copy"]["median_us"])
    return finish(rec, checks, fail)


# ================================================================================ suite 6: end to end
def suite_e2e(ctx, cases):
    """ResNet-50 (batch 32) and BERT-base (32 x 128): PyTorch eager and torch.compile on the GPU;
    ONNX Runtime + Bolt is checked for a GPU device and reported as not available while the
    plugin has only its CPU reference device; tuning time from the package (analytic, host)."""
    records = []
    ort = ort_bolt_check(ctx)
    tuning = {t["model"]: t for t in ctx.package.get("e2e_tuning", [])}
    for model in ("resnet50", "bert_base"):
        rec = {"id": f"e2e:{model}", "suite": "e2e", "workload": model, "mode": "dry-run" if ctx.dry else "gpu",
               "batch": "32x3x224x224" if model == "resnet50" else "32x128", "ort_bolt": ort,
               "tuning": tuning.get(model, {"status": "not-available", "reason": "not in the package"}),
               "tuning_note": "Bolt's analytic tuning (plan + rank every kernel) timed on the packaging host; "
                              "GPU-measured tuning needs bolt-tune --features cuda and a kernel library on the device"}
        if ctx.dry:
            rec["status"], rec["reason"] = "dry-ok", "PyTorch timings need the GPU"
            records.append(rec)
            continue
        try:
            fn, flops = torch_model(model)
            rec["torch"] = ctx.timer(fn)
            cf, secs = compiled(ctx, fn)
            rec["torch_compile"] = {**ctx.timer(cf), "compile_seconds": secs, "mode": ctx.compile_mode}
            rec["flops"] = flops
            rec["status"], rec["reason"] = "ok", ""
        except Exception as e:  # noqa: BLE001 - a missing torchvision/transformers is a result
            rec["status"], rec["reason"] = "not-available", f"{type(e).__name__}: {e}"[:400]
        records.append(rec)
    return records, {"ort_bolt": ort}


def torch_model(name):
    torch, _ = _torch()
    torch.manual_seed(0)
    if name == "resnet50":
        import torchvision
        m = torchvision.models.resnet50(weights=None).cuda().half().eval().to(memory_format=torch.channels_last)
        x = torch.randn(32, 3, 224, 224, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
        flops = 2 * 4.09e9 * 32  # 4.09 GMACs per 224x224 image
    else:
        import transformers
        cfg = transformers.BertConfig()  # BERT-base: 12 layers, 768 hidden, 12 heads
        m = transformers.BertModel(cfg).cuda().half().eval()
        x = torch.randint(0, cfg.vocab_size, (32, 128), device="cuda")
        flops = 2 * 32 * 128 * 12 * (4 * 768 * 768 + 2 * 768 * 3072) + 2 * 32 * 12 * 2 * 128 * 128 * 768
    def fn():
        with torch.no_grad():
            return m(x)
    return fn, flops


def ort_bolt_check(ctx):
    """Asks the ONNX Runtime plugin for its GPU device on a one-Gemm model; reports the answer."""
    import os
    import pathlib
    import sys
    pkg = pathlib.Path(ctx.libs.root)
    plugin_py = pkg / "plugin" / "python"
    lib = pkg / "plugin" / "libbolt_plugin.so"
    if not lib.is_file():
        return {"status": "not-available", "reason": f"{lib} not in the package"}
    try:
        import onnx
        import onnxruntime  # noqa: F401
        from onnx import TensorProto, helper
    except ImportError as e:
        return {"status": "not-available", "reason": f"onnx/onnxruntime not importable: {e}"}
    os.environ["BOLT_LIBRARY"] = str(lib)
    sys.path.insert(0, str(plugin_py))
    import tempfile
    try:
        import bolt_ort
    except ImportError as e:
        return {"status": "not-available", "reason": f"bolt_ort: {e}"}
    g = helper.make_graph([helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 16])],
                          [helper.make_tensor("w", TensorProto.FLOAT, [16, 16], [0.0] * 256)])
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "gemm.onnx")
        # IR 10: what onnxruntime 1.2x-1.3x read (onnx 1.23 writes 14 by default).
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10), path)
        try:
            bolt_ort.session(path, {"device": "reference"})
            ref_ok = True
        except Exception as e:  # noqa: BLE001
            ref_ok = f"{type(e).__name__}: {e}"[:300]
        try:
            bolt_ort.session(path, {"device": "cuda"})
            return {"status": "unexpected", "reason": "device=cuda created a session: update this suite to time it",
                    "reference_device": ref_ok}
        except Exception as e:  # noqa: BLE001
            return {"status": "not-available", "reference_device": ref_ok,
                    "reason": "the Bolt ORT plugin has only its CPU reference device; device=cuda answers: "
                              + f"{type(e).__name__}: {e}"[:400]}


# ================================================================================ suite 6: attention
def suite_attention(ctx, cases):
    """Fused attention kernels (sm80: example 41; sm90: example 88) against the f64 reference
    and against torch's scaled_dot_product_attention (its flash / cuDNN / efficient backends)."""
    records = []
    for case in cases:
        rec = base_record(case)
        rec["mode"] = "dry-run" if ctx.dry else "gpu"
        rec.update(dtype=case.get("dtype"), mask=case.get("mask"))
        # The probabilities are rounded to the input type before P.V (as flash kernels do): an
        # intermediate rounding, like a chain's.
        rec["tolerance"] = ref.tolerance(2)
        if case.get("status") != "ready":
            records.append(finish(rec, {}))
            continue
        checks = host_checks(ctx, case)
        if ctx.dry or any(v != "ok" for v in checks.values()):
            records.append(finish(rec, checks))
            continue
        if ctx.over_budget():
            rec.update(status="skipped", reason="time budget (--budget-s) spent")
            records.append(rec)
            continue
        records.append(guarded(rec, checks, gpu_attention, ctx, case, rec, checks))
    sp = [r.get("speedup_vs_sdpa") for r in records if r.get("speedup_vs_sdpa")]
    return records, {"geomean_speedup_vs_sdpa": geomean(sp)}


def attention_operands(case, seed):
    """Q, K, V ([B, H, S, D], normal), the key-padding mask ([B, S], every other sequence with
    its last quarter of keys masked) or None, on the GPU in the case's dtype."""
    torch, _ = _torch()
    p = case["problem"]
    b, h, s, d = p["batch"], p["heads"], p["seq_q"], p["head_dim"]
    dt = {"f16": torch.float16, "bf16": torch.bfloat16}[case["dtype"]]
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = (torch.randn((b, h, s, d), device="cuda", generator=gen).to(dt) for _ in range(3))
    mask = None
    if case.get("mask") == "key_padding":
        mask = torch.zeros((b, s), device="cuda", dtype=dt)
        mask[1::2, s - s // 4:] = -1e4
    return q, k, v, mask


def attention_runner(ctx, case, kern, q, k, v, mask):
    """A launcher of `kern` on the operands, and its NaN-poisoned output."""
    torch, _ = _torch()
    from .abi import BoltAttentionArgs
    p = case["problem"]
    o = torch.full_like(q, float("nan"))
    args = BoltAttentionArgs(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(),
                             bias=mask.data_ptr() if mask is not None else None, o=o.data_ptr())
    ws = ctx.libs.workspace_size(kern, p)
    wbuf = torch.empty(max(ws, 1), dtype=torch.uint8, device="cuda")
    run = ctx.libs.runner(kern, p, args, wbuf.data_ptr() if ws else 0, ws, torch.cuda.current_stream().cuda_stream)
    run._keep = (args, wbuf)  # the struct and workspace must outlive the callable
    return run, o


def gpu_attention(ctx, case, rec, checks):
    torch, F = _torch()
    p = case["problem"]
    q, k, v, mask = attention_operands(case, ctx.seed)
    scale = p["scale"]

    causal = case.get("mask") == "causal"

    def reference():
        sc = (q.double() @ k.double().transpose(-1, -2)) * scale
        if mask is not None:
            sc = sc + mask.double()[:, None, None, :]
        if causal:  # query i sees keys j <= i
            sc = sc.masked_fill(torch.ones(sc.shape[-2:], dtype=torch.bool, device="cuda").triu(1), float("-inf"))
        return torch.softmax(sc, dim=-1) @ v.double()

    want = reference()
    rec["kernels"] = []
    bad = []
    for kern in case["kernels"]:
        run, o = attention_runner(ctx, case, kern, q, k, v, mask)
        run()
        torch.cuda.synchronize()
        num = compare_gpu(o, want, layers=2)
        t = ctx.timer(run)
        tf, pct = perf(case["flops"], t, ctx.peak)
        rec["kernels"].append({"symbol": kern["symbol"], "arch": kern["arch"], "ptx_jit": kern.get("ptx_jit"),
                               "numerics": num, "tflops": tf, "pct_peak": pct, **t})
        if not num["ok"]:
            bad.append(f"{kern['symbol']}: numerics outside tolerance")
    am = mask[:, None, None, :] if mask is not None else None
    rec["sdpa"] = ctx.timer(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=am, scale=scale, is_causal=causal))
    best = min(rec["kernels"], key=lambda r: r["median_us"])
    rec["bolt"] = {"symbol": best["symbol"], "arch": best["arch"], "median_us": best["median_us"],
                   "tflops": best["tflops"], "pct_peak": best["pct_peak"]}
    rec["speedup_vs_sdpa"] = rec["sdpa"]["median_us"] / best["median_us"]
    by_arch = {r["arch"]: r["median_us"] for r in rec["kernels"]}
    if "sm80" in by_arch and "sm90" in by_arch:
        rec["sm90_speedup_vs_sm80"] = by_arch["sm80"] / by_arch["sm90"]
    return finish(rec, checks, "; ".join(bad) or None)


SUITE_FUNCS = {"kernels": suite_kernels, "gemm": suite_gemm_conv, "conv": suite_gemm_conv,
               "epilogue": suite_epilogue, "b2b": suite_b2b, "padding": suite_padding, "attention": suite_attention,
               "e2e": suite_e2e}


def headline(suite, r):
    """One Markdown row per record."""
    t = lambda k: (r.get(k) or {}).get("median_us")  # noqa: E731
    if suite == "kernels":
        n = r.get("numerics") or {}
        st = r.get("checker_selftest") or {}
        return [r["id"], r["status"], n.get("max_abs_err"), n.get("max_rel_err"), r.get("tolerance", {}).get("rtol"),
                st.get("ok"), r.get("reason", "")[:80]]
    if suite in ("gemm", "conv"):
        b = r.get("bolt") or {}
        return [r["id"], r["status"], b.get("median_us"), b.get("tflops"), b.get("pct_peak"), t("torch"), t("torch_compile"),
                r.get("speedup_vs_torch"), r.get("speedup_vs_torch_compile"), r.get("reason", "")[:60]]
    if suite == "epilogue":
        return [r["id"], r["status"], t("fused"), r.get("unfused_us"), r.get("speedup"), t("torch"), r.get("reason", "")[:60]]
    if suite == "b2b":
        return [r["id"], r["status"], t("fused"), (r.get("bolt_unfused") or {}).get("median_us"), t("torch_unfused"),
                r.get("speedup_vs_best_unfused"), r.get("paper_speedup"), r.get("reason", "")[:60]]
    if suite == "attention":
        ks = {k["arch"]: k for k in r.get("kernels", [])}
        nums = [k["numerics"]["max_abs_err"] for k in r.get("kernels", [])]
        return [r["id"], r["status"], (ks.get("sm80") or {}).get("median_us"), (ks.get("sm90") or {}).get("median_us"),
                t("sdpa"), r.get("speedup_vs_sdpa"), (r.get("bolt") or {}).get("pct_peak"), max(nums) if nums else None,
                r.get("reason", "")[:80]]
    if suite == "padding":
        v = r.get("variants", {})
        g = lambda k: ((v.get(k) or {}).get("bolt") or {}).get("median_us")  # noqa: E731
        return [r["id"], r["status"], g("unpadded_sm80"), g("padded_sm80"), g("padded_primary"), r.get("speedup_padded"),
                r.get("pad_cost_pct"), r.get("reason", "")[:60]]
    return [r["id"], r["status"], t("torch"), t("torch_compile"), (r.get("ort_bolt") or {}).get("status"),
            (r.get("tuning") or {}).get("analytic_tuning_seconds"), r.get("reason", "")[:60]]


HEADERS = {
    "kernels": ["case", "status", "max abs err", "max rel err", "rtol", "checker self-test", "reason"],
    "gemm": ["case", "status", "Bolt us", "Bolt TFLOP/s", "% peak", "torch us", "torch.compile us", "vs torch", "vs compile", "reason"],
    "epilogue": ["case", "status", "fused us", "unfused us", "speedup", "torch us", "reason"],
    "b2b": ["case", "status", "fused us", "Bolt unfused us", "torch unfused us", "speedup vs best unfused", "paper", "reason"],
    "padding": ["case", "status", "unpadded sm80 us", "padded sm80 us", "padded primary us", "speedup", "pad cost %", "reason"],
    "attention": ["case", "status", "sm80 us", "sm90 us", "SDPA us", "best vs SDPA", "% peak", "max abs err", "reason"],
    "e2e": ["model", "status", "torch us", "torch.compile us", "ORT+Bolt", "tuning s (analytic, host)", "reason"],
}
HEADERS["conv"] = HEADERS["gemm"]
