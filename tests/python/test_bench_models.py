"""The whole-model GPU package (bench/models/) without a GPU: package.sh --dry builds one test
model's artifact with its real inputs and onnxruntime's recorded outputs, run.sh runs it on the
reference device as the GPU machine would on cuda, and summary.py's verdicts can fail: outputs
that differ from onnxruntime's are reported, a device that is not there is an error, a model the
package could not build at a precision is listed with the reason. A GPU session's archives
(bench/session.sh) go through the same dry package."""
import json
import os
import shutil
import sys
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
    assert rc == 0 and r["counts"] == {"ok": 1, "mismatch": 0, "precision": 0, "error": 0, "not-built": 0}, r
    case = r["cases"][0]
    assert case["case"] == "small_conv_mlp-tf32" and case["precision"] == "tf32"
    assert case["check"]["outputs"] and case["onnxruntime"]["outputs"]
    assert all(o["verdict"] == "ok" for o in case["check"]["outputs"] + case["onnxruntime"]["outputs"])
    assert (tmp_path / "ok").glob("*-models.md")


def test_outputs_unlike_onnxruntimes_are_reported(package, tmp_path):
    bad = tmp_path / "pkg"
    shutil.copytree(package, bad)
    expected = bad / "inputs" / "small_conv_mlp" / "expected.npz"
    z = dict(np.load(expected))
    np.savez(expected, **{k: v * 1.5 + 0.1 for k, v in z.items()})
    rc, r = run(bad, tmp_path / "bad", "--device", "reference")
    # The device agrees with the reference device; the answer is not onnxruntime's.
    assert r["cases"][0]["status"] == "precision", r
    assert rc == 0, "precision loss is a result, not a failed run"


def test_a_missing_device_is_an_error_not_a_pass(package, tmp_path):
    if Path("/dev/nvidiactl").exists():
        pytest.skip("this machine has an NVIDIA driver: the cuda device may be present")
    rc, r = run(package, tmp_path / "cuda", "--device", "cuda")
    assert rc != 0 and r["counts"]["error"] == 1, r
    assert "CUDA driver" in r["cases"][0]["check"]["log_tail"]


def test_a_model_not_built_at_a_precision_is_listed_with_its_reason(package, tmp_path):
    pkg = tmp_path / "pkg"
    shutil.copytree(package, pkg)
    (pkg / "models" / "magika-f16.skipped").write_text("error: --precision f16: tensor 'sum' ... beyond f16's largest value\n")
    rc, r = run(pkg, tmp_path / "res", "--device", "reference")
    skipped = [c for c in r["cases"] if c["status"] == "not-built"]
    assert rc == 0 and len(skipped) == 1 and skipped[0]["precision"] == "f16" and "beyond f16" in skipped[0]["reason"], r


def test_a_device_unlike_the_reference_device_fails_the_run(tmp_path):
    """summary.py on logs as a GPU run would write them when a kernel is wrong."""
    logs, pkg = tmp_path / "logs", tmp_path / "pkg"
    logs.mkdir()
    (pkg / "models").mkdir(parents=True)
    (logs / "m-f16.check.log").write_text(
        "device cuda (NVIDIA H100)\nMISMATCH y: max abs diff 3.000e0 at 5 (7 of 10 outside atol 0.02 + rtol 0.02 x |ref|, f16)\n")
    (logs / "m-f16.check.log.rc").write_text("1\n")
    (logs / "m-f16.ort.log").write_text("ok y: max abs diff 1.000e-3 at 0 (0 of 10 outside atol 0.02 + rtol 0.02 x |ref|, f16)\n")
    (logs / "m-f16.ort.log.rc").write_text("0\n")
    p = subprocess.run([sys.executable, str(REPO / "bench" / "models" / "summary.py"), "--logs", str(logs), "--out",
                        str(tmp_path / "out"), "--device", "cuda", "--package", str(pkg)], capture_output=True, text=True)
    r = json.loads(next((tmp_path / "out").glob("*-models.json")).read_text())
    assert p.returncode == 1 and r["cases"][0]["status"] == "mismatch", (p.stdout, p.stderr, r)
    assert r["cases"][0]["check"]["device"] == "cuda (NVIDIA H100)"


