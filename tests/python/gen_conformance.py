#!/usr/bin/env python3
"""Generate the ONNX backend conformance cases that exercise Bolt's operators.

Sources (both part of the `onnx` package, so the pinned onnx version fixes the data):
  * node cases: built in memory by onnx.backend.test.case.node.collect_testcases()
    (what `python -m onnx.backend.test.cmd_tools generate-data` writes, minus the
    ~1900 cases Bolt does not care about);
  * the pre-generated `pytorch-converted`, `pytorch-operator` and `simple` cases that the
    onnx wheel ships under onnx/backend/test/data/.

A case is kept only if EVERY op in its model (recursively, subgraphs included) is in
BOLT_OPS, so a runner can execute it whole. Cases whose tested op is one of ours but
which also need other ops (typically the `_expanded` function bodies of Softmax,
LayerNormalization, Gelu...) go to excluded.json with the ops that are missing.

Output layout (flat, one dir per case, same as the onnx test data):
  OUT/test_<name>/model.onnx
  OUT/test_<name>/test_data_set_<k>/{input_<i>.pb, output_<j>.pb}   (TensorProto)
  OUT/index.json     [{case, dir, kind, ops, exercises, opset, dtypes, rtol, atol}]
  OUT/excluded.json  [{case, kind, exercises, ops, missing, reason}]
Cases with sequence/optional graph inputs or outputs are excluded too: Bolt is tensor-only.
"""
import argparse
import collections
import hashlib
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx.version_converter
from onnx import TensorProto, numpy_helper

BOLT_OPS = frozenset("""
    MatMul Gemm Conv ConvTranspose BatchNormalization Add Sub Mul Div Pow Sqrt Erf Tanh Relu LeakyRelu
    Sigmoid HardSigmoid HardSwish Softplus Gelu Clip Cast Transpose Reshape Flatten Squeeze
    Unsqueeze Concat Slice Gather Shape Constant Identity MaxPool AveragePool
    GlobalAveragePool Softmax LayerNormalization ReduceMean Resize DepthToSpace Split
    Exp Neg Abs Reciprocal Max Min ReduceSum ReduceMax ReduceMin GlobalMaxPool Pad Log LogSoftmax
    Equal Less LessOrEqual Greater GreaterOrEqual And Or Xor Not Where Expand RNN GRU LSTM
    ConstantOfShape Range If Loop Scan Ceil Floor Round PRelu Upsample Dropout
    ArgMax ArgMin Tile OneHot ScatterElements Sum Mean
    Sin Cos Tan Asin Acos Atan Sinh Cosh Asinh Acosh Atanh Sign Elu Selu Celu ThresholdedRelu
    Softsign Mish Shrink ReduceL1 ReduceL2 ReduceSumSquare ReduceLogSum ReduceLogSumExp ReduceProd
    GatherElements GatherND ScatterND CumSum TopK NonZero Mod IsNaN IsInf ReverseSequence Einsum
    QuantizeLinear DequantizeLinear DynamicQuantizeLinear MatMulInteger ConvInteger
    Trilu EyeLike Hardmax SpaceToDepth DFT STFT InstanceNormalization LRN
    CastLike Size RMSNormalization Attention RotaryEmbedding GroupNormalization
""".split())
# ArgMax to ScatterElements, ReduceProd, GatherElements to InstanceNormalization, CastLike and
# the opset-23 transformer ops are host-only as ops (no kernel; the planner lowers the common forms;
# LRN is one too, which the planner rewrites as a conv), and
# so are Sum, Mean, Max and Min of other than two inputs: the reference computes them so that
# models holding them run whole (src/reference/ops/host.rs and the files it dispatches to).

SHIPPED_KINDS = ("pytorch-converted", "pytorch-operator", "simple")
DATA_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data"


def op_types(graph: onnx.GraphProto, recursive: bool = True) -> set[str]:
    """Op types in a graph (and its If/Loop/Scan bodies if recursive); ops of
    non-default domains are prefixed with the domain, so they never match BOLT_OPS."""
    ops = set()
    for node in graph.node:
        ops.add(node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}:{node.op_type}")
        for attr in node.attribute if recursive else []:
            for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                ops |= op_types(sub)
    return ops


def opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def dtypes(model: onnx.ModelProto) -> list[str]:
    """Element types of graph inputs/outputs ('SEQUENCE' etc. for non-tensors), so the
    Rust runner can skip cases using dtypes it does not implement."""
    out = set()
    for vi in list(model.graph.input) + list(model.graph.output):
        t = vi.type
        if t.HasField("tensor_type"):
            out.add(TensorProto.DataType.Name(t.tensor_type.elem_type))
        else:
            out.add(t.WhichOneof("value").replace("_type", "").upper())
    return sorted(out)


def write_tensor(path: Path, value, name: str) -> None:
    # Some cases (float8, int4...) already provide TensorProtos; numpy arrays need naming.
    if isinstance(value, TensorProto):
        t = TensorProto()
        t.CopyFrom(value)
        t.name = name
    else:
        t = numpy_helper.from_array(np.asarray(value), name)
    path.write_bytes(t.SerializeToString())


def write_node_case(case, model: onnx.ModelProto, case_dir: Path) -> None:
    case_dir.mkdir()
    (case_dir / "model.onnx").write_bytes(model.SerializeToString())
    g = model.graph
    for k, (inputs, outputs) in enumerate(case.data_sets):
        ds = case_dir / f"test_data_set_{k}"
        ds.mkdir()
        for i, v in enumerate(inputs):
            write_tensor(ds / f"input_{i}.pb", v, g.input[i].name)
        for j, v in enumerate(outputs):
            write_tensor(ds / f"output_{j}.pb", v, g.output[j].name)


