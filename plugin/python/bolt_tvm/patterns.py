"""Bolt's BYOC patterns for TVM Relax, registered under the prefix "bolt".

TVM's dataflow patterns only find candidate shapes: a GEMM or Conv anchor with up to an add,
an activation and another add after it, two such layers back to back, and attention cores
(MatMul -> scale -> mask -> Softmax -> MatMul with their head transposes). Whether Bolt takes a
match is decided by Bolt's own partitioner (the same Rust code ONNX Runtime's GetCapability
runs), through `check`: the matched subgraph goes to Rust as ONNX, and the match is kept only
when Bolt claims all of it as one kernel (or, for a chain, when Bolt's planner fuses the two
layers into one back-to-back kernel, or, for an attention core, when Bolt's planner runs the
whole match as one fused attention kernel).
"""
from __future__ import annotations

import itertools
import logging

from tvm.relax.backend.pattern_registry import register_patterns
from tvm.relax.backend.utils import has_leaking_intermediate_variables
from tvm.relax.dpl import is_op, is_tuple_get_item, wildcard

from . import _lib
from .relax_to_onnx import UnsupportedRelax, bindings_to_onnx

log = logging.getLogger("bolt_tvm")

ACTIVATIONS = ["relax.nn.relu", "relax.nn.gelu", "relax.nn.gelu_tanh", "relax.sigmoid", "relax.tanh", "relax.nn.silu"]


def _activation(x):
    pats = [is_op(op)(x) for op in ACTIVATIONS]
    out = pats[0]
    for p in pats[1:]:
        out = out | p
    return out


def _matmul(x):
    # A weight transposed by permute_dims (how Linear layers and ONNX Gemm(transB) import) is
    # part of the match: Bolt then sees the constant it can store K-major.
    w = wildcard()
    return is_op("relax.matmul")(x, is_op("relax.permute_dims")(w) | w)


def _conv2d(x):
    return is_op("relax.nn.conv2d")(x, wildcard())


def _conv2d_bn(x):
    bn = is_op("relax.nn.batch_norm")(_conv2d(x), wildcard(), wildcard(), wildcard(), wildcard())
    return is_tuple_get_item(bn, 0)


ANCHORS = {"matmul": _matmul, "conv2d": _conv2d, "conv2d_bn": _conv2d_bn}
# Epilogue shapes: (add, activation, add). The first add is a bias or a residual, the second a
# residual; the check asks Bolt which (and whether it fuses them).
EPILOGUES = list(itertools.product([False, True], repeat=3))


def _epilogue(out, add1: bool, act: bool, add2: bool):
    if add1:
        # A bias reshaped to broadcast ([C] -> [1, C, 1, 1]) is taken with its reshape, so Bolt
        # sees the constant.
        out = is_op("relax.add")(out, is_op("relax.reshape")(wildcard(), wildcard()) | wildcard())
    if act:
        out = _activation(out)
    if add2:
        out = is_op("relax.add")(out, wildcard()) | is_op("relax.add")(wildcard(), out)
    return out


def _suffix(add1: bool, act: bool, add2: bool) -> str:
    return "".join(s for s, on in (("_add", add1), ("_act", act), ("_add", add2)) if on)


def _why_not(ctx, layers: int) -> str | None:
    """None when Bolt takes the match whole; otherwise the reason it does not."""
    if has_leaking_intermediate_variables(ctx):
        return "an intermediate value is used outside the match"
    out = ctx.value_to_bound_var[ctx.matched_expr]
    try:
        model, cv = bindings_to_onnx(dict(ctx.matched_bindings), out, "bolt_check")
        data = model.SerializeToString()
        parts = _lib.partition(data)
    except (UnsupportedRelax, _lib.BoltError) as e:
        return str(e)
    compute = {n.name for n in model.graph.node if n.name not in cv.layout_nodes}
    taken = set().union(*(p["nodes"] for p in parts["partitions"])) if parts["partitions"] else set()
    if len(parts["partitions"]) != layers or taken != compute:
        host = "; ".join(f"{h['node']} ({h['op_type']}): {h['reason']}" for h in parts["host"])
        return f"Bolt claims {len(parts['partitions'])} kernel(s) covering {sorted(taken)}; left: {host or 'none'}"
    if layers > 1:
        chains = _lib.plan_report(data)["chains"]
        if not any(c["fused"] for c in chains):
            return "Bolt's planner does not fuse these layers: " + "; ".join(c["reason"] for c in chains)
    return None


