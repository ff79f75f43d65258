"""ONNX Runtime + Bolt's cuda device on whole models, compiled once here and run on the GPU.

    # here (Rust, the project's venv, no GPU): EPContext models with sm90 kernels
    python bench/ort/ctx.py prepare [--out target/bench-ort] [--models mobilenet_v2,ppocr_cls]
    # on the GPU machine (onnxruntime's CPU wheel, numpy):
    python3 target/bench-ort/ctx.py run [--out DIR]

`prepare` compiles each test model with ORT's compile-once options (`ep.context_enable=1`):
Bolt builds an artifact per fused node (plan, weights, sm90 kernel library; f32 models in TF32)
beside `<model>_ctx.onnx`, whose Bolt parts are EPContext nodes. It copies the plugin library,
its Python packages, this script and the model's real inputs and onnxruntime's recorded outputs
(test_data_set_0) into the folder. `run` loads each `<model>_ctx.onnx` with the EP option
`device=cuda` (the loading session builds nothing: it opens the artifacts on the GPU), runs
the real inputs, compares with onnxruntime's outputs at TF32's tolerance, times `session.run`
(wall, host inputs and outputs, median of 20 after 3 warm-up runs) and writes
`<date>-<gpu>-ort.json` (RESULTS: --out, else $OUT/results, else ./results).
"""
import argparse
import datetime
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
DEFAULT_MODELS = "small_conv_mlp,mobilenet_v2,ppocr_cls"
# TF32 (f32 models' default precision in artifacts): docs/artifact.md's tolerance.
RTOL, ATOL = 1e-2, 1e-2


def prepare(o):
    repo = HERE.parent.parent
    out = pathlib.Path(o.out)
    if out.exists():
        shutil.rmtree(out)
    (out / "python").mkdir(parents=True)
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "bolt-plugin"], cwd=repo, check=True)
    lib = out / "libbolt_plugin.so"
    subprocess.run(["strip", "-o", str(lib), str(repo / "target/release/libbolt_plugin.so")], check=True)
    for pkg in ("bolt_ort", "bolt_plugin"):
        shutil.copytree(repo / "plugin/python" / pkg, out / "python" / pkg,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(__file__, out / "ctx.py")
    os.environ["BOLT_LIBRARY"] = str(lib)
    sys.path.insert(0, str(out / "python"))
    import numpy as np
    import onnxruntime as ort
    import bolt_ort
    testdata = pathlib.Path(os.environ.get("BOLT_TESTDATA", repo / "testdata")) / "models"
    for name in o.models.split(","):
        src = testdata / name / "model.onnx"
        data = out / "data" / name
        subprocess.run([sys.executable, str(repo / "bench/models/inputs.py"), str(testdata / name), str(data)], check=True)
        inputs = dict(np.load(data / "inputs.npz"))
        so = ort.SessionOptions()
        so.add_session_config_entry("ep.context_enable", "1")
        so.add_session_config_entry("ep.context_file_path", str(out / f"{name}_ctx.onnx"))
        so.add_session_config_entry("ep.context_embed_mode", "0")
        t0 = time.monotonic()
        bolt_ort.session(str(src), {"device": "reference", "arch": "sm90"}, so=so).run(None, inputs)
        print(f"ctx.py: {name}: compiled in {time.monotonic() - t0:.1f} s -> {out / (name + '_ctx.onnx')}")
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"ctx.py: {out}: {size / 2**20:.1f} MiB")


def gpu_name():
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30)
        return [x.strip() for x in r.stdout.strip().splitlines()[0].split(",")]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return ["unknown", "unknown"]


def run(o):
    os.environ.setdefault("BOLT_LIBRARY", str(HERE / "libbolt_plugin.so"))
    sys.path.insert(0, str(HERE / "python"))
    import numpy as np
    import onnxruntime as ort
    import bolt_ort
    results = pathlib.Path(o.out or (os.environ["OUT"] + "/results" if os.environ.get("OUT") else "results"))
    results.mkdir(parents=True, exist_ok=True)
    name, driver = gpu_name()
    cases = []
    for ctx in sorted(HERE.glob("*_ctx.onnx")):
        model = ctx.name[: -len("_ctx.onnx")]
        data = HERE / "data" / model
        inputs = dict(np.load(data / "inputs.npz"))
        expected = dict(np.load(data / "expected.npz"))
        case = {"model": model, "context_model": ctx.name}
        try:
            so = ort.SessionOptions()
            t0 = time.monotonic()
            sess = bolt_ort.session(str(ctx), {"device": "cuda"}, so=so)
            case["load_seconds"] = time.monotonic() - t0
            case["providers"] = sess.get_providers()
            outs = sess.run(None, inputs)
            names = [x.name for x in sess.get_outputs()]
            checks = []
            for n, got in zip(names, outs):
                want = expected.get(n)
                if want is None:
                    checks.append({"output": n, "status": "no recorded output"})
                    continue
                got, want = got.astype(np.float64), want.astype(np.float64)
                err = np.abs(got - want)
                bad = int((~(err <= ATOL + RTOL * np.abs(want))).sum())
                checks.append({"output": n, "max_abs_diff": float(err.max()), "outside": bad, "values": int(want.size)})
            case["outputs"] = checks
            for _ in range(3):
                sess.run(None, inputs)
            times = []
            for _ in range(20):
                t = time.perf_counter()
                sess.run(None, inputs)
                times.append((time.perf_counter() - t) * 1e3)
            case["run_ms"] = {"median": statistics.median(times), "min": min(times), "max": max(times), "raw": times}
            ok = all(c.get("outside", 1) == 0 for c in checks)
            case["status"] = "ok" if ok else "mismatch"
        except Exception as e:  # noqa: BLE001 -- a failing model is a result; the next runs
            case["status"], case["reason"] = "error", f"{type(e).__name__}: {e}"[:2000]
        print(f"ctx.py: {model}: {case['status']} {json.dumps(case.get('outputs', case.get('reason')))[:400]}"
              f" {case.get('run_ms', {}).get('median', '-')} ms")
        cases.append(case)
    now = datetime.datetime.now(datetime.timezone.utc)
    result = {"schema": "bolt-ort-gpu-v1", "date": now.isoformat(timespec="seconds"), "gpu": name, "driver": driver,
              "onnxruntime": ort.__version__, "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
              "commit": (HERE / "commit.txt").read_text().strip() if (HERE / "commit.txt").is_file() else None,
              "tolerance": {"rtol": RTOL, "atol": ATOL, "precision": "tf32 (f32 models' artifact default)"},
              "timing": "session.run wall time, host inputs and outputs, median of 20 after 3 warm-up runs",
              "cases": cases}
    slug = "".join(c if c.isalnum() else "-" for c in name).strip("-")
    path = results / f"{now:%Y-%m-%d}-{slug}-ort.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"ctx.py: -> {path}")
    return 0 if all(c["status"] == "ok" for c in cases) else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["prepare", "run"])
    ap.add_argument("--out")
    ap.add_argument("--models", default=DEFAULT_MODELS)
    o = ap.parse_args()
    if o.mode == "prepare":
        o.out = o.out or "target/bench-ort"
        prepare(o)
        subprocess.run(["sh", "-c", f"git -C {HERE} rev-parse HEAD > {o.out}/commit.txt"], check=False)
        return 0
    return run(o)


if __name__ == "__main__":
    sys.exit(main())
