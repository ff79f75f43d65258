"""Bolt checks each node against its operator's ONNX schema at import (src/import/schema.rs),
from a table generated out of the pinned onnx package. Here: the table is what that onnx
defines, and the models onnxruntime's loader refuses for a schema reason are the models Bolt
refuses, while their valid originals load in both.

Needs target/release/bolt (tests/run.sh builds it)."""
import subprocess
import tempfile
from pathlib import Path

import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import fuzz_graphs as fz
import gen_onnx_schemas

ort.set_default_logger_severity(3)


def test_the_committed_table_is_what_the_pinned_onnx_defines():
    assert gen_onnx_schemas.OUT.read_text() == gen_onnx_schemas.render(), (
        f"{gen_onnx_schemas.OUT} differs from onnx {onnx.__version__}'s schemas: run "
        "tests/python/gen_onnx_schemas.py"
    )


def model(nodes, opset=17, inputs=None, inits=()):
    inputs = inputs or [h.make_tensor_value_info("x", T.FLOAT, [2, 3])]
    g = h.make_graph(nodes, "g", inputs, [h.make_tensor_value_info("y", T.FLOAT, None)], initializer=list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)], ir_version=8)


W = h.make_tensor("w", T.FLOAT, [3, 4], [0.5] * 12)


def node(op, inputs, **attrs):
    return h.make_node(op, inputs, ["y"], name="n", **attrs)


# (what, the valid model, the same model broken)
CASES = [
    ("an input too many", model([node("Relu", ["x"])]), model([node("Relu", ["x", "x"])])),
    (
        "a required input left empty",
        model([node("MatMul", ["x", "w"])], inits=[W]),
        model([node("MatMul", ["x", ""])], inits=[W]),
    ),
    (
        "an attribute the operator does not have",
        model([node("Softmax", ["x"], axis=1)]),
        model([node("Softmax", ["x"], axis=1, perm=[1, 0])]),
    ),
    (
        "an attribute of the wrong type",
        model([node("LeakyRelu", ["x"], alpha=0.5)]),
        model([node("LeakyRelu", ["x"], alpha=2)]),
    ),
    ("a required attribute missing", model([node("Cast", ["x"], to=T.FLOAT)]), model([node("Cast", ["x"])])),
    ("an operator newer than the opset", model([node("Gelu", ["x"])], opset=20), model([node("Gelu", ["x"])])),
    ("no such operator", model([node("Relu", ["x"])]), model([node("Frobnicate", ["x"])])),
    (
        "an element type the operator does not take",
        model([node("Conv", ["x", "w"])], inputs=[h.make_tensor_value_info("x", T.FLOAT, [1, 3, 4, 4])],
              inits=[h.make_tensor("w", T.FLOAT, [2, 3, 1, 1], [0.5] * 6)]),
        model([node("Conv", ["x", "w"])], inputs=[h.make_tensor_value_info("x", T.INT8, [1, 3, 4, 4])],
              inits=[h.make_tensor("w", T.FLOAT, [2, 3, 1, 1], [0.5] * 6)]),
    ),
    (
        "an element type code that names no type",
        model([node("Cast", ["x"], to=T.FLOAT)]),
        model([node("Cast", ["x"], to=1234)]),
    ),
    (
        "an attribute given twice",
        model([node("Softmax", ["x"], axis=1)]),
        model([h.make_node("Softmax", ["x"], ["y"], name="n", axis=1)]),
    ),
    (
        "a Slice step of 0",
        model([node("Slice", ["x", "s", "e", "a", "t"])], inits=[h.make_tensor(k, T.INT64, [1], [v]) for k, v in
                                                                (("s", 0), ("e", 2), ("a", 1), ("t", 1))]),
        model([node("Slice", ["x", "s", "e", "a", "t"])], inits=[h.make_tensor(k, T.INT64, [1], [v]) for k, v in
                                                                (("s", 0), ("e", 2), ("a", 1), ("t", 0))]),
    ),
    (
        "two types for one type parameter",
        model([node("Add", ["x", "b"])], inits=[h.make_tensor("b", T.FLOAT, [3], [1, 2, 3])]),
        model([node("Add", ["x", "b"])], inits=[h.make_tensor("b", T.FLOAT16, [3], [1, 2, 3])]),
    ),
]


def bolt_report(m: onnx.ModelProto, tmp: Path):
    path = tmp / "m.onnx"
    onnx.save(m, str(path))
    r = subprocess.run([str(fz.bolt_exe()), "report", str(path)], capture_output=True, text=True, timeout=120)
    return r.returncode, r.stderr


def ort_refuses(m: onnx.ModelProto) -> str:
    try:
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises its own exception types per status
        return str(e)
    return ""


# The second axis attribute (protobuf keeps repeated fields as given).
CASES[[c[0] for c in CASES].index("an attribute given twice")][2].graph.node[0].attribute.append(
    h.make_attribute("axis", 0))


@pytest.mark.parametrize("what,valid,broken", CASES, ids=[c[0] for c in CASES])
def test_what_onnxruntime_refuses_for_its_schema_bolt_refuses_by_node(what, valid, broken):
    try:
        fz.bolt_exe()
    except FileNotFoundError as e:
        pytest.fail(str(e), pytrace=False)
    with tempfile.TemporaryDirectory() as tmp:
        assert ort_refuses(valid) == "", f"{what}: the valid model"
        rc, err = bolt_report(valid, Path(tmp))
        assert rc == 0, f"{what}: the valid model: {err}"
        assert ort_refuses(broken), f"{what}: onnxruntime loads the broken model"
        rc, err = bolt_report(broken, Path(tmp))
        assert rc == 1 and "error: node 'n'" in err and "panicked" not in err, f"{what}: exit {rc}: {err}"


def test_every_model_of_onnxs_node_tests_imports():
    # onnx's own backend node tests (every operator, sequences and optionals included) are
    # valid models nobody here wrote: each imports (the schema check refuses none of them), and
    # what Bolt does not compute stays with the host. Only opsets older than 7 are refused.
    from onnx.backend.test.case import node

    import numpy as np

    with np.errstate(all="ignore"):  # some generators divide by zero on purpose
        cases = node.collect_testcases()
    assert len(cases) > 1500, len(cases)
    refused = []
    with tempfile.TemporaryDirectory() as tmp:
        for c in cases:
            rc, err = bolt_report(c.model, Path(tmp))
            opset = max([o.version for o in c.model.opset_import if o.domain in ("", "ai.onnx")], default=99)
            if rc != 0 and not (opset < 7 and "Bolt imports opsets 7 to" in err):
                refused.append(f"{c.name}: exit {rc}: {err.strip().splitlines()[-1] if err.strip() else ''}")
    assert not refused, "\n".join(refused)
