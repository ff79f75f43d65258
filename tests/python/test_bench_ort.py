"""bench/ort/ctx.py without a GPU: `prepare --generate` packs a model to be made where `run`
runs (seeded generator, CUTLASS headers), and `run` makes it, compiles it once through ONNX
Runtime (EPContext), and checks it at batch 1 and at the list's larger batch against
onnxruntime's outputs, here on Bolt's reference device; a wrong answer fails the run."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    if not (Path(os.environ.get("BOLT_TESTDATA", REPO / "testdata")) / "models" / "small_conv_mlp").is_dir():
        pytest.fail("testdata/models/small_conv_mlp missing (tests/run.sh makes it)", pytrace=False)
    out = tmp_path_factory.mktemp("ort") / "pkg"
    p = subprocess.run([sys.executable, str(REPO / "bench/ort/ctx.py"), "prepare", "--models", "none", "--generate",
                        "small_conv_mlp", "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    return out


def run(pkg, results):
    # The kernel cache with the toolchain (the pinned install lives in it).
    cache = os.environ.get("BOLT_CACHE_DIR") or str(Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "bolt")
    p = subprocess.run([sys.executable, str(pkg / "ctx.py"), "run", "--device", "reference", "--out", str(results)],
                       capture_output=True, text=True, timeout=1200, env={**os.environ, "BOLT_CACHE_DIR": cache})
    return p, json.loads(next(results.glob("*-ort.json")).read_text())


def test_a_generated_model_is_made_compiled_once_and_checked_at_two_batches(package, tmp_path):
    assert not list(package.glob("*_ctx.onnx")), "nothing compiled here: it is made where it runs"
    assert (package / "generated.txt").read_text().split()[:3] == ["small_conv_mlp", "tf32", "4"]
    p, r = run(package, tmp_path / "res")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    (case,) = r["cases"]
    assert case["status"] == "ok" and case["build_seconds"] > 0 and case["device"] == "reference"
    assert case["providers"][0] == "BoltExecutionProvider"
    assert case["big"]["batch"] == 4 and case["big"]["outputs"][0]["values"] == 40
    assert all(c["outside"] == 0 for c in case["outputs"] + case["big"]["outputs"])


def test_an_answer_unlike_onnxruntimes_at_the_larger_batch_fails_the_run(package, tmp_path):
    pkg = tmp_path / "pkg"
    shutil.copytree(package, pkg)
    p, _ = run(pkg, tmp_path / "first")  # makes the model and its data
    assert p.returncode == 0
    expected = pkg / "data" / "small_conv_mlp" / "expected_b4.npz"
    np.savez(expected, **{k: v + 1.0 for k, v in np.load(expected).items()})
    p, r = run(pkg, tmp_path / "second")
    assert r["cases"][0]["reused"], "a second run reuses what the first made"
    assert p.returncode == 1 and r["cases"][0]["status"] == "mismatch", r
