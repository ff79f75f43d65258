"""Shared pieces: package and workload loading, environment, timing, result files, tables."""

import datetime
import json
import math
import os
import pathlib
import platform
import re
import shutil
import subprocess
import sys

SCHEMA = "bolt-bench-result/1"
SUITES = ["kernels", "gemm", "conv", "epilogue", "b2b", "padding", "attention", "e2e"]
# Dense tensor-core peaks (TFLOP/s, f16 in / f32 accumulate, no sparsity) from
# ../shared/workloads/README.md; matched on the device name.
PEAK_F16_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0}
DRAM_TBPS = {"H100": 3.35, "H200": 4.8, "A100": 2.04}


class BenchError(Exception):
    """Bad input: names the file or case."""


def load_package(pkg):
    path = pathlib.Path(pkg) / "package.json"
    try:
        package = json.loads(path.read_text())
    except FileNotFoundError:
        raise BenchError(f"{path}: no package here (build one with bash bench/package.sh)") from None
    except json.JSONDecodeError as e:
        raise BenchError(f"{path}: not valid JSON: {e}") from None
    if package.get("format") != 1:
        raise BenchError(f"{path}: package format {package.get('format')!r}, this harness reads format 1")
    for key in ("suites", "libraries", "epilogue_samples", "profile"):
        if key not in package:
            raise BenchError(f"{path}: no `{key}` field (rebuild the package)")
    return package


# ---- workload files: the same names bolt-profiler's load_shapes_file gives -------------------
def _is_widths(v):
    return isinstance(v, list) and len(v) >= 2 and all(isinstance(x, int) for x in v)


def _walk(v, path, out, file):
    if isinstance(v, list):
        for i, item in enumerate(v):
            name = item.get("name") if isinstance(item, dict) else None
            _walk_item(item, f"{path}/{name or i}" if path else str(name or i), out, file)
    elif isinstance(v, dict):
        for key, child in v.items():
            _walk_item(child, f"{path}/{key}" if path else key, out, file)


def _walk_item(v, name, out, file):
    if not isinstance(v, dict):
        return _walk(v, name, out, file)
    has = lambda *ks: all(k in v for k in ks)  # noqa: E731
    if has("N0", "K0") or has("K0", "K1"):
        return None
    shape_keys = ["N", "H", "W", "C", "K", "R", "S"] if has("N", "H", "W", "C", "K", "R", "S") else (
        ["M", "N", "K"] if has("M", "N", "K") else None)
    if shape_keys:
        for k in shape_keys:
            if not isinstance(v[k], int) or v[k] <= 0:
                raise BenchError(f"{file}: `{name}`: `{k}` = {v[k]!r} is not a positive integer")
        epis = v.get("epilogues")
        if isinstance(epis, list):
            out.extend(f"{name}/{e}" for e in epis)
        else:
            out.append(name)
        return None
    if any(_is_widths(x) for x in v.values()):
        batches = v.get("batches")
        if batches is None:
            b = v.get("batch", v.get("M"))
            batches = [b] if isinstance(b, int) else [int(x) for x in re.findall(r"\d+", str(v.get("note", "")))]
        for key, widths in v.items():
            if _is_widths(widths):
                for layer in range(len(widths) - 1):
                    for b in batches:
                        out.append(f"{name}/{key}{layer}_b{b}")
        return None
    return _walk(v, name, out, file)


def workload_names(workloads_dir):
    """{file: [workload names]} of the GEMM/conv files, and the b2b chain names."""
    d = pathlib.Path(workloads_dir)
    names = {}
    for f in ["gemm.json", "conv2d.json", "padding.json"]:
        try:
            data = json.loads((d / f).read_text())
        except FileNotFoundError:
            raise BenchError(f"{d / f}: missing (workloads directory: {d})") from None
        except json.JSONDecodeError as e:
            raise BenchError(f"{d / f}: not valid JSON: {e}") from None
        out = []
        _walk(data, "", out, d / f)
        names[f] = out
    try:
        b2b = json.loads((d / "b2b.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError) as e:
        raise BenchError(f"{d / 'b2b.json'}: {e}") from None
    chains = [f"gemm_pairs_bolt_table1/problems/{i}" for i in range(len(b2b["gemm_pairs_bolt_table1"]["problems"]))]
    chains += [f"cutlass_example_shapes/{i}" for i in range(len(b2b["cutlass_example_shapes"]))]
    chains += [f"conv_pairs_bolt_table2/problems/{i}" for i in range(len(b2b["conv_pairs_bolt_table2"]["problems"]))]
    chains += [f"mlp_chains/problems/{i}" for i in range(len(b2b["mlp_chains"]["problems"]))]
    names["b2b.json"] = chains
    return names


def expected_cases(workloads_dir):
    """(suite, workload) pairs every run must list, from the workload files alone."""
    names = workload_names(workloads_dir)
    out = []
    for n in names["gemm.json"]:
        out.append(("epilogue" if n.startswith("epilogue_fusion_bolt_fig9/") else "gemm", n))
    for n in names["conv2d.json"]:
        out.append(("epilogue" if n.startswith("bolt_fig9_epilogue/") else "conv", n))
    out += [("padding", n) for n in names["padding.json"]]
    out += [("b2b", n) for n in names["b2b.json"]]
    return out


# ---- environment -----------------------------------------------------------------------------
def _run(cmd):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        return r.stdout.strip() if r.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def gpu_clocks():
    """SM / memory clocks, temperature and power now (nvidia-smi), or None without a GPU."""
    q = "clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw,clocks_event_reasons.active"
    out = _run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader,nounits"])
    if not out:
        return None
    vals = [v.strip() for v in out.splitlines()[0].split(",")]
    return dict(zip(["sm_mhz", "mem_mhz", "max_sm_mhz", "temp_c", "power_w", "throttle_reasons"], vals))


def environment(package, dry_run):
    env = {
        "host": platform.node(), "python": sys.version.split()[0], "numpy": _numpy_version(),
        "nvcc": (_run(["nvcc", "--version"]) or "").splitlines()[-1:] or None,
        "package": {k: package.get(k) for k in ("profile", "arch", "top_k", "ranking_device", "commit")},
        "package_libraries": package.get("libraries"),
    }
    if dry_run:
        env["gpu"] = {"name": "none (dry run)", "driver": None}
        return env
    import torch
    props = torch.cuda.get_device_properties(0)
    env["gpu"] = {
        "name": props.name, "sm_count": props.multi_processor_count,
        "l2_bytes": getattr(props, "L2_cache_size", None), "memory_bytes": props.total_memory,
        "capability": f"{props.major}.{props.minor}",
        "driver": _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]),
        "peak_f16_tflops": peak_tflops(props.name), "dram_tbps": dram_tbps(props.name),
    }
    env["cuda_runtime"] = torch.version.cuda
    env["torch"] = torch.__version__
    env["cudnn"] = torch.backends.cudnn.version()
    return env


