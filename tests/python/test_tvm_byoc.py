"""Bolt as a TVM Relax BYOC backend (plugin/python/bolt_tvm) on apache-tvm 0.27 from PyPI, on
the CPU reference device: which subgraphs `partition_for_bolt` offloads (decided by Bolt's Rust
partitioner), and modules that are partitioned, built with the `relax.ext.bolt` codegen,
exported, reloaded and run, against TVM's own llvm build of the unpartitioned module."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import tvm  # apache-tvm, pinned in tests/python/requirements.txt
import tvm_ffi
from tvm import relax
from tvm.script import relax as R

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "plugin" / "python"))
import bolt_tvm  # noqa: E402

TESTDATA = Path(os.environ.get("BOLT_TESTDATA", REPO / "testdata"))
rng = np.random.default_rng(7)


# The environment's own cache settings (where the pinned nvcc lives), while tests use a fresh one.
REAL_CACHE: dict = {}


@pytest.fixture(scope="module", autouse=True)
def library(tmp_path_factory):
    try:
        path = bolt_tvm.library_path()
    except FileNotFoundError as e:
        pytest.fail(f"{e}. tests/run.sh builds it before pytest.", pytrace=False)
    # Shim objects go to a fresh cache: each test run compiles them. No tuning database: kernel
    # picks are the analytic model's. Restored afterwards: later modules use the real cache
    # (where the pinned toolchain lives).
    saved = {k: os.environ.get(k) for k in ("BOLT_CACHE_DIR", "BOLT_TUNING_DB")}
    REAL_CACHE.update(saved)
    os.environ["BOLT_CACHE_DIR"] = str(tmp_path_factory.mktemp("bolt-cache"))
    os.environ["BOLT_TUNING_DB"] = str(tmp_path_factory.mktemp("no-db") / "tuning.json")
    yield path
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def randn(*shape, dtype="float32", scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


def tvm_reference(mod, inputs):
    """TVM's own llvm build of the module, partitioned by nobody."""
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(x) for x in inputs]).numpy()


def build_export_run(mod, inputs, tmp_path, options=None):
    """partition -> RunCodegen -> llvm build -> export_library -> load -> run."""
    part = bolt_tvm.partition_for_bolt(mod)
    offloaded = bolt_tvm.offloaded(part)
    lowered = relax.transform.RunCodegen({"bolt": options} if options else None)(part)
    lib = tmp_path / "model.so"
    tvm.compile(lowered, target="llvm").export_library(str(lib))
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(lib)), tvm.cpu())
    return offloaded, vm["main"](*[tvm.runtime.tensor(x) for x in inputs]).numpy(), lib


# ----------------------------------------------------------------------------- modules

W1, B1 = randn(64, 128, scale=0.1), randn(128)


@tvm.script.ir_module
class MatmulBiasGelu:
    @R.function
    def main(x: R.Tensor((32, 64), "float32")):
        with R.dataflow():
            y = R.matmul(x, R.const(W1))
            z = R.add(y, R.const(B1))
            o = R.nn.gelu(z)
            R.output(o)
        return o


CW, CB = randn(16, 16, 3, 3, scale=0.2), randn(16)


@tvm.script.ir_module
class ConvBiasReluResidual:
    @R.function
    def main(x: R.Tensor((2, 16, 12, 12), "float32")):
        with R.dataflow():
            c = R.nn.conv2d(x, R.const(CW), padding=[1, 1, 1, 1])
            b = R.add(c, R.reshape(R.const(CB), [1, 16, 1, 1]))
            r = R.nn.relu(b)
            o = R.add(r, x)
            R.output(o)
        return o


CW_OHWI = np.ascontiguousarray(CW.transpose(0, 2, 3, 1))


@tvm.script.ir_module
class ConvNhwcBiasRelu:
    @R.function
    def main(x: R.Tensor((2, 12, 12, 16), "float32")):
        with R.dataflow():
            c = R.nn.conv2d(x, R.const(CW_OHWI), padding=[1, 1, 1, 1], data_layout="NHWC", kernel_layout="OHWI")
            b = R.add(c, R.const(CB))
            o = R.nn.relu(b)
            R.output(o)
        return o


