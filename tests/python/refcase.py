"""Shared helpers: write a model directory in the ONNX backend-test layout, with
reference outputs from onnxruntime's CPU provider.

  DIR/model.onnx
  DIR/test_data_set_<k>/input_<i>.pb, output_<j>.pb   (TensorProto named after graph I/O)
  DIR/meta.json                                        (provenance, ORT version, shapes)
  DIR/.stamp                                           (what produced it; see is_fresh)
"""
import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper


def fresh_dir(out: Path) -> Path:
    """Empty OUT (a half-written case from an interrupted run must not survive)."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    return out


def is_fresh(out: Path, stamp: str) -> bool:
    """True if OUT was completed by a run with the same stamp (inputs, script, versions)."""
    f = out / ".stamp"
    return f.exists() and f.read_text().strip() == stamp


def ort_run(model_path: Path, feeds: dict, level: ort.GraphOptimizationLevel) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    sess = ort.InferenceSession(str(model_path), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def write_case(out: Path, model_path: Path, datasets: list[dict], meta: dict, stamp: str) -> None:
    """Write test_data_set_k for each feed dict in DATASETS (outputs computed with ORT CPU,
    default optimisations = the reference), then meta.json and the stamp.

    OUT must come from fresh_dir() and already hold MODEL_PATH. Also runs ORT with all graph optimisations off and
    records the largest difference, a measure of the fp32 noise a runner must tolerate.
    """
    model = onnx.load(str(model_path), load_external_data=False)
    out_names = [o.name for o in model.graph.output]
    meta = dict(meta, onnx_version=onnx.__version__, ort_version=ort.__version__,
                ort_provider="CPUExecutionProvider", ort_graph_optimization="ORT_ENABLE_ALL (default)",
                datasets=[])
    for k, feeds in enumerate(datasets):
        ds = out / f"test_data_set_{k}"
        ds.mkdir()
        ref = ort_run(model_path, feeds, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
        plain = ort_run(model_path, feeds, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
        for i, (name, arr) in enumerate(feeds.items()):
            (ds / f"input_{i}.pb").write_bytes(numpy_helper.from_array(arr, name).SerializeToString())
        for j, (name, arr) in enumerate(zip(out_names, ref)):
            if not np.isfinite(arr).all():
                raise SystemExit(f"{out.name}: non-finite reference output {name}")
            (ds / f"output_{j}.pb").write_bytes(numpy_helper.from_array(arr, name).SerializeToString())
        meta["datasets"].append({
            "inputs": {n: list(a.shape) for n, a in feeds.items()},
            "outputs": {n: list(a.shape) for n, a in zip(out_names, ref)},
            # In f64: outputs may be integers or booleans (masks passed through).
            "output_abs_max": [float(np.abs(a.astype(np.float64)).max()) for a in ref],
            "ort_opt_vs_noopt_max_abs_diff": [float(np.abs(a.astype(np.float64) - b).max()) for a, b in zip(ref, plain)],
        })
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    (out / ".stamp").write_text(stamp + "\n")
    for k, d in enumerate(meta["datasets"]):
        print(f"  {out.name}/test_data_set_{k}: in {d['inputs']} out {d['outputs']} "
              f"|out|max {d['output_abs_max']} opt-vs-noopt {d['ort_opt_vs_noopt_max_abs_diff']}")
