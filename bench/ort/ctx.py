"""ONNX Runtime + Bolt's cuda device on whole models, compiled once here and run on the GPU.

    # here (Rust, the project's venv, no GPU): EPContext models with sm90 kernels
    python bench/ort/ctx.py prepare [--out target/bench-ort] [--models mobilenet_v2,ppocr_cls]
    # on the GPU machine (onnxruntime's CPU wheel, numpy):
    python3 target/bench-ort/ctx.py run [--out DIR] [--device cuda|reference]

`prepare --generate resnet50,bert_base` also packs models of bench/models/generated.txt to be
made where `run` runs (their weights do not travel): the seeded generator, CUTLASS's headers and
the list. `run` then generates each, compiles it once through ORT there (that machine's nvcc;
the EP option `precision` from the list's first precision; the seconds are recorded), and runs
it at batch 1 and at the list's larger batch (inputs and onnxruntime's outputs repeated along
axis 0, bench/models/inputs.py --batch), checked at that precision's tolerance.

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
    for name in [m for m in o.models.split(",") if m and m != "none"]:
        data = out / "data" / name
        subprocess.run([sys.executable, str(repo / "bench/models/inputs.py"), str(testdata / name), str(data)], check=True)
        secs = compile_once(testdata / name / "model.onnx", data, out / f"{name}_ctx.onnx",
                            {"device": "reference", "arch": "sm90"}, ort, bolt_ort, np)
        print(f"ctx.py: {name}: compiled in {secs:.1f} s -> {out / (name + '_ctx.onnx')}")
    if o.generate:
        (out / "make").mkdir()
        for f in ("tests/python/make_models.py", "tests/python/refcase.py"):
            shutil.copy(repo / f, out / "make")
        shutil.copy(repo / "bench/models/inputs.py", out)
        want = o.generate.split(",")
        lines = [x for x in (repo / "bench/models/generated.txt").read_text().splitlines()
                 if x.strip() and not x.startswith("#") and (x.split()[0] in want or want == ["all"])]
        if not lines:
            raise SystemExit(f"ctx.py: --generate {o.generate}: none of bench/models/generated.txt")
        (out / "generated.txt").write_text("\n".join(lines) + "\n")
        subprocess.run(["bash", str(repo / "bench/cutlass_headers.sh"), str(out / "cutlass-headers.tar.xz")], check=True)
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"ctx.py: {out}: {size / 2**20:.1f} MiB")


def compile_once(model, data, ctx_path, options, ort, bolt_ort, np):
    """ORT's compile once (`ep.context_enable=1`): Bolt builds its artifacts beside `ctx_path`,
    whose Bolt parts are EPContext nodes. Returns the seconds of session creation and one run."""
    so = ort.SessionOptions()
    so.add_session_config_entry("ep.context_enable", "1")
    so.add_session_config_entry("ep.context_file_path", str(ctx_path))
    so.add_session_config_entry("ep.context_embed_mode", "0")
    t0 = time.monotonic()
    bolt_ort.session(str(model), options, so=so).run(None, dict(np.load(data / "inputs.npz")))
    return time.monotonic() - t0


def generate(device, ort, bolt_ort, np):
    """The models of generated.txt: made here from their seed, compiled once here through ORT
    (EP options: `device`, and `dims` from the list's --dim flags). Returns {model: record}."""
    made = {}
    if not (HERE / "generated.txt").is_file():
        return made
    cutlass = HERE / "cutlass"
    cutlass.mkdir(exist_ok=True)
    subprocess.run(["tar", "-xJf", str(HERE / "cutlass-headers.tar.xz"), "-C", str(cutlass)], check=True)
    os.environ["CUTLASS_DIR"] = str(cutlass)
    os.environ.setdefault("BOLT_CACHE_DIR", str(HERE / "cache"))
    for line in (HERE / "generated.txt").read_text().splitlines():
        name, precisions, batch, *flags = line.split()
        rec = made.setdefault(name, {"batch": int(batch), "precision": precisions.split(",")[0]})
        if len(rec) > 2:
            continue  # listed once per precision: the first listed is the one built
        if (HERE / f"{name}_ctx.onnx").is_file() and (HERE / "data" / name / f"inputs_b{batch}.npz").is_file():
            rec["reused"] = "made and compiled by an earlier run here"
            continue
        dims = ",".join(flags[i + 1] for i, f in enumerate(flags[:-1]) if f == "--dim")
        try:
            subprocess.run([sys.executable, str(HERE / "make/make_models.py"), "--out", str(HERE / "testdata"),
                            "--only", name], check=True, capture_output=True, text=True)
            subprocess.run([sys.executable, str(HERE / "inputs.py"), str(HERE / "testdata" / name), str(HERE / "data" / name),
                            "--batch", batch], check=True, capture_output=True, text=True)
            options = {"device": device, "precision": rec["precision"], **({"dims": dims} if dims else {})}
            rec["options"] = options
            rec["build_seconds"] = compile_once(HERE / "testdata" / name / "model.onnx", HERE / "data" / name,
                                                HERE / f"{name}_ctx.onnx", options, ort, bolt_ort, np)
            print(f"ctx.py: {name}: made and compiled once here in {rec['build_seconds']:.1f} s")
        except Exception as e:  # noqa: BLE001 -- one model failing is a result; the next runs
            err = getattr(e, "stderr", None) or ""
            rec["reason"] = f"{type(e).__name__}: {e} {err}"[-2000:]
            print(f"ctx.py: {name}: not built: {rec['reason'][:400]}")
    return made


def checked_and_timed(sess, inputs, expected, np, rtol=RTOL, atol=ATOL):
    """Runs `inputs`, compares every output with `expected` (|got - want| <= atol + rtol |want|),
    times session.run."""
    outs = sess.run(None, inputs)
    checks = []
    for n, got in zip([x.name for x in sess.get_outputs()], outs):
        want = expected.get(n)
        if want is None:
            checks.append({"output": n, "status": "no recorded output"})
            continue
        got, want = got.astype(np.float64), want.astype(np.float64)
        err = np.abs(got - want)
        bad = int((~(err <= atol + rtol * np.abs(want))).sum())
        checks.append({"output": n, "max_abs_diff": float(err.max()), "outside": bad, "values": int(want.size)})
    for _ in range(3):
        sess.run(None, inputs)
    times = []
    for _ in range(20):
        t = time.perf_counter()
        sess.run(None, inputs)
        times.append((time.perf_counter() - t) * 1e3)
    return checks, {"median": statistics.median(times), "min": min(times), "max": max(times), "raw": times}


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
    now = datetime.datetime.now(datetime.timezone.utc)
    slug = "".join(c if c.isalnum() else "-" for c in name).strip("-")
    path = results / f"{now:%Y-%m-%d}-{slug}-ort.json"
    cases = []

    def save():
        # Written after every model: a step stopped by its time share keeps what ran.
        result = {"schema": "bolt-ort-gpu-v1", "date": now.isoformat(timespec="seconds"), "gpu": name,
                  "driver": driver, "onnxruntime": ort.__version__,
                  "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
                  "commit": (HERE / "commit.txt").read_text().strip() if (HERE / "commit.txt").is_file() else None,
                  "tolerance": {"rtol": RTOL, "atol": ATOL, "precision": "tf32 (f32 models' artifact default)"},
                  "timing": "session.run wall time, host inputs and outputs, median of 20 after 3 warm-up runs",
                  "device": o.device,
                  "cases": cases}
        path.write_text(json.dumps(result, indent=1) + "\n")

    def run_one(ctx, made):
        model = ctx.name[: -len("_ctx.onnx")]
        data = HERE / "data" / model
        case = {"model": model, "context_model": ctx.name, "device": o.device, **made.get(model, {})}
        try:
            so = ort.SessionOptions()
            t0 = time.monotonic()
            sess = bolt_ort.session(str(ctx), {"device": o.device}, so=so)
            case["load_seconds"] = time.monotonic() - t0
            case["providers"] = sess.get_providers()
            # f16/bf16 builds: Bolt's f16 tolerance (bolt run --check's), else TF32's.
            tol = (2e-2, 2e-2) if case.get("precision") in ("f16", "bf16") else (RTOL, ATOL)
            case["tolerance"] = {"rtol": tol[0], "atol": tol[1]}
            checks, case["run_ms"] = checked_and_timed(sess, dict(np.load(data / "inputs.npz")),
                                                       dict(np.load(data / "expected.npz")), np, *tol)
            case["outputs"] = checks
            big = case.get("batch")
            if big and (data / f"inputs_b{big}.npz").is_file():
                bchecks, bms = checked_and_timed(sess, dict(np.load(data / f"inputs_b{big}.npz")),
                                                 dict(np.load(data / f"expected_b{big}.npz")), np, *tol)
                case["big"] = {"batch": big, "outputs": bchecks, "run_ms": bms}
                checks = checks + bchecks
            ok = all(c.get("outside", 1) == 0 for c in checks)
            case["status"] = "ok" if ok else "mismatch"
        except Exception as e:  # noqa: BLE001 -- a failing model is a result; the next runs
            case["status"], case["reason"] = "error", f"{type(e).__name__}: {e}"[:2000]
        print(f"ctx.py: {model}: {case['status']} {json.dumps(case.get('outputs', case.get('reason')))[:400]}"
              f" {case.get('run_ms', {}).get('median', '-')} ms", flush=True)
        cases.append(case)
        save()

    # The models compiled where `prepare` ran first (seconds each), then those made here
    # (generated and compiled on this machine: minutes).
    listed = HERE / "generated.txt"
    generated = {x.split()[0] for x in listed.read_text().splitlines() if x.strip()} if listed.is_file() else set()
    prepared = [c for c in sorted(HERE.glob("*_ctx.onnx")) if c.name[: -len("_ctx.onnx")] not in generated]
    for ctx in prepared:
        run_one(ctx, {})
    made = generate(o.device, ort, bolt_ort, np)
    cases.extend({"model": m, "status": "error", "reason": r["reason"], **r} for m, r in made.items() if "reason" in r)
    for ctx in sorted(set(HERE.glob("*_ctx.onnx")) - set(prepared)):
        run_one(ctx, made)
    save()
    print(f"ctx.py: -> {path}")
    return 0 if cases and all(c["status"] == "ok" for c in cases) else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["prepare", "run"])
    ap.add_argument("--out")
    ap.add_argument("--models", default=DEFAULT_MODELS, help="prepare: test models compiled here (none: no model)")
    ap.add_argument("--generate", help="prepare: models of bench/models/generated.txt made and compiled where run runs")
    ap.add_argument("--device", default="cuda", help="run: Bolt's device (cuda; reference checks this script)")
    o = ap.parse_args()
    if o.mode == "prepare":
        o.out = o.out or "target/bench-ort"
        prepare(o)
        subprocess.run(["sh", "-c", f"git -C {HERE} rev-parse HEAD > {o.out}/commit.txt"], check=False)
        return 0
    return run(o)


if __name__ == "__main__":
    sys.exit(main())
