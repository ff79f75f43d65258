#!/usr/bin/env python3
"""Writes src/import/onnx_schemas.json: every ai.onnx operator version the pinned onnx package
defines (onnx.defs), reduced to what a model's node is checked against at import, as ONNX's
checker and onnxruntime's loader check it: how many inputs and outputs, which may be empty,
the attributes (type, required), and the element types each type parameter admits.

  .venv/bin/python tests/python/gen_onnx_schemas.py [--check]

--check compares with the committed file instead of writing it (tests/python/test_onnx_schemas.py
runs that, so the table follows the pinned onnx).
"""
import argparse
import json
import re
import sys
from pathlib import Path

import onnx
import onnx.defs
from onnx import TensorProto

OUT = Path(__file__).resolve().parents[2] / "src" / "import" / "onnx_schemas.json"

OPTION = {
    onnx.defs.OpSchema.FormalParameterOption.Single: "1",
    onnx.defs.OpSchema.FormalParameterOption.Optional: "?",
    onnx.defs.OpSchema.FormalParameterOption.Variadic: "*",
}


def elem_type(type_str: str):
    """'tensor(float)' -> 1; None for sequences, optionals, maps and sparse tensors (Bolt
    holds no values of those types, so they are not checked)."""
    m = re.fullmatch(r"tensor\((\w+)\)", type_str)
    if not m:
        return None
    name = {"float": "FLOAT", "double": "DOUBLE", "string": "STRING", "bool": "BOOL"}.get(m[1], m[1].upper())
    return getattr(TensorProto, name)


def formal(p, constraints):
    """[name, type, option, homogeneous]: type is a type parameter ("T"), "#<code>" for a fixed
    tensor type (Reshape's shape is "#7", int64) or "" for a fixed non-tensor type; option is
    "1" (single), "?" (optional) or "*" (variadic)."""
    if p.type_str in constraints:
        ty = p.type_str
    else:
        code = elem_type(p.type_str)
        ty = "" if code is None else f"#{code}"
    return [p.name, ty, OPTION[p.option], bool(p.is_homogeneous)]


def table() -> dict:
    ops = {}
    for s in onnx.defs.get_all_schemas_with_history():
        if s.domain != "":
            continue
        constraints = {}
        for c in s.type_constraints:
            codes = [elem_type(t) for t in c.allowed_type_strs]
            # [tensor element type codes, whether it admits tensors only]: a parameter that
            # also admits sequences or optionals is checked on its tensor values only.
            constraints[c.type_param_str] = [sorted(x for x in codes if x is not None), all(x is not None for x in codes)]
        ops.setdefault(s.name, []).append(
            {
                "since": s.since_version,
                "deprecated": bool(s.deprecated),
                "inputs": [formal(p, constraints) for p in s.inputs],
                "outputs": [formal(p, constraints) for p in s.outputs],
                "min_inputs": s.min_input,
                "max_inputs": min(s.max_input, 2**31 - 1),
                "min_outputs": s.min_output,
                "max_outputs": min(s.max_output, 2**31 - 1),
                # name -> [AttributeProto type code, required]
                "attributes": {name: [int(a.type.value), bool(a.required)] for name, a in sorted(s.attributes.items())},
                "constraints": constraints,
            }
        )
    for versions in ops.values():
        versions.sort(key=lambda v: v["since"])
    return {"onnx": onnx.__version__, "max_opset": onnx.defs.onnx_opset_version(), "ops": dict(sorted(ops.items()))}


def render() -> str:
    """JSON with one operator per line, so that a new onnx shows as a readable diff."""
    t = table()
    dump = lambda v: json.dumps(v, sort_keys=True, separators=(",", ":"))  # noqa: E731
    ops = ",\n".join(f"{dump(name)}:{dump(v)}" for name, v in t["ops"].items())
    return f'{{"onnx":{dump(t["onnx"])},"max_opset":{t["max_opset"]},"ops":{{\n{ops}\n}}}}\n'



def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    text = render()
    if args.check:
        if OUT.read_text() != text:
            sys.exit(f"{OUT} is not what onnx {onnx.__version__} defines: run {Path(__file__).name} to regenerate")
        print(f"{OUT.name}: matches onnx {onnx.__version__}")
        return
    OUT.write_text(text)
    print(f"wrote {OUT} ({len(text)} bytes)")


if __name__ == "__main__":
    main()
