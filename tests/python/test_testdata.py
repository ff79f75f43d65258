"""Checks on the generated test data itself (tests/run.sh generates it before pytest), so a
Rust-side failure can be trusted to be Bolt's fault rather than a broken or stale case."""
import json
import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from gen_conformance import BOLT_OPS, op_types

TESTDATA = Path(os.environ.get("BOLT_TESTDATA", Path(__file__).resolve().parents[2] / "testdata"))
CONFORMANCE = TESTDATA / "onnx-conformance"
MODELS = TESTDATA / "models"
needs_conformance = pytest.mark.skipif(not (CONFORMANCE / "index.json").exists(),
                                       reason="no conformance data: run tests/run.sh")


def load_dataset(ds: Path, prefix: str) -> list[onnx.TensorProto]:
    return [onnx.load_tensor(str(p)) for p in sorted(ds.glob(f"{prefix}_*.pb"), key=lambda p: int(p.stem.split("_")[1]))]


def graph_io(model: onnx.ModelProto) -> tuple[list[str], list[str]]:
    inits = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in inits], [o.name for o in model.graph.output]


@needs_conformance
def test_conformance_cases_match_index():
    index = json.loads((CONFORMANCE / "index.json").read_text())
    assert len(index) > 300
    for e in index:
        d = CONFORMANCE / e["dir"]
        model = onnx.load(str(d / "model.onnx"))
        assert sorted(op_types(model.graph)) == e["ops"], e["case"]
        assert set(e["ops"]) <= BOLT_OPS, e["case"]
        ins, outs = graph_io(model)
        datasets = sorted(d.glob("test_data_set_*"))
        assert datasets, e["case"]
        for ds in datasets:
            # Runners may match tensors by name: names must be the graph's I/O names.
            assert [t.name for t in load_dataset(ds, "input")] == ins[:len(list(ds.glob("input_*.pb")))], ds
            assert [t.name for t in load_dataset(ds, "output")] == outs, ds


@needs_conformance
def test_every_bolt_op_has_conformance_cases():
    index = json.loads((CONFORMANCE / "index.json").read_text())
    covered = {op for e in index for op in e["exercises"]}
    assert BOLT_OPS - covered == set()


MODEL_DIRS = sorted(p.parent for p in MODELS.glob("*/model.onnx"))


@pytest.mark.parametrize("model_dir", MODEL_DIRS, ids=[p.name for p in MODEL_DIRS])
def test_model_reference_outputs_reproduce(model_dir: Path):
    """Reference outputs are stale or corrupt if the pinned ORT no longer reproduces them."""
    meta = json.loads((model_dir / "meta.json").read_text())
    assert meta["ort_version"] == ort.__version__
    sess = ort.InferenceSession(str(model_dir / "model.onnx"), providers=["CPUExecutionProvider"])
    datasets = sorted(model_dir.glob("test_data_set_*"))
    assert len(datasets) >= 2
    for ds in datasets:
        feeds = {t.name: numpy_helper.to_array(t) for t in load_dataset(ds, "input")}
        expected = load_dataset(ds, "output")
        got = sess.run([t.name for t in expected], feeds)
        for t, g in zip(expected, got):
            np.testing.assert_allclose(g, numpy_helper.to_array(t), rtol=1e-4, atol=1e-4, err_msg=f"{ds}/{t.name}")
