"""Broken models from real ones: the corpus's models (exporters nobody here wrote) with one
semantic defect each, as a hand-edited or half-converted model has them: a dangling input, an
attribute out of range, added or retyped, an initializer whose dims disagree with its data, a
missing initializer or node, an input of an unsupported type or size, a node retyped, inputs
shuffled, added or left empty. The protobuf
stays valid (byte-level corruption is the fuzz target's). `bolt report` (import, shape
inference, partition, plan) must answer each with a plan or an `error:` line, exit 1, never a
panic or a signal; and a model onnxruntime refuses to load for a reason of the operator schemas
(which Bolt checks too) Bolt must refuse. The mutations are drawn from a fixed seed; run this
file's `main` with another seed and count for more.

Needs target/release/bolt (tests/run.sh builds it) and the corpus (testdata/models)."""
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto

import fuzz_graphs as fz

REPO = Path(__file__).resolve().parents[2]
TESTDATA = Path(os.environ.get("BOLT_TESTDATA", REPO / "testdata"))
CI_MUTATIONS = 40
SEED = 11


def models() -> list:
    found = sorted((TESTDATA / "models").glob("*/model.onnx"))
    # The big ones take seconds each to load; the defects do not depend on size.
    return [m for m in found if m.stat().st_size < 30e6]


def mutate(m: onnx.ModelProto, rng: random.Random):
    """One defect in place; what it did, or None where the drawn kind does not apply."""
    g = m.graph
    n = rng.choice(list(g.node)) if len(g.node) else None
    kind = rng.randrange(13)
    if kind == 0 and n is not None and n.input:
        i = rng.randrange(len(n.input))
        n.input[i] = rng.choice(["", "nonexistent", n.output[0] if n.output else ""])
        return f"input {i} of {n.name} renamed {n.input[i]!r}"
    if kind == 1 and n is not None and n.attribute:
        a = rng.choice(list(n.attribute))
        if a.type == onnx.AttributeProto.INT:
            a.i = rng.choice([-1, 0, 7, 2**40, -(2**40)])
        elif a.type == onnx.AttributeProto.INTS and a.ints:
            del a.ints[rng.randrange(len(a.ints)):]
        elif a.type == onnx.AttributeProto.INTS:
            a.ints.append(-3)
        elif a.type == onnx.AttributeProto.FLOAT:
            a.f = rng.choice([float("nan"), -1.0, 0.0, 1e30])
        elif a.type == onnx.AttributeProto.STRING:
            a.s = b"bogus"
        return f"attribute {a.name} of {n.name}"
    if kind == 2 and g.initializer:
        t = rng.choice(list(g.initializer))
        if t.dims:
            t.dims[rng.randrange(len(t.dims))] += rng.choice([-1, 1, 5])
        return f"dims of initializer {t.name}"
    if kind == 3 and g.initializer:
        t = rng.choice(list(g.initializer))
        g.initializer.remove(t)
        return f"initializer {t.name} removed"
    if kind == 4 and n is not None:
        g.node.remove(n)
        return f"node {n.name} removed"
    if kind == 5 and g.input:
        i = rng.choice(list(g.input))
        i.type.tensor_type.elem_type = rng.choice(
            [TensorProto.INT8, TensorProto.DOUBLE, TensorProto.STRING, TensorProto.BOOL, 0]
        )
        return f"element type of input {i.name}"
    if kind == 6 and g.input and g.input[0].type.tensor_type.shape.dim:
        d = rng.choice(list(g.input[0].type.tensor_type.shape.dim))
        d.dim_value = rng.choice([0, 1, 3, 100000])
        return f"a dim of input {g.input[0].name}"
    if kind == 7 and n is not None:
        n.op_type = rng.choice(["Conv", "MatMul", "Gemm", "Add", "Softmax", "Reshape", "Transpose", "Resize"])
        return f"node {n.name} retyped {n.op_type}"
    if kind == 8 and n is not None and len(n.input) > 1:
        inputs = list(n.input)
        rng.shuffle(inputs)
        del n.input[:]
        n.input.extend(inputs)
        return f"inputs of {n.name} shuffled"
    if kind == 9 and n is not None:
        n.attribute.append(onnx.helper.make_attribute(rng.choice(["perm", "axis", "bogus", "alpha"]), 1))
        return f"an attribute added to {n.name}"
    if kind == 10 and n is not None and n.attribute:
        a = rng.choice(list(n.attribute))
        if a.type == onnx.AttributeProto.INT:
            a.ClearField("i")
            a.f, a.type = 1.5, onnx.AttributeProto.FLOAT
        elif a.type == onnx.AttributeProto.FLOAT:
            a.ClearField("f")
            a.i, a.type = 2, onnx.AttributeProto.INT
        else:
            return None
        return f"attribute {a.name} of {n.name} retyped"
    if kind == 11 and n is not None and n.input:
        n.input.append(rng.choice(list(n.input)))
        return f"an input added to {n.name}"
    if kind == 12 and n is not None and n.input:
        n.input[0] = ""
        return f"input 0 of {n.name} left empty"
    return None


