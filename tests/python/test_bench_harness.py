"""The GPU benchmark harness (bench/) without a GPU: builds the dry package with
bench/package.sh (a handful of sm80 kernels, ~30 s of nvcc cold, none warm), runs every suite
with --dry-run from inside the package as the GPU machine would, renders the results, and
checks what they say: schema, every workload of ../shared/workloads listed, host checks
(can_implement) passed, tolerances computed, no GPU numbers, honest not-available reasons."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
from harness import common, reference  # noqa: E402

SUITES = ["kernels", "gemm", "conv", "epilogue", "b2b", "padding", "attention", "e2e"]
LIMIT = 64 * 1024 * 1024


def workloads_dir():
    # ../shared/workloads of the repository or of an ancestor (worktrees live below the clone).
    env = os.environ.get("BOLT_WORKLOADS")
    if env:
        return Path(env)
    for a in [REPO, *REPO.parents]:
        p = a / ".." / "shared" / "workloads"
        if (p / "gemm.json").is_file():
            return p.resolve()
    pytest.fail("no ../shared/workloads beside the repository (set BOLT_WORKLOADS)", pytrace=False)


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "pkg"
    env = dict(os.environ, BOLT_WORKLOADS=str(workloads_dir()))
    t0 = time.monotonic()
    p = subprocess.run(["bash", str(REPO / "bench" / "package.sh"), "--profile", "dry", "--out", str(out)],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, f"package.sh failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    print(f"package.sh --profile dry: {time.monotonic() - t0:.1f}s\n{p.stdout[-600:]}")
    return out


@pytest.fixture(scope="module")
def results(package, tmp_path_factory):
    res = tmp_path_factory.mktemp("results")
    env = dict(os.environ, PYTHON=sys.executable)
    t0 = time.monotonic()
    p = subprocess.run(["bash", str(package / "gpu.sh"), "--dry-run", "--out", str(res)], cwd=package, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"gpu.sh --dry-run failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    print(f"gpu.sh --dry-run: {time.monotonic() - t0:.1f}s\n{p.stdout}")
    files = {}
    for s in SUITES:
        found = list(res.glob(f"*-dryrun-{s}.json"))
        assert len(found) == 1, f"{s}: expected one result file in {res}, found {found}"
        files[s] = json.loads(found[0].read_text())
        assert found[0].with_suffix(".md").is_file()
    return res, files


def test_package_is_complete_and_under_the_carry_limit(package):
    size = sum(f.stat().st_size for f in package.rglob("*") if f.is_file())
    assert size < LIMIT, f"package is {size} bytes"
    for rel in ["package.json", "gpu.sh", "README.md", "harness/run.py", "harness/suites.py", "workloads/gemm.json",
                "workloads/b2b.json", "kernels/libbolt_bench_sm80.so", "b2b/libbolt_bench_b2b.so", "attention/libbolt_bench_attention.so",
                "plugin/libbolt_plugin.so", "plugin/python/bolt_ort/__init__.py"]:
        assert (package / rel).is_file(), f"{rel} missing from the package"
    pkg = json.loads((package / "package.json").read_text())
    assert pkg["profile"] == "dry" and pkg["format"] == 1
    # sm80 kernels carry compute_80 PTX: sm_80 SASS alone does not load on an H100.
    manifest = json.loads((package / "kernels" / "libbolt_bench_sm80.manifest.json").read_text())
    assert any("compute_80,code=compute_80" in f for f in manifest["nvcc_flags"]["sm_80"]), manifest["nvcc_flags"]
    b2b = json.loads((package / "b2b" / "libbolt_bench_b2b.b2b.json").read_text())
    assert any("compute_80,code=compute_80" in f for f in b2b["nvcc_flags"])


def test_rust_and_python_read_the_same_workloads(package):
    """bolt-profiler's load_shapes_file (Rust, in the packer) and the harness's walker (Python)
    are two readers of the same files: the case lists must agree exactly."""
    pkg = json.loads((package / "package.json").read_text())
    want = set(common.expected_cases(workloads_dir()))
    have = {(c["suite"], c["workload"]) for s in ["gemm", "conv", "epilogue", "padding", "b2b"] for c in pkg["suites"][s]}
    assert have == want, f"only in package: {sorted(have - want)}; only in files: {sorted(want - have)}"
    names = common.workload_names(workloads_dir())
    assert len(names["gemm.json"]) >= 20 and len(names["conv2d.json"]) >= 20 and len(names["b2b.json"]) == 14


def test_results_follow_the_schema_and_hold_no_gpu_numbers(results):
    res, files = results
    for s, r in files.items():
        for key in ["schema", "suite", "mode", "timings", "date", "command", "commit", "environment", "method",
                    "cases", "summary", "clocks_before", "clocks_after"]:
            assert key in r, f"{s}: no `{key}`"
        assert r["schema"] == common.SCHEMA and r["suite"] == s and r["mode"] == "dry-run"
        assert "no number here is a GPU measurement" in r["timings"]
        assert r["environment"]["gpu"]["name"] == "none (dry run)"
        assert r["commit"], f"{s}: the package should record the commit"
        assert sum(r["summary"]["counts"].values()) == len(r["cases"])
        assert "failed" not in r["summary"]["counts"], [c for c in r["cases"] if c["status"] == "failed"]
        text = json.dumps(r)
        assert "median_us" not in text and "raw_us" not in text, f"{s}: a dry run must carry no timings"
        md = next(res.glob(f"*-dryrun-{s}.md")).read_text()
        assert "DRY RUN" in md and md.count("\n|") >= len(r["cases"]) + 1
        if s in ("kernels", "gemm", "conv", "epilogue", "b2b", "padding"):
            assert r["tolerance_policy"]["rtol"] == reference.RTOL


def test_every_workload_is_listed_and_every_packaged_kernel_answers(results):
    _, files = results
    for s, name in common.expected_cases(workloads_dir()):
        ids = {c["workload"] for c in files[s]["cases"]}
        assert name in ids, f"{s}: workload {name} not listed"
    for s in ["kernels", "gemm", "conv", "epilogue", "b2b", "padding"]:
        ok = [c for c in files[s]["cases"] if c["status"] == "dry-ok"]
        assert ok, f"{s}: no case passed its host checks"
        for c in files[s]["cases"]:
            assert c["status"] in ("dry-ok", "not-built", "not-available"), c
            if c["status"] != "dry-ok":
                assert c.get("reason"), f"{c['id']}: {c['status']} without a reason"


def test_unsupported_chains_say_why(results):
    _, files = results
    mlp = [c for c in files["b2b"]["cases"] if c["workload"].startswith("mlp_chains/")]
    assert len(mlp) == 2 and all(c["status"] == "not-available" for c in mlp)
    assert "multi-stage b2b mainloop" in mlp[0]["reason"] and "at most 4" in mlp[1]["reason"]


def test_kernels_suite_checks_tolerances_and_the_reference(results):
    _, files = results
    k = files["kernels"]
    for c in k["cases"]:
        for key in ("rtol", "atol", "normwise_max"):
            assert c["tolerance"][key] > 0
        if c["status"] == "dry-ok":
            st = c["checker_selftest"]
            assert st["ok"] and st["rounded_f16_passes"] and st["off_by_16ulp_fails"] and st["unwritten_fails"], st
    assert k["summary"]["epilogue_reference_ok"]
    assert k["summary"]["epilogue_reference_vs_expr_eval_max_abs"], "no epilogue samples compared"
    assert k["summary"]["memcheck"]["status"] == "not-run" and "dry run" in k["summary"]["memcheck"]["reason"]
    assert {"gemm", "conv2d_fprop"} <= set(k["summary"]["memcheck_plan"])


def test_e2e_reports_the_plugin_device_and_tuning_time(results):
    _, files = results
    e = files["e2e"]
    assert {c["workload"] for c in e["cases"]} == {"resnet50", "bert_base"}
    ort = e["summary"]["ort_bolt"]
    assert ort["status"] == "not-available" and "device=cuda" in ort["reason"], ort
    assert ort["reference_device"] is True, ort
    models = Path(os.environ.get("BOLT_TESTDATA", REPO / "testdata")) / "models"
    for c in e["cases"]:
        if (models / c["workload"] / "model.onnx").is_file():
            t = c["tuning"]
            assert t["status"] == "ok" and t["analytic_tuning_seconds"] > 0 and t["distinct_workloads"] > 0, t


def test_render_writes_tables_and_a_roofline(results):
    res, _ = results
    summary = (res / "summary.md").read_text()
    assert all(f"# {s} — DRY RUN" in summary for s in SUITES)
    svg = next(res.glob("*-dryrun-roofline.svg")).read_text()
    assert svg.startswith("<svg") and "DRY RUN: no GPU measurements" in svg and "<polyline" in svg


def test_compare_implements_the_policy():
    import numpy as np
    ref = np.linspace(-3, 3, 101)
    assert reference.compare(np.float16(ref).astype(np.float64), ref)["ok"]
    bad = ref.copy()
    bad[7] = np.nan
    r = reference.compare(bad, ref)
    assert not r["ok"] and r["nonfinite"] == 1
    off = ref + 0.05
    assert not reference.compare(off, ref)["ok"]
    assert reference.tolerance(2)["rtol"] == reference.RTOL * reference.CHAIN_FACTOR


def test_gemm_softmax_reference_is_compared_at_the_row_width():
    """GemmSoftmax's check: softmax of the f16-stored D, scaled by N, so the policy's atol
    (meant for O(1) outputs) cannot hide an error in values of about 1/N."""
    import numpy as np
    rng = np.random.default_rng(1)
    p = {"kind": "gemm", "m": 6, "n": 400, "k": 16, "batch": 1}
    form = {"beta_source": False, "bias": True, "activation": "identity", "residual": None}
    a, b = reference.f16(rng.uniform(-1, 1, (6, 16))), reference.f16(rng.uniform(-1, 1, (400, 16)) / 4)
    bias = reference.f16(rng.uniform(-0.5, 0.5, 400))
    want, scale = reference.kernel_reference("gemm_softmax", p, form, a, b, None, bias, 0.75, 0.5)
    assert scale == 400 and np.allclose(want.sum(axis=-1), 400)
    d = reference.reference(p, form, a, b, None, bias, 0.75, 0.5)
    good = np.float16(reference.row_softmax(np.float16(d)))
    assert reference.compare(good * scale, want)["ok"]
    # One element 10% off: within the atol unscaled (values are about 1/400), caught at the
    # row width.
    bad = good.astype(np.float64)
    bad[2, 7] *= 1.10
    assert reference.compare(bad, want / scale)["ok"], "unscaled, the atol hides it"
    assert not reference.compare(bad * scale, want)["ok"]
    plain, one = reference.kernel_reference("gemm", p, form, a, b, None, bias, 0.75, 0.5)
    assert one == 1.0 and np.array_equal(plain, d)


def run_harness(package, *args):
    return subprocess.run([sys.executable, "-m", "harness.run", "--pkg", str(package), *args], cwd=package,
                          capture_output=True, text=True, timeout=120)


def test_bad_input_names_the_file(package, tmp_path):
    broken = tmp_path / "pkg"
    broken.mkdir()
    (broken / "package.json").write_text("{not json")
    p = run_harness(package, "--dry-run", "--out", str(tmp_path / "o"), "--suites", "gemm")
    assert p.returncode == 0
    p = subprocess.run([sys.executable, "-m", "harness.run", "--pkg", str(broken), "--dry-run"], cwd=package,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and f"{broken / 'package.json'}: not valid JSON" in p.stderr, p.stderr
    wl = tmp_path / "wl"
    wl.mkdir()
    for f in (package / "workloads").glob("*.json"):
        (wl / f.name).write_text(f.read_text())
    gemm = json.loads((wl / "gemm.json").read_text())
    gemm["square"][0]["M"] = 0
    (wl / "gemm.json").write_text(json.dumps(gemm))
    p = run_harness(package, "--dry-run", "--workloads", str(wl), "--out", str(tmp_path / "o2"))
    assert p.returncode == 2 and "gemm.json" in p.stderr and "square/0" in p.stderr and "`M` = 0" in p.stderr, p.stderr
    p = run_harness(package, "--dry-run", "--suites", "gemm,nope")
    assert p.returncode == 2 and "nope" in p.stderr


def test_attention_suite_lists_both_kernels_and_says_why_a_case_has_no_hopper_one(package, results):
    """The dry package builds the first attention case's sm80 kernel and its host checks pass;
    the masked case says why it has no Hopper kernel (example 88 takes no mask); the unmasked
    and causal cases would list the Hopper kernel in the full profile (`--no-build` to see it),
    the head-dim-256 case its workspace."""
    pkg = json.loads((package / "package.json").read_text())
    cases = {c["workload"]: c for c in pkg["suites"]["attention"]}
    masked = cases["bert_base_b32_s128"]
    assert masked["status"] == "ready" and [k["arch"] for k in masked["kernels"]] == ["sm80"]
    assert "no additive mask" in masked["reason"]
    assert all(c["status"] == "not-built" for w, c in cases.items() if w != "bert_base_b32_s128")
    rec = {r["workload"]: r for r in results[1]["attention"]["cases"]}
    assert rec["bert_base_b32_s128"]["status"] == "dry-ok"
    assert rec["bert_base_b32_s128"]["tolerance"] == reference.tolerance(2)
    full = subprocess.run([str(REPO / "target" / "release" / "examples" / "bench_package"), "--workloads",
                           str(workloads_dir()), "--out", str(package.parent / "full"), "--profile", "full",
                           "--no-build"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert full.returncode == 0, full.stderr[-2000:]
    listed = json.loads((package.parent / "full" / "package.json").read_text())["suites"]["attention"]
    assert any(c["mask"] == "causal" and all("_causal_" in k["symbol"] for k in c["kernels"]) for c in listed)
    for c in listed:
        archs = [k["arch"] for k in c["kernels"]]
        assert archs == (["sm80"] if c["mask"] == "key_padding" else ["sm80", "sm90"]), (c["id"], archs)
        sm90 = [k for k in c["kernels"] if k["arch"] == "sm90"]
        p = c["problem"]
        assert all(k["workspace_bytes"] == 4 * p["batch"] * p["heads"] * p["seq_q"] for k in sm90), c["id"]
    # Head dim 256: the sm80 kernel accumulates the output in f32 in its workspace.
    (d256,) = [c for c in listed if c["problem"]["head_dim"] == 256]
    p = d256["problem"]
    assert d256["kernels"][0]["workspace_bytes"] == 4 * p["batch"] * p["heads"] * p["seq_q"] * 256, d256


def test_profiler_truth_compares_the_analytic_first_pick_with_the_best_timed():
    from harness.suites import profiler_truth
    records = [
        {"bolt_tried": [{"median_us": 10.0}, {"median_us": 9.5}, {"median_us": 12.0}]},  # within 10%
        {"bolt_tried": [{"median_us": 8.0}, {"median_us": 9.0}]},  # the fastest
        {"bolt_tried": [{"median_us": 20.0}, {"median_us": 10.0}]},  # 2x off
        {"bolt_tried": [{"can_implement": "unsupported problem"}, {"median_us": 1.0}, {"median_us": 2.0}]},  # no top-1
        {"bolt_tried": [{"median_us": 5.0}]},  # nothing to compare with
    ]
    t = profiler_truth(records)
    assert t["cases"] == 3
    assert t["top1_fastest"] == pytest.approx(1 / 3) and t["top1_within_10pct"] == pytest.approx(2 / 3)
    assert t["worst_top1_over_best"] == 2.0
    assert profiler_truth([])["cases"] == 0


def test_cases_filter_runs_only_the_named_cases(package, tmp_path):
    """`--cases`: a rerun of chosen cases (a failing kernel with CUDA_MODULE_LOADING=EAGER, say)
    runs those alone, lists no missing workloads, and records the CUDA switches it ran under."""
    res = tmp_path / "res"
    p = subprocess.run([sys.executable, "-m", "harness.run", "--pkg", str(package), "--dry-run", "--suites", "kernels",
                        "--cases", "sm80/gemm/", "--out", str(res)], cwd=package, capture_output=True, text=True,
                       timeout=120, env={**os.environ, "CUDA_MODULE_LOADING": "EAGER"})
    assert p.returncode == 0, p.stdout + p.stderr
    r = json.loads(next(res.glob("*kernels.json")).read_text())
    ids = [c["id"] for c in r["cases"]]
    assert ids and all("sm80/gemm/" in i for i in ids), ids
    assert r["cuda_env"]["CUDA_MODULE_LOADING"] == "EAGER"


def test_tables_print_small_errors_in_scientific_notation():
    """A kernel's 4.9e-4 error printed with one fixed decimal read as 0.0 in the results tables."""
    assert common.fmt(4.891e-4) == "4.89e-04"
    assert common.fmt(0.0) == "0.0"
    assert common.fmt(12.34) == "12.3"
    assert common.fmt(None) == "-"
    row = common.markdown_table(["err"], [[1.5e-3]])
    assert "1.50e-03" in row and "0.0" not in row
