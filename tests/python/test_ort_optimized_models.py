"""Every model of the test data as onnxruntime saves it after optimising it (a session's
`optimized_model_filepath` at ORT_ENABLE_EXTENDED, what many deployments ship): its fused
com.microsoft ops (FusedConv, FusedGemm, FusedMatMul, Gelu, BiasGelu, QuickGelu,
SkipLayerNormalization, ...) and the normalisations it writes into ONNX's own domain at any
opset. Bolt must import it, plan it with no more host work than the model as exported, and
its planned graph must compute the model's test outputs (onnxruntime CPU's, of the model as
exported): the rewriting checked against values nobody here computed.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "plugin" / "python"))
import bolt_ort  # noqa: E402

ORT_CPU = "CPUExecutionProvider"
TESTDATA = Path(os.environ.get("BOLT_TESTDATA", REPO / "testdata"))
MODEL_DIRS = sorted(p.parent for p in (TESTDATA / "models").glob("*/model.onnx"))
# As tests/corpus.rs: deep models accumulate rounding; meta.json may widen it, saying why.
MODEL_TOL = (1e-3, 1e-4)
OTHER_DOMAIN = "operator from a non-default domain"


def bolt() -> Path:
    p = REPO / "target" / "release" / "bolt"
    if not p.exists():
        pytest.fail(f"{p} does not exist: build it with `cargo build --release --bin bolt`", pytrace=False)
    return p


def optimized(model_dir: Path, out: Path) -> Path:
    """The case directory of `model_dir` with the model onnxruntime saved after optimising it."""
    out.mkdir()
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(out / "model.onnx")
    so.log_severity_level = 3
    ort.InferenceSession(str(model_dir / "model.onnx"), so, providers=[ORT_CPU])
    for d in model_dir.glob("test_data_set_*"):
        (out / d.name).symlink_to(d)
    return out


def host_work(model: Path) -> tuple[int, list]:
    """Ops `bolt report` leaves to the host other than copies and shape computations (host
    work by design), and its host table."""
    r = subprocess.run([str(bolt()), "report", "--json", str(model)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    ops = sum(sum(h["ops"].values()) for h in rep["host"])
    return ops - rep["device_copies"] - rep["shape_computations"], rep["host"]


@pytest.mark.parametrize("model_dir", MODEL_DIRS, ids=[p.name for p in MODEL_DIRS])
def test_the_model_onnxruntime_saves_after_optimising_plans_and_computes_the_model(model_dir: Path, tmp_path: Path):
    case = optimized(model_dir, tmp_path / model_dir.name)
    fused = sorted({n.op_type for n in onnx.load(str(case / "model.onnx"), load_external_data=False).graph.node
                    if n.domain == "com.microsoft"})
    before, _ = host_work(model_dir / "model.onnx")
    after, table = host_work(case / "model.onnx")
    assert after <= before, f"{fused}: {before} host ops as exported, {after} as onnxruntime saves it: {table}"
    tol = json.loads((model_dir / "meta.json").read_text()).get("tolerance") or {}
    rtol, atol = tol.get("rtol", MODEL_TOL[0]), tol.get("atol", MODEL_TOL[1])
    r = subprocess.run([str(bolt()), "check", "--planned", "--rtol", str(rtol), "--atol", str(atol), str(case)],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        # onnxruntime's own quantized kernels (DynamicQuantizeLSTM, ...) stay its: ORT runs
        # them, Bolt's reference executor does not, which is all `bolt check` may say.
        kept = [op for h in table if h["reason"] == OTHER_DOMAIN for op in h["ops"]]
        assert kept and "the reference executor cannot run it: " + OTHER_DOMAIN in r.stdout, (fused, r.stdout[-3000:])


def test_an_onnxruntime_optimised_bert_runs_whole_in_bolts_provider(tmp_path: Path):
    """BERT-base as onnxruntime saves it (SkipLayerNormalization, BiasGelu, FusedMatMul) through
    Bolt's ONNX Runtime provider: every node but the host's copies runs on Bolt, one fused node
    and the outputs are onnxruntime CPU's on the model as exported."""
    src = TESTDATA / "models" / "bert_base"
    if not (src / "model.onnx").exists():
        pytest.fail(f"{src} is missing: tests/run.sh generates it", pytrace=False)
    case = optimized(src, tmp_path / "bert")
    model = onnx.load(str(case / "model.onnx"))
    assert {"SkipLayerNormalization", "BiasGelu"} <= {n.op_type for n in model.graph.node if n.domain == "com.microsoft"}
    bolt_ort.register()
    so = ort.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    sess = bolt_ort.session(model.SerializeToString(), so=so)
    eps = [(n.op_type, sub.ep_name) for sub in sess.get_provider_graph_assignment_info() for n in sub.get_nodes()]
    on_ort = [op for op, ep in eps if ep != bolt_ort.EP_NAME]
    assert not on_ort, on_ort
    ds = case / "test_data_set_0"
    feeds = {}
    for i, x in enumerate(sess.get_inputs()):
        feeds[x.name] = onnx.numpy_helper.to_array(onnx.load_tensor(str(ds / f"input_{i}.pb")))
    want = [onnx.numpy_helper.to_array(onnx.load_tensor(str(ds / f"output_{i}.pb"))) for i in range(len(sess.get_outputs()))]
    for got, w in zip(sess.run(None, feeds), want):
        np.testing.assert_allclose(got, w, rtol=MODEL_TOL[0], atol=MODEL_TOL[1])