# Bolt Table 1's second GEMM pair: (M, N0, K0, N1) = (16384, 64, 256, 16), f16, bias + ReLU each.
G0, G0B = randn(256, 64, dtype="float16", scale=0.06), randn(64, dtype="float16", scale=0.1)
G1, G1B = randn(64, 16, dtype="float16", scale=0.1), randn(16, dtype="float16", scale=0.1)


@tvm.script.ir_module
class TwoGemmChain:
    @R.function
    def main(x: R.Tensor((16384, 256), "float16")):
        with R.dataflow():
            h = R.nn.relu(R.add(R.matmul(x, R.const(G0)), R.const(G0B)))
            o = R.nn.relu(R.add(R.matmul(h, R.const(G1)), R.const(G1B)))
            R.output(o)
        return o


# A HuggingFace-style attention core on [batch, seq, heads, head dim] projections: heads split
# by permute_dims (Kᵀ by [0, 2, 3, 1]), scaled, masked, softmax, context, heads merged back.
ATT = dict(b=2, s=12, h=4, d=16)


@tvm.script.ir_module
class AttentionCore:
    @R.function
    def main(
        q: R.Tensor((2, 12, 4, 16), "float32"),
        k: R.Tensor((2, 12, 4, 16), "float32"),
        v: R.Tensor((2, 12, 4, 16), "float32"),
        mask: R.Tensor((2, 1, 1, 12), "float32"),
    ):
        with R.dataflow():
            qt = R.permute_dims(q, [0, 2, 1, 3])
            kt = R.permute_dims(k, [0, 2, 3, 1])
            vt = R.permute_dims(v, [0, 2, 1, 3])
            s = R.divide(R.matmul(qt, kt), R.const(4.0, "float32"))
            p = R.nn.softmax(R.add(s, mask), axis=-1)
            o = R.permute_dims(R.matmul(p, vt), [0, 2, 1, 3])
            R.output(o)
        return o


# The same core masked as PyTorch's masked_fill exports it: where(pad, -1e9, scores), pad a
# boolean [batch, 1, 1, seq] that is true at padded keys.
@tvm.script.ir_module
class MaskedFillCore:
    @R.function
    def main(
        q: R.Tensor((2, 12, 4, 16), "float32"),
        k: R.Tensor((2, 12, 4, 16), "float32"),
        v: R.Tensor((2, 12, 4, 16), "float32"),
        pad: R.Tensor((2, 1, 1, 12), "bool"),
    ):
        with R.dataflow():
            qt = R.permute_dims(q, [0, 2, 1, 3])
            kt = R.permute_dims(k, [0, 2, 3, 1])
            vt = R.permute_dims(v, [0, 2, 1, 3])
            s = R.divide(R.matmul(qt, kt), R.const(4.0, "float32"))
            p = R.nn.softmax(R.where(pad, R.const(-1e9, "float32"), s), axis=-1)
            o = R.permute_dims(R.matmul(p, vt), [0, 2, 1, 3])
            R.output(o)
        return o


# ------------------------------------------------------------------------------- tests


def test_matmul_bias_gelu_is_one_bolt_kernel(tmp_path):
    x = randn(32, 64)
    offloaded, got, _ = build_export_run(MatmulBiasGelu, [x], tmp_path)
    assert list(offloaded.values()) == [["bolt.matmul_add_act"]]
    (report,) = [bolt_tvm.REPORTS[s] for s in offloaded]
    (p,) = report["partitions"]
    # The report shows the expression the kernel computes.
    assert p["epilogue"] == "gelu(acc + bias)", p
    # The codegen picks a CUTLASS kernel for it (no tuning database here: the analytic pick).
    (k,) = report["kernels"]
    assert "32x128x64" in k["problem"] and k["pick"].startswith("sm90_"), k
    np.testing.assert_allclose(got, tvm_reference(MatmulBiasGelu, [x]), rtol=1e-5, atol=1e-5)


def test_conv_bias_relu_residual_nchw(tmp_path):
    x = randn(2, 16, 12, 12)
    offloaded, got, _ = build_export_run(ConvBiasReluResidual, [x], tmp_path)
    assert list(offloaded.values()) == [["bolt.conv2d_add_act_add"]]
    (report,) = [bolt_tvm.REPORTS[s] for s in offloaded]
    assert "residual" in report["partitions"][0]["epilogue"], report["partitions"]
    np.testing.assert_allclose(got, tvm_reference(ConvBiasReluResidual, [x]), rtol=1e-4, atol=1e-4)