# onnxruntime's load errors for what Bolt checks at import too (its operator schemas,
# src/import/schema.rs; initializers against their declared inputs): a model refused with
# one of these that Bolt accepts is a check Bolt misses.
SCHEMA_REFUSALS = (
    "has input size",
    "has output size",
    "Unrecognized attribute",
    "Mismatched attribute type",
    "Required attribute",
    "No Op registered",
    "of input parameter",
    "bound to different types",
    "Data in initializer",
)


def ort_refusal(path: Path) -> str:
    """onnxruntime's reason for refusing to load the model, or ""."""
    import onnxruntime as ort

    try:
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises its own exception types per status
        return str(e)
    return ""


def check(seed: int, count: int) -> list:
    """The mutations of `seed` that crashed or hung Bolt, each as (what, exit status, stderr);
    and those that Bolt accepted though onnxruntime refused them for a schema reason."""
    rng = random.Random(seed)
    corpus = models()
    assert len(corpus) >= 30, f"{TESTDATA / 'models'}: the corpus is missing; tests/run.sh fetches it"
    bad = []
    with tempfile.TemporaryDirectory() as tmp:
        done = 0
        while done < count:
            path = rng.choice(corpus)
            m = onnx.load(str(path))
            what = mutate(m, rng)
            if what is None:
                continue
            done += 1
            broken = Path(tmp) / "broken.onnx"
            onnx.save(m, str(broken))
            label = f"{path.parent.name}: {what}"
            try:
                r = subprocess.run(
                    [str(fz.bolt_exe()), "report", str(broken)], capture_output=True, text=True, timeout=300
                )
            except subprocess.TimeoutExpired:
                bad.append((label, "timeout", ""))
                continue
            explained = r.returncode == 1 and "error:" in r.stderr and "panicked" not in r.stderr
            if r.returncode != 0 and not explained:
                bad.append((label, r.returncode, r.stderr[-800:]))
            elif r.returncode == 0:
                refusal = ort_refusal(broken)
                # Reasons inside control-flow bodies are ORT's graph-attribute inference, which
                # Bolt does not check (If / Loop bodies are typed when they run).
                if any(k in refusal for k in SCHEMA_REFUSALS) and "Graph attribute inferencing" not in refusal:
                    bad.append((label, "accepted; onnxruntime refused it", refusal[-800:]))
    return bad


def test_broken_real_models_get_an_error_not_a_crash():
    try:
        fz.bolt_exe()
    except FileNotFoundError as e:
        pytest.fail(str(e), pytrace=False)
    bad = check(SEED, CI_MUTATIONS)
    assert not bad, "\n".join(f"{w}: exit {rc}\n{err}" for w, rc, err in bad)


if __name__ == "__main__":
    seed, count = (int(a) for a in (sys.argv[1:] + ["1", "200"])[:2])
    failures = check(seed, count)
    for w, rc, err in failures:
        print(f"{w}: exit {rc}\n{err}")
    print(f"{count} broken models, {len(failures)} crashed or hung")
    sys.exit(1 if failures else 0)