def test_generated_models_are_made_built_and_run_at_two_batches_where_they_run(tmp_path):
    """`package.sh --generate`: the model is generated from its seeded script where run.sh
    runs, compiled there with the packaged CUTLASS headers (the build timed), and run at batch 1
    and at the larger batch, each checked against onnxruntime's outputs (repeated for the larger
    batch). The kernels are those of the dry package's artifact: the shared kernel cache has them."""
    pkg = tmp_path / "gen"
    p = subprocess.run(["bash", str(REPO / "bench" / "models" / "package.sh"), "--models", "none", "--generate",
                        "small_conv_mlp", "--arch", "sm80", "--out", str(pkg)], cwd=REPO, capture_output=True, text=True,
                       timeout=1200)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert not list((pkg / "models").iterdir()), "nothing prebuilt travels with --models none"
    assert (pkg / "generated.txt").read_text().split()[:3] == ["small_conv_mlp", "tf32", "4"]
    cache = os.environ.get("BOLT_CACHE_DIR") or str(Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "bolt")
    env = {**os.environ, "BOLT_CACHE_DIR": cache, "PYTHON": sys.executable}
    p = subprocess.run(["bash", str(pkg / "run.sh"), "--out", str(tmp_path / "res"), "--device", "reference",
                        "--arch", "sm80"], capture_output=True, text=True, timeout=1200, env=env)
    r = json.loads(next((tmp_path / "res").glob("*-models.json")).read_text())
    assert p.returncode == 0 and r["counts"]["ok"] == 1, p.stdout[-3000:] + p.stderr[-3000:]
    case = r["cases"][0]
    assert case["build"]["exit"] == 0 and case["build"]["wall_s"] > 0
    assert case["big_batch"] == 4 and case["big"]["outputs"][0]["verdict"] == "ok"
    assert "expected_b4.npz" in (tmp_path / "res" / "models-logs" / "small_conv_mlp-tf32.big.log").read_text()
    assert "| small_conv_mlp | tf32 | 4 |" in next((tmp_path / "res").glob("*-models.md")).read_text()


def test_the_packaged_cutlass_headers_hold_every_example_directory_a_kernel_family_builds_from():
    import re
    dirs = set()
    for f in (REPO / "codegen" / "src").glob("*.rs"):
        dirs |= set(re.findall(r'EXAMPLE_DIR: &str = "([^"]+)"', f.read_text()))
    assert len(dirs) >= 4, dirs
    script = (REPO / "bench" / "cutlass_headers.sh").read_text()
    assert not [d for d in dirs if d not in script], "add the missing directories to cutlass_headers.sh's tar"


def session(tmp_path, *args):
    env = dict(os.environ, OUT=str(tmp_path / "back"), BOLT_SESSION_DIR=str(tmp_path / "w"))
    return subprocess.run(["bash", str(REPO / "bench" / "session.sh"), *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=1200)


def test_a_gpu_session_part_travels_as_one_archive_and_comes_back_as_one(tmp_path):
    """bench/session.sh: prepare packs a part (here the dry models part) into one archive under
    the carry limit; run unpacks it, runs its steps within the budget and packs results, logs and
    each step's exit status into one archive; a step the budget cannot fit is recorded skipped."""
    import tarfile
    p = session(tmp_path, "prepare", "--dry", "--parts", "models", "--out", str(tmp_path / "pkg"))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    archive = tmp_path / "pkg" / "models.tar.xz"
    assert 0 < archive.stat().st_size < 64 * 1024 * 1024
    assert not (tmp_path / "pkg" / "stage").exists()

    def back(*args):
        p = session(tmp_path, "run", "models", "--dry", "--archive", str(archive), *args)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        out = tmp_path / "unpacked"
        shutil.rmtree(out, ignore_errors=True)
        with tarfile.open(tmp_path / "back" / "session-models.tgz") as t:
            t.extractall(out, filter="data")
        steps = [line.split("\t") for line in (out / "steps.tsv").read_text().splitlines()[1:]]
        return out, {s[0]: s[1] for s in steps}

    out, steps = back()
    assert steps == {"models": "0"}, steps
    (summary,) = (out / "results").glob("*-models.json")
    assert json.loads(summary.read_text())["counts"]["ok"] == 1
    assert "run models" in (out / "machine.txt").read_text() and (out / "commit.txt").read_text().strip()
    out, steps = back("--budget-s", "10")
    assert steps == {"models": "skipped"}, steps
    assert "models skipped: " in (out / "logs" / "session.log").read_text()

    p = session(tmp_path, "run", "models", "--archive", str(archive))
    assert p.returncode == 2 and "dry package" in p.stderr
