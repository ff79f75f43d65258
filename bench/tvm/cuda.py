"""TVM (Relax BYOC) with Bolt on the GPU: a stage of ResNet-50 built here for target cuda twice,
TVM's own build and the build with Bolt's partitions, then run on the GPU machine with TVM's
runtime alone (no TVM compiler there) and compared with TVM's llvm build.

    # here (the project's venv: apache-tvm, whose cuda codegen needs no GPU; Bolt's kernels
    # built by the pinned nvcc): the two exported libraries, the input and TVM's llvm output
    python bench/tvm/cuda.py prepare [--out target/bench-tvm] [--arch 90] [--batch 1] [--until layer1.2.relu]
    # on the GPU machine (python3 with numpy and torch; nvcc compiles TVM's own kernels when its
    # module loads, as TVM's runtime does): writes <date>-<gpu>-tvm.json
    python3 target/bench-tvm/cuda.py run [--out DIR]

The stage is ResNet-50 (tests/python/make_models.py's graph, the test data's weights) from its
input to `--until` (default: the stem and layer1, ten convs), imported by TVM's ONNX frontend.
Bolt's build: `partition_for_bolt`, `RunCodegen` with `device=cuda` (its artifact, sm`arch`
kernels included, is embedded in the library), then TVM's cuda build of the rest. `run` loads
each library with TVM's runtime libraries and the apache-tvm-ffi wheel carried with them, runs
the VM's `main` on the GPU (inputs and outputs as torch tensors through DLPack), compares with
TVM's llvm output (TF32's tolerance: Bolt runs f32 convs in TF32) and times 50 calls after 5
warm-up calls with CUDA events.

`prepare --target llvm` builds the same stage for the CPU (TVM's llvm build and Bolt's reference
device) and `run --device cpu` runs it the same way: how tests/python/test_tvm_byoc.py checks
this loader without a GPU.
"""
import argparse
import ctypes
import datetime
import glob
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
# TF32 (what Bolt runs f32 convs in): docs/artifact.md's tolerance.
RTOL, ATOL = 1e-2, 1e-2
# The apache-tvm-ffi of tests/python/requirements.txt, for the GPU machine's Python.
FFI_WHEEL = "apache-tvm-ffi==0.1.15.post2"
GPU_PYTHON = "3.12"


def libraries(target: str) -> dict:
    """The two libraries a prepared folder holds for `target`, by name."""
    return {"tvm": f"tvm_{target}.so", "bolt": f"bolt_{target}.so"}


