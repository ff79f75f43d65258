"""Bolt as a TVM (Relax) BYOC backend.

    import bolt_tvm
    mod = bolt_tvm.partition_for_bolt(mod)                 # GEMM/Conv subgraphs -> "bolt"
    mod = relax.transform.RunCodegen({"bolt": {"device": "reference"}})(mod)
    ex = tvm.compile(mod, target="llvm")
    ex.export_library("model.so")                          # Bolt's shims are linked in

Importing the package registers the patterns (prefix "bolt") and the `relax.ext.bolt` codegen.
The Rust core is the library the ONNX Runtime provider lives in (BOLT_LIBRARY, else
target/release/libbolt_plugin.so of this repository). Device "reference" (the default) runs the
planned partitions with Bolt's CPU reference executor on CPU tensors.
"""
from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.backend.pattern_registry import get_patterns_with_prefix
from tvm.relax.transform import FuseOpsByPattern, MergeCompositeFunctions

from . import codegen, patterns  # noqa: F401  (registration side effects)
from ._lib import BoltError, library_path
from .codegen import REPORTS
from .relax_to_onnx import UnsupportedRelax, function_to_onnx

__all__ = ["partition_for_bolt", "offloaded", "REPORTS", "BoltError", "UnsupportedRelax", "library_path", "function_to_onnx"]


def partition_for_bolt(mod: tvm.IRModule, params: dict | None = None, *, merge: bool = True, b2b: bool = True) -> tvm.IRModule:
    """Groups the subgraphs Bolt takes into functions for the "bolt" codegen.

    params: weights to bind as constants of "main" first (Bolt plans with constant weights:
    BN folding, weight layouts, padding). merge: merge neighbouring Bolt composites into one
    function (MergeCompositeFunctions), so Bolt plans a whole conv region at once; otherwise each
    composite is its own function. b2b: use the back-to-back chain patterns.
    """
    if params:
        mod = relax.transform.BindParams("main", params)(mod)
    # Unused outputs (batch_norm's running stats) would otherwise look like leaking intermediates.
    mod = relax.transform.DeadCodeElimination()(mod)
    pats = [p for p in get_patterns_with_prefix("bolt") if b2b or not p.name.startswith("bolt.b2b_")]
    mod = FuseOpsByPattern(pats, bind_constants=True, annotate_codegen=not merge)(mod)
    if merge:
        mod = MergeCompositeFunctions()(mod)
    return mod


def offloaded(mod: tvm.IRModule) -> dict[str, list[str]]:
    """Functions for the "bolt" codegen: global symbol -> the composites (patterns) inside."""
    out = {}
    for gv, f in mod.functions.items():
        if not isinstance(f, relax.Function) or f.attrs is None or f.attrs.get("Codegen") != "bolt":
            continue
        names = []

        def visit(e):
            if isinstance(e, relax.Function) and e.attrs is not None and "Composite" in e.attrs:
                names.append(str(e.attrs["Composite"]))

        relax.analysis.post_order_visit(f.body, visit)
        out[str(f.attrs.get("global_symbol", gv.name_hint))] = names
    return out