def node_cases():
    """Yield (name, kind, model, exercises, writer, rtol, atol) for onnx's node cases."""
    from onnx.backend.test.case import node

    with np.errstate(all="ignore"):  # some generators divide by zero on purpose
        cases = node.collect_testcases()
    by_name = {c.name: c for c in cases}
    for c in cases:
        # A case exercises the top-level op(s) of its graph (not those in a Loop body);
        # an `_expanded[_verN]` case exercises the op of the case it expands.
        base = by_name.get(c.name.split("_expanded")[0], c)
        tested = op_types(base.model.graph, recursive=False)
        # Ops unchanged since an opset older than Bolt imports (And, Not: opset 7 and 1) are
        # tested at opset 13, the same semantics (the data stays valid).
        model = upgrade(c.model) if opset(c.model) < 11 else c.model
        yield c.name, "node", model, tested, lambda d, c=c, m=model: write_node_case(c, m, d), c.rtol, c.atol


def upgrade(model: onnx.ModelProto) -> onnx.ModelProto:
    """Converts pre-opset-13 shipped cases (PyTorch exports at opset 6/9) to opset 13 with
    onnx's own version converter, so they test today's operator semantics; the expected
    outputs stay valid because conversion preserves semantics. Left as-is if it fails."""
    if opset(model) >= 13:
        return model
    try:
        converted = onnx.version_converter.convert_version(model, 13)
        onnx.checker.check_model(converted)
        return converted
    except Exception:  # noqa: BLE001 - the case then reports its old opset when run
        return model


def copy_shipped_case(src: Path, model: onnx.ModelProto, case_dir: Path) -> None:
    # The shipped .pb files have empty tensor names; name them after the graph inputs
    # (old IR versions also list initializers as inputs: skip those) and outputs.
    inits = {t.name for t in model.graph.initializer}
    in_names = [i.name for i in model.graph.input if i.name not in inits]
    out_names = [o.name for o in model.graph.output]
    case_dir.mkdir()
    onnx.save(model, case_dir / "model.onnx")
    for ds in sorted(src.glob("test_data_set_*")):
        (case_dir / ds.name).mkdir()
        for pb in ds.glob("*.pb"):
            io, idx = pb.stem.split("_")
            write_tensor(case_dir / ds.name / pb.name, onnx.load_tensor(str(pb)),
                         (in_names if io == "input" else out_names)[int(idx)])


def shipped_cases():
    """Yield the same tuple for the cases the onnx wheel ships as files."""
    for kind in SHIPPED_KINDS:
        for src in sorted((DATA_DIR / kind).glob("test_*")):
            model = upgrade(onnx.load(src / "model.onnx"))
            ops = op_types(model.graph)
            yield src.name, kind, model, ops, lambda d, s=src, m=model: copy_shipped_case(s, m, d), 1e-3, 1e-7


def stamp() -> str:
    # Regenerate when onnx (the data source) or this script (the filter) changes.
    return f"onnx={onnx.__version__} script={hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--force", action="store_true", help="regenerate even if up to date")
    args = ap.parse_args()
    out: Path = args.out.resolve()
    stamp_file = out / ".stamp"
    if not args.force and (out / "index.json").exists() and stamp_file.exists() \
            and stamp_file.read_text().strip() == stamp():
        print(f"conformance cases up to date in {out} ({stamp()})")
        return

    # Build into a sibling temp dir and swap at the end: an interrupted run never leaves
    # a directory that looks complete.
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    index, excluded = [], []
    for name, kind, model, tested, write, rtol, atol in [*node_cases(), *shipped_cases()]:
        ops = op_types(model.graph)
        ours = sorted(tested & BOLT_OPS)
        missing = sorted(ops - BOLT_OPS)
        if not ours:
            continue  # unrelated to Bolt
        types = dtypes(model)
        non_tensor = sorted(set(types) & {"SEQUENCE", "OPTIONAL", "MAP", "SPARSE_TENSOR"})
        if missing or non_tensor:
            reason = (f"ops outside Bolt's list: {', '.join(missing)}" if missing
                      else f"non-tensor graph I/O: {', '.join(non_tensor)}")
            excluded.append({"case": name, "kind": kind, "exercises": ours, "ops": sorted(ops),
                             "missing": missing, "reason": reason})
            continue
        if (tmp / name).exists():
            sys.exit(f"duplicate case name {name}")
        write(tmp / name)
        index.append({"case": name, "dir": name, "kind": kind, "ops": sorted(ops), "exercises": ours,
                      "opset": opset(model), "dtypes": types, "rtol": rtol, "atol": atol})

    index.sort(key=lambda e: e["case"])
    excluded.sort(key=lambda e: e["case"])
    (tmp / "index.json").write_text(json.dumps(index, indent=1) + "\n")
    (tmp / "excluded.json").write_text(json.dumps(excluded, indent=1) + "\n")
    (tmp / ".stamp").write_text(stamp() + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)

    per_op = collections.Counter(op for e in index for op in e["exercises"])
    per_op_ex = collections.Counter(op for e in excluded for op in e["exercises"])
    print(f"{'op':<22}{'kept':>6}{'excluded':>10}")
    for op in sorted(BOLT_OPS):
        print(f"{op:<22}{per_op[op]:>6}{per_op_ex[op]:>10}")
    kinds = collections.Counter(e["kind"] for e in index)
    print(f"kept {len(index)} cases ({dict(kinds)}), excluded {len(excluded)} related cases -> {out}")


if __name__ == "__main__":
    main()