def prepare(o):
    import numpy as np
    import onnx
    import onnx.utils

    repo = HERE.parent.parent
    out = pathlib.Path(o.out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "bolt-plugin"], cwd=repo, check=True)
    lib = out / "libbolt_plugin.so"
    subprocess.run(["strip", "-o", str(lib), str(repo / "target/release/libbolt_plugin.so")], check=True)
    shutil.copy(__file__, out / "cuda.py")
    os.environ["BOLT_LIBRARY"] = str(lib)
    sys.path.insert(0, str(repo / "plugin/python"))
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    import bolt_tvm

    testdata = pathlib.Path(os.environ.get("BOLT_TESTDATA", repo / "testdata")) / "models"
    model = testdata / "resnet50" / "model.onnx"
    if not model.is_file():
        sys.exit(f"{model} missing: tests/python/make_models.py makes it (bash tests/run.sh sets it up)")
    with tempfile.TemporaryDirectory() as tmp:
        stage = pathlib.Path(tmp) / "stage.onnx"
        onnx.utils.extract_model(str(model), str(stage), ["input"], [o.until])
        mod = from_onnx(onnx.load(str(stage)), shape_dict={"input": [o.batch, 3, 224, 224]})
    x = np.random.default_rng(0).standard_normal((o.batch, 3, 224, 224)).astype(np.float32)
    want = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    np.save(out / "input.npy", x)
    np.save(out / "expected.npy", want)

    if o.target == "cuda":
        target = tvm.target.Target({"kind": "cuda", "arch": f"sm_{o.arch}"}, host="llvm")
        bolt_options = {"device": "cuda", "arch": f"sm{o.arch}"}
    else:
        target = tvm.target.Target("llvm")
        bolt_options = {"device": "reference"}
    names = libraries(o.target)
    seconds = {}
    t = time.perf_counter()
    tvm.compile(mod, target=target).export_library(str(out / names["tvm"]))
    seconds["tvm"] = time.perf_counter() - t
    t = time.perf_counter()
    part = bolt_tvm.partition_for_bolt(mod)
    offloaded = bolt_tvm.offloaded(part)
    lowered = relax.transform.RunCodegen({"bolt": bolt_options})(part)
    tvm.compile(lowered, target=target).export_library(str(out / names["bolt"]))
    seconds["bolt"] = time.perf_counter() - t

    # TVM's runtime libraries (Python-independent) and, for the GPU machine's Python, the
    # apache-tvm-ffi wheel they were built against.
    runtime = out / "tvm_runtime"
    runtime.mkdir()
    tvm_lib = pathlib.Path(tvm.__file__).parent / "lib"
    for name in ("libtvm_runtime.so", "libtvm_runtime_cuda.so"):
        shutil.copy(tvm_lib / name, runtime / name)
    if o.target == "cuda" and not o.no_wheel:
        platforms = [f"--platform=manylinux_2_{n}_x86_64" for n in (17, 24, 27, 28)] + ["--platform=manylinux2014_x86_64"]
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                        "--python-version", GPU_PYTHON, "--implementation", "cp", *platforms,
                        "-d", str(out / "wheels"), FFI_WHEEL], check=True)
    meta = {
        "stage": f"ResNet-50 input -> {o.until}",
        "batch": o.batch,
        "target": o.target,
        "arch": o.arch,
        "bolt_options": bolt_options,
        "offloaded": offloaded,
        "build_seconds": {k: round(v, 3) for k, v in seconds.items()},
        "tvm": tvm.__version__,
        "commit": subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=12"], cwd=repo,
                                 capture_output=True, text=True).stdout.strip(),
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    composites = sum(offloaded.values(), [])
    print(f"prepared {out}: {meta['stage']} at batch {o.batch} for {o.target}; Bolt takes {len(composites)} composites "
          f"in {len(offloaded)} functions; built in {meta['build_seconds']} s")


def load_runtime(d: pathlib.Path, device: str):
    """tvm_ffi (installed from the carried wheel where this Python has none), TVM's runtime and,
    for cuda, its CUDA runtime with a kernel compiler for TVM's own kernels (nvcc: TVM compiles
    a module's CUDA source when it loads). Returns the tvm_ffi module."""
    try:
        import tvm_ffi
    except ImportError:
        site = d / "site"
        wheels = sorted(glob.glob(str(d / "wheels" / "*.whl")))
        if not wheels:
            sys.exit("no tvm_ffi here and no carried wheel (prepare --target cuda downloads it)")
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                        "--target", str(site), *wheels], check=True)
        sys.path.insert(0, str(site))
        import tvm_ffi
    mode = ctypes.RTLD_GLOBAL
    if device == "cuda":
        import torch  # its CUDA runtime (libcudart) is what TVM's CUDA runtime links to

        root = pathlib.Path(torch.__file__).parent.parent
        cudart = sorted(glob.glob(str(root / "nvidia" / "**" / "libcudart.so.*"), recursive=True))
        ctypes.CDLL(cudart[0] if cudart else "libcudart.so", mode=mode)
    ctypes.CDLL(str(d / "tvm_runtime" / "libtvm_runtime.so"), mode=mode)
    if device == "cuda":
        ctypes.CDLL(str(d / "tvm_runtime" / "libtvm_runtime_cuda.so"), mode=mode)
        nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
        arch = json.loads((d / "meta.json").read_text())["arch"]

        @tvm_ffi.register_global_func("tvm_callback_cuda_compile", override=True)
        def _compile(code):
            with tempfile.TemporaryDirectory() as tmp:
                src, fatbin = pathlib.Path(tmp) / "m.cu", pathlib.Path(tmp) / "m.fatbin"
                src.write_text(code)
                subprocess.run([nvcc, "--fatbin", "-O3", f"-arch=sm_{arch}", str(src), "-o", str(fatbin)], check=True)
                return bytearray(fatbin.read_bytes())

    lib = str(d / "libbolt_plugin.so")
    tvm_ffi.register_global_func("bolt.library_path", lambda: lib, override=True)
    return tvm_ffi