def _attention(scale: str | None, mask: str | None, merge: bool):
    """An attention core: matmul(Q, Kᵀ) [* or / a scale] [+ mask, or where(mask, fill, .) as
    masked_fill writes it] -> softmax -> matmul(., V) [-> the head merge], with the head-split
    permute_dims of Q, K and V in the match (Bolt reads them in place)."""
    def operand():
        x = wildcard()
        return is_op("relax.permute_dims")(x) | x

    out = is_op("relax.matmul")(operand(), operand())
    if scale is not None:
        out = is_op(scale)(out, wildcard())
    if mask == "add":
        out = is_op("relax.add")(out, wildcard()) | is_op("relax.add")(wildcard(), out)
    elif mask == "where":
        out = is_op("relax.where")(wildcard(), wildcard(), out) | is_op("relax.where")(wildcard(), out, wildcard())
    out = is_op("relax.matmul")(is_op("relax.nn.softmax")(out), operand())
    if merge:
        out = is_op("relax.permute_dims")(out)
    return out


def _why_not_attention(ctx) -> str | None:
    """None when Bolt's planner runs the match as one fused attention kernel."""
    if has_leaking_intermediate_variables(ctx):
        return "an intermediate value is used outside the match"
    out = ctx.value_to_bound_var[ctx.matched_expr]
    try:
        model, _ = bindings_to_onnx(dict(ctx.matched_bindings), out, "bolt_check")
        report = _lib.plan_report(model.SerializeToString())
    except (UnsupportedRelax, _lib.BoltError) as e:
        return str(e)
    fused = [d for d in report.get("attention_fused", []) if d["fused"]]
    compute = {n.name for n in model.graph.node}
    if len(fused) != 1 or set(fused[0]["nodes"]) != compute:
        reasons = "; ".join(d["reason"] or "" for d in report.get("attention_fused", []) if not d["fused"])
        return f"Bolt's planner does not run the match as one attention kernel: {reasons or 'not all of it'}"
    return None


def _check(name: str, layers: int):
    def check(ctx) -> bool:
        why = _why_not_attention(ctx) if layers == 0 else _why_not(ctx, layers)
        if why is not None:
            log.debug("%s: not offloaded: %s", name, why)
        return why is None

    return check


def bolt_patterns() -> list:
    """Every pattern, lowest priority first (register_patterns gives later ones precedence):
    single layers by epilogue length, then back-to-back chains."""
    single, chains = [], []
    for (anchor, make), epi in itertools.product(ANCHORS.items(), EPILOGUES):
        x = wildcard()
        name = f"bolt.{anchor}{_suffix(*epi)}"
        single.append((sum(epi), (name, _epilogue(make(x), *epi), {}, _check(name, 1))))
    # Back-to-back: GEMM -> GEMM, and conv -> conv (Bolt's planner only fuses a 1x1 second conv).
    for anchor in ("matmul", "conv2d"):
        make = ANCHORS[anchor]
        for e1, e2 in itertools.product([(False, False), (True, False), (False, True), (True, True)], repeat=2):
            x = wildcard()
            first = _epilogue(make(x), e1[0], e1[1], False)
            second = _epilogue(make(first), e2[0], e2[1], False)
            name = f"bolt.b2b_{anchor}{_suffix(*e1, False)}_{anchor}{_suffix(*e2, False)}"
            chains.append((sum(e1) + sum(e2), (name, second, {}, _check(name, 2))))
    # Attention cores, longest forms last (precedence); checked by the planner (layers = 0).
    attention = []
    masks = [None, "add", "where"]
    for scale, mask, merge in itertools.product([None, "relax.multiply", "relax.divide"], masks, [False, True]):
        suffix = {None: "", "add": "_mask", "where": "_where"}[mask]
        name = "bolt.attention" + ("_scale" if scale else "") + suffix + ("_merge" if merge else "")
        attention.append((bool(scale) + bool(mask) + merge, (name, _attention(scale, mask, merge), {}, _check(name, 0))))
    return (
        [p for _, p in sorted(single, key=lambda t: t[0])]
        + [p for _, p in sorted(chains, key=lambda t: t[0])]
        + [p for _, p in sorted(attention, key=lambda t: t[0])]
    )


register_patterns(bolt_patterns())