def _numpy_version():
    import numpy
    return numpy.__version__


def peak_tflops(name):
    return next((v for k, v in PEAK_F16_TFLOPS.items() if k in name), None)


def dram_tbps(name):
    return next((v for k, v in DRAM_TBPS.items() if k in name), None)


def commit(repo_root):
    return _run(["git", "-C", str(repo_root), "rev-parse", "HEAD"])


# ---- timing ------------------------------------------------------------------------------------
class Timer:
    """CUDA-event timing: `warmup` untimed runs, then `runs` runs, each bracketed by its own
    events, with L2 flushed before each (a 2x-L2 buffer is zeroed, outside the events).
    Reports the median and spread (p10, p90, min, max) in microseconds, and the raw runs."""

    def __init__(self, warmup=10, runs=50, flush=True):
        import torch
        self.torch = torch
        self.warmup, self.runs = warmup, runs
        l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20) or (50 << 20)
        self.flush_bytes = 2 * l2 if flush else 0
        self.flush_buf = torch.empty(self.flush_bytes // 4, dtype=torch.int32, device="cuda") if flush else None

    def method(self):
        return {"timer": "cuda events per run", "warmup": self.warmup, "runs": self.runs,
                "l2_flush_bytes": self.flush_bytes, "statistic": "median", "spread": "p10/p90/min/max"}

    def __call__(self, fn):
        torch = self.torch
        for _ in range(self.warmup):
            fn()
        torch.cuda.synchronize()
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(self.runs)]
        for s, e in ev:
            if self.flush_buf is not None:
                self.flush_buf.zero_()
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        return summarize([s.elapsed_time(e) * 1e3 for s, e in ev])


def summarize(us):
    xs = sorted(us)
    q = lambda f: xs[min(len(xs) - 1, max(0, round(f * (len(xs) - 1))))]  # noqa: E731
    return {"median_us": q(0.5), "p10_us": q(0.1), "p90_us": q(0.9), "min_us": xs[0], "max_us": xs[-1],
            "runs": len(xs), "raw_us": [round(x, 3) for x in us]}


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


# ---- results -----------------------------------------------------------------------------------
def slug(s):
    return re.sub(r"[^A-Za-z0-9]+", "-", s).strip("-").lower() or "unknown"


def write_result(out_dir, suite, result, table_md):
    """bench/results/<date>-<gpu>-<suite>.json and .md; dry runs say `dryrun` as the GPU."""
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    gpu = "dryrun" if result["mode"] == "dry-run" else slug(result["environment"]["gpu"]["name"])
    stem = f"{result['date'][:10]}-{gpu}-{suite}"
    (out / f"{stem}.json").write_text(json.dumps(result, indent=1, default=_jsonable) + "\n")
    (out / f"{stem}.md").write_text(table_md)
    return out / f"{stem}.json"


def _jsonable(x):
    if hasattr(x, "item"):
        return x.item()
    if hasattr(x, "tolist"):
        return x.tolist()
    raise TypeError(f"{type(x)} is not JSON serialisable")


def new_result(suite, package, args, dry_run, method, policy=None):
    return {
        "schema": SCHEMA, "suite": suite, "mode": "dry-run" if dry_run else "gpu",
        "timings": ("none: dry run on the host; no number here is a GPU measurement" if dry_run
                    else "CUDA events on the GPU (see method)"),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "commit": package.get("commit"),
        "environment": environment(package, dry_run),
        "clocks_before": None if dry_run else gpu_clocks(),
        "method": method, "tolerance_policy": policy, "cases": [], "summary": {},
    }


def fmt(x, digits=1):
    if x is None:
        return "-"
    if isinstance(x, float):
        # Errors and tolerances are small: fixed digits would print 4.9e-4 as 0.0.
        if x != 0 and abs(x) < 0.05:
            return f"{x:.2e}"
        return f"{x:.{digits}f}"
    return str(x)


def markdown_table(headers, rows):
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for r in rows:
        lines.append("| " + " | ".join(fmt(c) for c in r) + " |")
    return "\n".join(lines) + "\n"


def which(cmd):
    return shutil.which(cmd)
