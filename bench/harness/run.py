"""Runs the suites over a package (bench/package.sh) and writes
<out>/<date>-<gpu>-<suite>.json and .md per suite.

    python3 -m harness.run --pkg DIR [--dry-run] [--suites all|kernels,gemm,...] [--out DIR]

Exit status: 0 when no case failed, 1 when one did, 2 on bad input (named in the message).
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time
import traceback

from . import reference as ref
from .abi import Libraries
from .common import (SUITES, BenchError, Timer, expected_cases, gpu_clocks, load_package, markdown_table,
                     new_result, write_result)
from .suites import HEADERS, SUITE_FUNCS, Ctx, headline


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pkg", required=True, type=pathlib.Path, help="package folder (bench/package.sh)")
    ap.add_argument("--dry-run", action="store_true", help="host checks only: no GPU, no torch, no timings")
    ap.add_argument("--suites", default="all", help=f"comma-separated, of {', '.join(SUITES)}")
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("bench/results"))
    ap.add_argument("--workloads", type=pathlib.Path, help="default: <pkg>/workloads")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--no-flush", action="store_true", help="do not flush L2 between timed runs")
    ap.add_argument("--compile-mode", default="max-autotune", help="torch.compile mode of the baselines")
    ap.add_argument("--budget-s", type=float, help="per suite: later cases are 'skipped' once spent")
    ap.add_argument("--memcheck", action="store_true", help="kernels suite: compute-sanitizer memcheck, one case per family")
    ap.add_argument("--memcheck-timeout", type=float, default=900,
                    help="seconds compute-sanitizer may take before memcheck is recorded as not-run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cases", help="comma-separated substrings: only the cases whose id holds one (e.g. a failing "
                                    "kernel rerun with CUDA_MODULE_LOADING=EAGER); suites list no missing workloads then")
    o = ap.parse_args(argv)
    o.suites = SUITES if o.suites == "all" else [s.strip() for s in o.suites.split(",") if s.strip()]
    bad = [s for s in o.suites if s not in SUITES]
    if bad:
        raise BenchError(f"--suites: unknown suite(s) {', '.join(bad)} (known: {', '.join(SUITES)})")
    return o


def coverage(suite, records, expected):
    """Adds a 'not-available' record for every workload of the files the package lacks."""
    have = {r.get("workload") for r in records}
    for s, name in expected:
        if s == suite and name not in have:
            records.append({"id": f"{suite}:{name}", "suite": suite, "workload": name, "status": "not-available",
                            "reason": "workload not in the package (stale package: re-run bench/package.sh)"})
    return records


def memcheck(o, records):
    """compute-sanitizer memcheck over one ready case per family (GPU only); attention: the
    smallest passing case with a mask and the smallest without (every kernel of each)."""
    from .suites import MEMCHECK_FAMILIES
    picks = {}
    for r in sorted(records, key=lambda r: r.get("flops") or 0):
        if r.get("family") in MEMCHECK_FAMILIES and r.get("status") == "ok":
            picks.setdefault(r["family"], r["id"])
        if r.get("family") == "attention" and r.get("status") == "ok":
            picks.setdefault(f"attention {r.get('mask')}", r["id"])
    if not picks:
        return {"status": "not-run", "reason": "no passing case to check"}
    cmd = ["compute-sanitizer", "--tool", "memcheck", "--error-exitcode", "99", sys.executable, "-m", "harness.memcheck",
           "--pkg", str(o.pkg), "--cases", ",".join(picks.values())]
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=o.memcheck_timeout, cwd=pathlib.Path(__file__).parent.parent)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"status": "not-run", "reason": f"{type(e).__name__}: {e}", "cases": picks}
    tail = (p.stdout + p.stderr)[-3000:]
    return {"status": "ok" if p.returncode == 0 else "failed", "exit": p.returncode, "cases": picks,
            "seconds": time.monotonic() - t0, "command": " ".join(cmd), "output_tail": tail}


def main(argv=None):
    try:
        o = parse(argv if argv is not None else sys.argv[1:])
        package = load_package(o.pkg)
        workloads = o.workloads or (o.pkg / "workloads")
        expected = expected_cases(workloads)
    except BenchError as e:
        print(f"bench: {e}", file=sys.stderr)
        return 2
    libs = Libraries(o.pkg)
    timer, peak = None, None
    if not o.dry_run:
        import torch
        if not torch.cuda.is_available():
            print("bench: no CUDA device visible to PyTorch; use --dry-run on a host without a GPU", file=sys.stderr)
            return 2
        torch.backends.cuda.matmul.allow_tf32 = False  # the f32 references stay f32
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = True
        timer = Timer(o.warmup, o.runs, flush=not o.no_flush)
        from .common import peak_tflops
        peak = peak_tflops(torch.cuda.get_device_name())
    method = timer.method() if timer else {"timer": "none (dry run)", "checks": "can_implement on the host, CPU reference"}
    failed = 0
    for suite in o.suites:
        t0 = time.monotonic()
        cases = package["suites"].get(suite, []) if suite != "e2e" else []
        if o.cases:
            cases = [c for c in cases if any(k in c.get("id", "") for k in o.cases.split(","))]
        ctx = Ctx(package, libs, o.dry_run, timer, o.compile_mode, o.budget_s, o.seed)
        ctx.peak = peak
        result = new_result(suite, package, argv if argv is not None else sys.argv[1:], o.dry_run, method,
                            ref.POLICY if suite in ("kernels", "gemm", "conv", "epilogue", "b2b", "padding", "attention") else None)
        try:
            records, extra = SUITE_FUNCS[suite](ctx, cases)
        except BenchError as e:
            print(f"bench: {suite}: {e}", file=sys.stderr)
            return 2
        except Exception as e:  # noqa: BLE001 -- a suite that breaks is a failed result; the next suite runs
            traceback.print_exc()
            records, extra = [{"id": f"{suite}:harness", "status": "failed", "reason": f"{type(e).__name__}: {e}",
                               "traceback": traceback.format_exc()[-3000:]}], {}
        if not o.cases:
            records = coverage(suite, records, expected)
        # The CUDA runtime's switches a rerun may set (module loading, blocking launches).
        result["cuda_env"] = {k: v for k, v in os.environ.items() if k.startswith("CUDA_")}
        if suite in ("kernels", "attention") and o.memcheck and not o.dry_run:
            extra["memcheck"] = memcheck(o, records)
            if extra["memcheck"]["status"] == "failed":
                records.append({"id": f"{suite}:memcheck", "status": "failed", "reason": "compute-sanitizer memcheck found errors"})
        elif suite in ("kernels", "attention"):
            extra["memcheck"] = {"status": "not-run", "reason": "dry run (needs the GPU)" if o.dry_run else "--memcheck not given"}
        counts = {}
        for r in records:
            counts[r["status"]] = counts.get(r["status"], 0) + 1
        result["cases"] = records
        result["summary"] = {"counts": counts, "seconds": time.monotonic() - t0, **extra}
        result["clocks_after"] = None if o.dry_run else gpu_clocks()
        table = markdown_table(HEADERS[suite], [headline(suite, r) for r in records])
        title = (f"# {suite} — DRY RUN (host checks only; no GPU timings)\n\n" if o.dry_run
                 else f"# {suite} — {result['environment']['gpu']['name']}\n\n")
        md = title + f"{result['date']} · commit {result['commit'] or '?'} · {len(records)} cases · {json.dumps(counts)}\n\n" + table
        path = write_result(o.out, suite, result, md)
        failed += counts.get("failed", 0)
        print(f"{suite:9s} {len(records):4d} cases  {json.dumps(counts):60s} -> {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
