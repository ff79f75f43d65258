"""The whole-model GPU package (bench/models/) without a GPU: package.sh --dry builds one test
model's artifact with its real inputs and onnxruntime's recorded outputs, run.sh runs it on the
reference device as the GPU machine would on cuda, and summary.py's verdicts can fail: outputs
that differ from onnxruntime's are a mismatch, a device that is not there is an error."""
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    if not (Path(os.environ.get("BOLT_TESTDATA", REPO / "testdata")) / "models" / "small_conv_mlp").is_dir():
        pytest.fail("testdata/models/small_conv_mlp missing (tests/run.sh makes it)", pytrace=False)
    out = tmp_path_factory.mktemp("models") / "pkg"
    p = subprocess.run(["bash", str(REPO / "bench" / "models" / "package.sh"), "--dry", "--out", str(out)],
                       cwd=REPO, capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, f"package.sh failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return out


def run(package, results, *args):
    p = subprocess.run(["bash", str(package / "run.sh"), "--out", str(results), *args], capture_output=True, text=True,
                       timeout=600)
    files = list(results.glob("*-models.json"))
    assert len(files) == 1, p.stdout + p.stderr
    return p.returncode, json.loads(files[0].read_text())


def test_the_package_carries_the_binary_the_artifact_and_real_inputs(package):
    assert os.access(package / "bin" / "bolt", os.X_OK)
    assert (package / "models" / "small_conv_mlp-tf32" / "manifest.json").is_file()
    assert not (package / "models" / "small_conv_mlp-tf32" / ".build").exists()
    for f in ["inputs.npz", "expected.npz"]:
        assert (package / "inputs" / "small_conv_mlp" / f).is_file()
    assert sum(f.stat().st_size for f in package.rglob("*") if f.is_file()) < 64 * 1024 * 1024


def test_run_checks_against_the_reference_and_onnxruntime(package, tmp_path):
    rc, r = run(package, tmp_path / "ok", "--device", "reference")
    assert rc == 0 and r["counts"] == {"ok": 1, "mismatch": 0, "error": 0}, r
    case = r["cases"][0]
    assert case["case"] == "small_conv_mlp-tf32" and case["precision"] == "tf32"
    assert case["check"]["outputs"] and case["onnxruntime"]["outputs"]
    assert all(o["verdict"] == "ok" for o in case["check"]["outputs"] + case["onnxruntime"]["outputs"])
    assert (tmp_path / "ok").glob("*-models.md")


def test_outputs_unlike_onnxruntimes_are_a_mismatch(package, tmp_path):
    bad = tmp_path / "pkg"
    shutil.copytree(package, bad)
    expected = bad / "inputs" / "small_conv_mlp" / "expected.npz"
    z = dict(np.load(expected))
    np.savez(expected, **{k: v * 1.5 + 0.1 for k, v in z.items()})
    rc, r = run(bad, tmp_path / "bad", "--device", "reference")
    assert rc != 0 and r["cases"][0]["status"] == "mismatch", r


def test_a_missing_device_is_an_error_not_a_pass(package, tmp_path):
    if Path("/dev/nvidiactl").exists():
        pytest.skip("this machine has an NVIDIA driver: the cuda device may be present")
    rc, r = run(package, tmp_path / "cuda", "--device", "cuda")
    assert rc != 0 and r["counts"]["error"] == 1, r
    assert "CUDA driver" in r["cases"][0]["check"]["log_tail"]