def run(o):
    import numpy as np

    d = HERE
    meta = json.loads((d / "meta.json").read_text())
    device = o.device
    want_target = "cuda" if device == "cuda" else "llvm"
    if meta["target"] != want_target:
        sys.exit(f"this folder was prepared for target {meta['target']}; --device {device} runs {want_target} builds")
    ffi = load_runtime(d, device)
    x = np.load(d / "input.npy")
    want = np.load(d / "expected.npy")
    # DLPack device types: kDLCPU = 1, kDLCUDA = 2; the VM's CPU is always last (shape functions).
    dev_type, pooled = (2 if device == "cuda" else 1), 2
    if device == "cuda":
        import torch

        x_dev = torch.from_numpy(x).cuda()
        gpu = torch.cuda.get_device_name()
    else:
        x_dev, gpu = x, "cpu"
    results = {"gpu": gpu, "device": device, "meta": meta, "python": sys.version.split()[0], "modules": {}}
    ok = True
    for which, name in libraries(want_target).items():
        t = time.perf_counter()
        vm = ffi.load_module(str(d / name))["vm_load_executable"]()
        init = [dev_type, 0, pooled] + ([1, 0, pooled] if dev_type != 1 else [])
        vm["vm_initialization"](*init)
        main = vm["main"]
        arg = ffi.from_dlpack(x_dev)
        y = main(arg)
        if device == "cuda":
            torch.cuda.synchronize()
            got = torch.from_dlpack(y).cpu().numpy()
        else:
            got = np.from_dlpack(y)
        first = time.perf_counter() - t
        err = float(np.max(np.abs(got.astype(np.float64) - want)))
        close = bool(np.allclose(got, want, rtol=RTOL, atol=ATOL))
        ok &= close
        times = []
        for _ in range(5):
            main(arg)
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            for _ in range(3):
                start.record()
                for _ in range(o.iters):
                    main(arg)
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end) / o.iters)
        else:
            for _ in range(3):
                t = time.perf_counter()
                for _ in range(o.iters):
                    main(arg)
                times.append((time.perf_counter() - t) * 1e3 / o.iters)
        ms = statistics.median(times)
        results["modules"][which] = {"library": name, "max_abs_err": err, "allclose": close, "ms": round(ms, 4),
                                     "first_call_s": round(first, 3), "shape": list(got.shape)}
        print(f"{which:5s} {name}: {ms:.3f} ms per call (median of 3 x {o.iters}), first call {first:.2f} s, "
              f"max abs err vs TVM llvm {err:.2e} {'ok' if close else 'WRONG'}")
    tvm_ms, bolt_ms = results["modules"]["tvm"]["ms"], results["modules"]["bolt"]["ms"]
    results["speedup_bolt_vs_tvm"] = round(tvm_ms / bolt_ms, 3) if bolt_ms > 0 else None
    print(f"Bolt vs TVM's own {want_target} build: {results['speedup_bolt_vs_tvm']}x")
    out = pathlib.Path(o.out or os.path.join(os.environ.get("OUT", "."), "results"))
    out.mkdir(parents=True, exist_ok=True)
    slug = gpu.lower().replace(" ", "-")
    path = out / f"{datetime.date.today()}-{slug}-tvm.json"
    path.write_text(json.dumps(results, indent=1))
    print(f"wrote {path}")
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    pp = sub.add_parser("prepare")
    pp.add_argument("--out", default="target/bench-tvm")
    pp.add_argument("--target", choices=["cuda", "llvm"], default="cuda")
    pp.add_argument("--arch", default="90", help="compute capability of the GPU (90: H100)")
    pp.add_argument("--batch", type=int, default=1)
    pp.add_argument("--until", default="layer1.2.relu", help="the stage's last tensor in ResNet-50")
    pp.add_argument("--no-wheel", action="store_true", help="skip downloading the apache-tvm-ffi wheel (a build check)")
    pr = sub.add_parser("run")
    pr.add_argument("--out", default=None)
    pr.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    pr.add_argument("--iters", type=int, default=50)
    o = p.parse_args()
    if o.cmd == "prepare":
        prepare(o)
        return 0
    return run(o)


if __name__ == "__main__":
    sys.exit(main())