def test_conv_nhwc_ohwi(tmp_path):
    x = randn(2, 12, 12, 16)
    offloaded, got, _ = build_export_run(ConvNhwcBiasRelu, [x], tmp_path)
    assert list(offloaded.values()) == [["bolt.conv2d_add_act"]]
    # The conv already reads and writes NHWC: the plan adds no layout transform.
    (report,) = [bolt_tvm.REPORTS[s] for s in offloaded]
    assert report["layout"] == [] and report["planned_nodes"] == 1, report["layout"]
    np.testing.assert_allclose(got, tvm_reference(ConvNhwcBiasRelu, [x]), rtol=1e-4, atol=1e-4)


BN = [randn(16, scale=0.5) + 1.0, randn(16, scale=0.2), randn(16, scale=0.2), np.abs(randn(16)) + 0.5]


def conv_bn_relu(center: bool, scale: bool):
    """conv2d -> batch_norm (inference, maybe without its shift or scale) -> relu."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 16, 12, 12), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            c = bb.emit(relax.op.nn.conv2d(x, relax.const(CW), padding=[1, 1, 1, 1]))
            bn = bb.emit(relax.op.nn.batch_norm(c, *[relax.const(p) for p in BN], axis=1, center=center,
                                                scale=scale, training=False))
            o = bb.emit_output(relax.op.nn.relu(relax.TupleGetItem(bn, 0)))
        bb.emit_func_output(o)
    return bb.get()


@pytest.mark.parametrize("center,scale", [(True, True), (False, True), (True, False), (False, False)])
def test_batch_norm_without_its_shift_or_scale_means_what_tvm_means(tmp_path, center, scale):
    # batch_norm's center / scale switch its beta / gamma off: read as ONNX's BatchNormalization
    # (which always applies both) they would be a wrong answer.
    mod = conv_bn_relu(center, scale)
    x = randn(2, 16, 12, 12)
    offloaded, got, _ = build_export_run(mod, [x], tmp_path)
    assert sum(offloaded.values(), []) == ["bolt.conv2d_bn_act"], offloaded
    np.testing.assert_allclose(got, tvm_reference(mod, [x]), rtol=1e-4, atol=1e-4)


def test_two_gemm_chain_is_one_back_to_back_kernel(tmp_path):
    x = randn(16384, 256, dtype="float16")
    offloaded, got, _ = build_export_run(TwoGemmChain, [x], tmp_path)
    assert list(offloaded.values()) == [["bolt.b2b_matmul_add_act_matmul_add_act"]]
    (report,) = [bolt_tvm.REPORTS[s] for s in offloaded]
    (chain,) = report["chains"]
    assert chain["fused"] and chain["kernel"], chain
    want = tvm_reference(TwoGemmChain, [x]).astype(np.float32)
    # Both compute in f16 with f32 accumulation; they may round the hidden layer differently.
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-2, atol=2e-2)


def test_without_b2b_patterns_the_chain_is_two_composites():
    part = bolt_tvm.partition_for_bolt(TwoGemmChain, b2b=False)
    assert sorted(sum(bolt_tvm.offloaded(part).values(), [])) == ["bolt.matmul_add_act"] * 2


def test_what_bolt_does_not_take_stays_with_tvm():
    # A bias that is not constant and does not have the output's shape: Bolt's partitioner
    # leaves the Add to the host, so only the matmul is offloaded; softmax is never Bolt's.
    @tvm.script.ir_module
    class M:
        @R.function
        def main(x: R.Tensor((8, 64), "float32"), b: R.Tensor((128,), "float32")):
            with R.dataflow():
                y = R.matmul(x, R.const(W1))
                z = R.add(y, b)
                o = R.nn.softmax(z)
                R.output(o)
            return o

    part = bolt_tvm.partition_for_bolt(M)
    assert list(bolt_tvm.offloaded(part).values()) == [["bolt.matmul"]]
    text = part["main"].script()
    assert "R.add(" in text and "R.nn.softmax(" in text


def test_shared_intermediate_is_not_fused():
    # y feeds both the relu and the output: fusing the relu would hide y, so only the matmul goes.
    @tvm.script.ir_module
    class M:
        @R.function
        def main(x: R.Tensor((8, 64), "float32")):
            with R.dataflow():
                y = R.matmul(x, R.const(W1))
                r = R.nn.relu(y)
                o = R.add(r, y)
                R.output(o)
            return o

    part = bolt_tvm.partition_for_bolt(M, merge=False)
    assert sorted(sum(bolt_tvm.offloaded(part).values(), [])) == ["bolt.matmul"]


def test_missing_library_at_run_time_is_a_clear_error(tmp_path):
    x = randn(32, 64)
    _, _, lib = build_export_run(MatmulBiasGelu, [x], tmp_path)
    script = (
        "import sys, numpy as np, tvm\nfrom tvm import relax\n"
        f"vm = relax.VirtualMachine(tvm.runtime.load_module({str(lib)!r}), tvm.cpu())\n"
        "vm['main'](tvm.runtime.tensor(np.zeros((32, 64), 'float32')))\n"
    )
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       env={**os.environ, "BOLT_LIBRARY": str(tmp_path / "no-such-libbolt.so")})
    assert r.returncode != 0
    assert "cannot load the Bolt library" in r.stderr and "no-such-libbolt.so" in r.stderr, r.stderr[-2000:]


def test_a_cuda_module_carries_its_kernels_and_without_a_gpu_says_why_it_cannot_run(tmp_path, monkeypatch):
    """Compile once: a device=cuda module's kernels are built where TVM builds it (for the GPU
    there, else sm80, whose PTX also runs on Hopper) and linked into the exported library, so a
    machine without a GPU builds and exports it; running it there is a clear error."""
    if os.path.exists("/dev/nvidia0"):
        pytest.skip("this machine has a GPU: the cuda module is exercised by the GPU runs (bench/)")
    # The kernels are built with the pinned nvcc in the environment's own cache.
    for k in ("BOLT_CACHE_DIR",):
        monkeypatch.delenv(k, raising=False) if REAL_CACHE.get(k) is None else monkeypatch.setenv(k, REAL_CACHE[k])
    x = randn(32, 64)
    with pytest.raises(Exception) as e:
        build_export_run(MatmulBiasGelu, [x], tmp_path, {"device": "cuda"})
    msg = str(e.value)
    assert "bolt_module_load" in msg and ("no CUDA driver" in msg or "cuInit" in msg), msg[-2000:]
    # It got as far as running: the library was built and exported with the packed artifact
    # (stored uncompressed: its entry names are plain bytes), kernel library included.
    blob = (tmp_path / "model.so").read_bytes()
    assert b"manifest.json" in blob and b"kernels/libbolt_model.so" in blob


def test_the_exported_library_is_relocatable_and_plans_nothing_when_loaded(tmp_path):
    """The exported library carries the compiled artifact: moved elsewhere, with the build's
    caches gone, it loads it (nothing planned, no ONNX) and finds Bolt's runtime through the
    `bolt.library_path` global function a host registers (what `import bolt_tvm` does)."""
    x = randn(32, 64)
    build = tmp_path / "build"
    build.mkdir()
    _, got, lib = build_export_run(MatmulBiasGelu, [x], build, {"verbose": True})
    blob = lib.read_bytes()
    # A reference module's artifact has no kernel library (no nvcc at build), and no ONNX.
    assert b"manifest.json" in blob and b"kernels/libbolt_model.so" not in blob
    moved = tmp_path / "deploy" / "model.so"
    moved.parent.mkdir()
    shutil.move(str(lib), moved)
    shutil.rmtree(os.environ["BOLT_CACHE_DIR"] + "/tvm", ignore_errors=True)
    runtime = tmp_path / "runtime" / "libbolt_plugin.so"
    runtime.parent.mkdir()
    shutil.copy(bolt_tvm.library_path(), runtime)
    np.save(tmp_path / "x.npy", x)
    script = (
        "import sys, numpy as np, tvm, tvm_ffi\nfrom tvm import relax\n"
        f"tvm_ffi.register_global_func('bolt.library_path', lambda: {str(runtime)!r})\n"
        f"vm = relax.VirtualMachine(tvm.runtime.load_module({str(moved)!r}), tvm.cpu())\n"
        f"y = vm['main'](tvm.runtime.tensor(np.load({str(tmp_path / 'x.npy')!r}))).numpy()\n"
        f"np.save({str(tmp_path / 'y.npy')!r}, y)\n"
        f"print('mapped' if {str(runtime)!r} in open('/proc/self/maps').read() else 'not mapped')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "BOLT_LIBRARY"}
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["mapped"], r.stdout
    assert "loaded the packed artifact" in r.stderr and "planned" not in r.stderr.replace("planned at build", ""), r.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), got)
    np.testing.assert_allclose(got, tvm_reference(MatmulBiasGelu, [x]), rtol=1e-5, atol=1e-5)


def test_relax_to_onnx_rejects_what_bolt_cannot_read():
    @tvm.script.ir_module
    class M:
        @R.function
        def main(x: R.Tensor((8, 64), "float32")):
            R.func_attr({"global_symbol": "main"})
            with R.dataflow():
                o = R.nn.log_softmax(x)
                R.output(o)
            return o

    with pytest.raises(bolt_tvm.UnsupportedRelax, match="relax.nn.log_softmax"):
        bolt_tvm.function_to_onnx(M["main"], "main")


def test_resnet50_from_onnx_partitions_and_runs(tmp_path):
    from tvm.relax.frontend.onnx import from_onnx

    path = TESTDATA / "models" / "resnet50" / "model.onnx"
    if not path.is_file():
        missing = f"{path} missing (tests/python/make_models.py makes it)"
        pytest.fail(missing) if os.environ.get("BOLT_REQUIRE_TESTDATA") else pytest.skip(missing)
    mod = from_onnx(onnx.load(str(path)), shape_dict={"input": [1, 3, 224, 224]})
    x = randn(1, 3, 224, 224)
    offloaded, got, _ = build_export_run(mod, [x], tmp_path)
    composites = sum(offloaded.values(), [])
    # Every conv and the classifier GEMM are Bolt's. 49 convs take their BN (and activation,
    # residual add) along; the 4 downsample convs take none: their BN output feeds the block's
    # residual add directly, and a TVM pattern cannot end in batch_norm's tuple field.
    assert sum(c.startswith("bolt.conv2d_bn") for c in composites) == 49, composites
    assert composites.count("bolt.conv2d") == 4, composites
    assert sum(c.startswith("bolt.matmul") for c in composites) == 1, composites
    want = tvm_reference(mod, [x])
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
    assert np.argmax(got) == np.argmax(want)


@pytest.mark.parametrize("masking", ["add", "where"])
def test_attention_core_is_one_bolt_attention_kernel(tmp_path, masking):
    # The whole core, its head transposes included, is one composite that Bolt's planner runs
    # as one fused attention kernel (a masked_fill's where made an additive mask by a stitched
    # kernel); the result equals TVM's own build.
    b, s_, h, d = ATT["b"], ATT["s"], ATT["h"], ATT["d"]
    q, k, v = (randn(b, s_, h, d) for _ in range(3))
    pad = rng.random((b, 1, 1, s_)) < 0.3
    pad[..., 0] = False
    mask = np.where(pad, -1e4, 0.0).astype("float32") if masking == "add" else pad
    mod = AttentionCore if masking == "add" else MaskedFillCore
    offloaded, got, _ = build_export_run(mod, [q, k, v, mask], tmp_path)
    want = "bolt.attention_scale_mask_merge" if masking == "add" else "bolt.attention_scale_where_merge"
    assert list(offloaded.values()) == [[want]], offloaded
    (report,) = [bolt_tvm.REPORTS[x] for x in offloaded]
    (fused,) = report["attention_fused"]
    assert fused["fused"], fused
    np.testing.assert_allclose(got, tvm_reference(mod, [q, k, v, mask]), rtol=1e-5, atol=1e-5)


def _bench(*args, **kw):
    return subprocess.run([sys.executable, str(REPO / "bench" / "tvm" / "cuda.py"), *args],
                          capture_output=True, text=True, **kw)


def _real_cache_env() -> dict:
    """The environment with the real cache settings (where the pinned toolchain lives)."""
    env = dict(os.environ)
    if REAL_CACHE.get("BOLT_CACHE_DIR") is None:
        env.pop("BOLT_CACHE_DIR", None)
    else:
        env["BOLT_CACHE_DIR"] = REAL_CACHE["BOLT_CACHE_DIR"]
    return env


def test_the_tvm_gpu_bench_runs_exported_libraries_with_tvms_runtime_alone(tmp_path):
    """bench/tvm/cuda.py on the CPU: a ResNet-50 stem (from the test data) built by TVM alone and
    with Bolt's partitions, each exported library then loaded in a process that imports no TVM
    package (TVM's runtime libraries and tvm_ffi only, as on the GPU machine), run through the
    VM, and compared with TVM's llvm build; the results file says both match."""
    if not (TESTDATA / "models" / "resnet50" / "model.onnx").is_file():
        missing = "resnet50 test model missing (tests/python/make_models.py makes it)"
        pytest.fail(missing) if os.environ.get("BOLT_REQUIRE_TESTDATA") else pytest.skip(missing)
    out = tmp_path / "bench-tvm"
    env = _real_cache_env()
    r = _bench("prepare", "--target", "llvm", "--until", "maxpool", "--out", str(out), env=env, cwd=REPO)
    assert r.returncode == 0, r.stderr[-3000:]
    meta = json.loads((out / "meta.json").read_text())
    assert sum(meta["offloaded"].values(), []), meta  # Bolt took the stem's conv
    # The run: TVM's Python package is not importable there, only what the folder carries.
    site = tmp_path / "site"
    site.mkdir()
    packages = Path(tvm_ffi.__file__).parent.parent
    for name in ("tvm_ffi", "typing_extensions.py", "numpy", "numpy.libs"):
        if (packages / name).exists():
            os.symlink(packages / name, site / name)
    script = (f"import runpy, sys; sys.argv = [{str(out / 'cuda.py')!r}, 'run', '--device', 'cpu', '--iters', '2', "
              f"'--out', {str(tmp_path / 'results')!r}]\n"
              "try:\n    runpy.run_path(sys.argv[0], run_name='__main__')\n"
              "finally:\n    assert 'tvm' not in sys.modules, 'the run imported TVM'\n")
    r = subprocess.run([sys.executable, "-S", "-c", script], capture_output=True, text=True,
                       env={**env, "PYTHONPATH": str(site)})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    (result,) = (tmp_path / "results").glob("*-tvm.json")
    modules = json.loads(result.read_text())["modules"]
    assert set(modules) == {"tvm", "bolt"}, modules
    for which, m in modules.items():
        assert m["allclose"] and m["max_abs_err"] < 1e-3, (which, m)
        assert m["shape"] == [1, 64, 56, 56], m


def test_the_tvm_gpu_bench_builds_for_target_cuda_without_a_gpu(tmp_path):
    """The cuda half of bench/tvm/cuda.py's prepare: TVM's own cuda build of the stem and the
    one with Bolt's partition (`device=cuda`: its sm90 kernel library built here by nvcc) both
    build and export on a machine without a GPU; Bolt's library embeds its artifact with the
    kernel library, TVM's its kernels' CUDA source (compiled where it loads). Running them
    needs the GPU (the bench's run)."""
    if not (TESTDATA / "models" / "resnet50" / "model.onnx").is_file():
        missing = "resnet50 test model missing (tests/python/make_models.py makes it)"
        pytest.fail(missing) if os.environ.get("BOLT_REQUIRE_TESTDATA") else pytest.skip(missing)
    out = tmp_path / "bench-tvm"
    env = _real_cache_env()
    r = _bench("prepare", "--target", "cuda", "--until", "maxpool", "--no-wheel", "--out", str(out), env=env, cwd=REPO)
    assert r.returncode == 0, r.stderr[-3000:]
    bolt_lib, tvm_lib = (out / "bolt_cuda.so").read_bytes(), (out / "tvm_cuda.so").read_bytes()
    assert b"manifest.json" in bolt_lib and b"kernels/libbolt_model.so" in bolt_lib
    assert b"__global__" in tvm_lib
    assert (out / "tvm_runtime" / "libtvm_runtime_cuda.so").is_file()
