"""Differential graph fuzzer for Bolt's fused epilogues, in the spirit of NNSmith.

Builds random valid ONNX graphs: GEMM/Conv anchors (MatMul, batched MatMul, Gemm with every
attribute and every C broadcast, Conv with groups, strides, pads, dilations, auto_pad), each
followed by a random epilogue chain (scalar Mul/Div on either side, per-channel, scalar and
rank-raising bias, residuals before and after activations, every activation Bolt knows in its
single-op and decomposed spellings, casts, shared intermediates, graph outputs in the middle of
a chain), and attention blocks in the forms exporters write (heads split by transposes, Kᵀ
by [0,2,3,1] / [0,1,3,2] or given, K and V shared by the heads, the scale after the MatMul or
on Q and K, padding / causal / full masks, the head merge, cross-attention lengths, head dims
the kernels do and do not take; masks made in the graph from bool / int64 attention masks and
token ids as HuggingFace exports write them; embedding lookups by token ids ahead of GEMMs),
and between conv blocks data movement and memory-intensive
ops (Concat, Slice with and without steps, YOLOv5's Focus, Resize, pools, softmax over a
channel or row axis, maybe through a transpose, PyTorch's `squeeze(dim)` as an If that static
shapes decide, an If on a bool input that only the run decides); and memory-intensive regions
on their own for the stitcher (element-wise chains with every broadcast, reductions over any
axes, softmax, LayerNormalization, Where, transposes, results read again). Every graph is
checked three ways against things Bolt did not compute:

  1. the planned graph against the model, both on Bolt's reference executor (`bolt compile`
     fails when they differ beyond its written tolerance);
  2. the model and the planned graph on the reference executor against onnxruntime's CPU
     provider (`bolt check` and `bolt check --planned` on the case directory);
  3. the model through Bolt's ONNX Runtime provider (bolt_ort) against onnxruntime's CPU
     provider.

Run more seeds than CI does:

    .venv/bin/python tests/python/fuzz_graphs.py --seeds 500 [--start 1000] [--save]

`--save` writes every failing graph to fuzz/corpus/graphs/ (replayed by
tests/python/test_fuzz_graphs.py in CI). A graph's name records the generator version and
seed, so `--start SEED --seeds 1` rebuilds it while the generator is unchanged.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "fuzz" / "corpus" / "graphs"
# Bump when the generator changes what a seed builds.
GENERATOR_VERSION = 12
OPSET = 17
# (rtol, atol) per graph element type. f32: folding reorders rounding, and a fused Cast to f16
# may differ by an f16 ulp. f16 graphs: ORT rounds after every op, a fused kernel once.
TOLERANCE = {"f32": (4e-3, 1e-3), "f16": (2e-2, 2e-2)}
# f16 rounding noise also grows with an output's largest magnitude: a chain's scalars carry an
# ulp of its biggest values to smaller elements (seed 1920 of v9: outputs up to 204, where an
# f16 ulp is 0.125, and 0.05 apart at an element of 1.35). atol grows by this many times the
# largest |output| (about 2 f16 ulps of it), rounded up to a power of two so that cases group
# per `bolt check` run.
MAGNITUDE_ATOL = {"f32": 0.0, "f16": 2e-3}


def magnitude(want: list) -> int:
    """k with every |output| <= 2**k (k >= 0)."""
    top = max([float(np.abs(w.astype(np.float64)).max(initial=0.0)) for w in want] + [1.0])
    return max(0, int(np.ceil(np.log2(top))))


def tolerance(prec: str, k: int) -> tuple[float, float]:
    rtol, atol = TOLERANCE[prec]
    return rtol, atol + MAGNITUDE_ATOL[prec] * 2.0**k

sys.path.insert(0, str(REPO / "plugin" / "python"))
ort.set_default_logger_severity(3)


def bolt_exe() -> Path:
    """The `bolt` command line (BOLT_EXE, else this repository's release build)."""
    p = Path(os.environ.get("BOLT_EXE", REPO / "target" / "release" / "bolt"))
    if not p.exists():
        raise FileNotFoundError(f"{p} does not exist: build it with `cargo build --release --bin bolt`")
    return p


# ------------------------------------------------------------------------------- builder


@dataclass
class Builder:
    """A graph under construction; shapes are tracked by hand as the generator knows them."""

    rng: np.random.Generator
    half: bool = False  # f16 inputs, weights and constants
    nodes: list = field(default_factory=list)
    inits: list = field(default_factory=list)
    inputs: list = field(default_factory=list)
    feeds: dict = field(default_factory=dict)
    outputs: list = field(default_factory=list)
    shapes: dict = field(default_factory=dict)
    n: int = 0

    def name(self, stem: str) -> str:
        self.n += 1
        return f"{stem}{self.n}"

    def const(self, arr: np.ndarray, stem: str = "c") -> str:
        name = self.name(stem)
        self.inits.append(numpy_helper.from_array(np.asarray(arr, dtype=self.np_type), name))
        self.shapes[name] = tuple(np.shape(arr))
        return name

    def const_i64(self, values, stem: str = "shape") -> str:
        name = self.name(stem)
        self.inits.append(numpy_helper.from_array(np.asarray(values, dtype=np.int64), name))
        self.shapes[name] = (len(values),)
        return name

    def input(self, shape, stem: str = "in") -> str:
        name = self.name(stem)
        self.inputs.append(helper.make_tensor_value_info(name, self.elem, list(shape)))
        self.feeds[name] = self.rng.standard_normal(shape).astype(self.np_type)
        self.shapes[name] = tuple(shape)
        return name

    def typed_input(self, values: np.ndarray, stem: str = "mask") -> str:
        """A graph input of the values' own type (bool masks, int64 token ids)."""
        name = self.name(stem)
        elem = helper.np_dtype_to_tensor_dtype(values.dtype)
        self.inputs.append(helper.make_tensor_value_info(name, elem, list(values.shape)))
        self.feeds[name] = values
        self.shapes[name] = tuple(values.shape)
        return name

    def op(self, op_type: str, ins: list, shape, **attrs) -> str:
        out = self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, ins, [out], name=f"{op_type}_{self.n}", **attrs))
        self.shapes[out] = tuple(shape) if shape is not None else None
        return out

    @property
    def np_type(self):
        return np.float16 if self.half else np.float32

    @property
    def elem(self):
        return TensorProto.FLOAT16 if self.half else TensorProto.FLOAT

    def output(self, t: str) -> None:
        if t not in self.outputs and t not in self.feeds:
            self.outputs.append(t)

    def model(self, name: str) -> onnx.ModelProto:
        # Infer every tensor's type first (a Cast changes the element type), then declare the
        # outputs with their inferred types.
        g = helper.make_graph(self.nodes, name, self.inputs, [], initializer=self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
        m.ir_version = 8
        m = onnx.shape_inference.infer_shapes(m, strict_mode=True)
        vi = {v.name: v for v in m.graph.value_info}
        m.graph.output.extend(vi[o] for o in self.outputs)
        onnx.checker.check_model(m, full_check=True)
        return m


def weight(b: Builder, shape, fan_in: int) -> str:
    return b.const(b.rng.standard_normal(shape) / np.sqrt(max(fan_in, 1)), "w")


# ------------------------------------------------------------------------------- anchors


def gemm_anchor(b: Builder, x: str | None, k: int | None):
    """MatMul / batched MatMul / Gemm; returns (output, shape)."""
    rng = b.rng
    m, n = int(rng.integers(1, 9)), int(rng.choice([3, 4, 8, 16]))
    kind = rng.choice(["matmul", "matmul3d", "batched", "gemm"]) if x is None else rng.choice(["matmul", "gemm"])
    if x is None:
        k = int(rng.choice([4, 5, 8, 16]))
    if kind == "matmul3d":
        a = b.input((2, m, k))
        return b.op("MatMul", [a, weight(b, (k, n), k)], (2, m, n)), (2, m, n)
    if kind == "batched":
        a, w = b.input((2, m, k)), b.input((2, k, n))
        return b.op("MatMul", [a, w], (2, m, n)), (2, m, n)
    if x is not None:
        m = b.shapes[x][0]
    if kind == "matmul":
        a = x or b.input((m, k))
        return b.op("MatMul", [a, weight(b, (k, n), k)], (m, n)), (m, n)
    trans_a, trans_b = int(rng.integers(0, 2)), int(rng.integers(0, 2))
    if x is not None:
        trans_a = 0
    a = x or b.input((k, m) if trans_a else (m, k))
    w = weight(b, (n, k) if trans_b else (k, n), k)
    attrs = {"transA": trans_a, "transB": trans_b}
    if rng.random() < 0.5:
        attrs["alpha"] = float(rng.choice([0.5, 2.0, 0.125, -1.0]))
    ins = [a, w]
    c = rng.choice(["none", "vec", "row", "scalar", "full_const", "full_input", "col_const", "vec_input"])
    if c != "none":
        if rng.random() < 0.5:
            attrs["beta"] = float(rng.choice([0.5, 2.0, 0.0, -1.0]))
        shape = {"vec": (n,), "row": (1, n), "scalar": (1,), "full_const": (m, n), "full_input": (m, n),
                 "col_const": (m, 1), "vec_input": (n,)}[c]
        ins.append(b.input(shape) if c.endswith("input") else b.const(rng.standard_normal(shape)))
    return b.op("Gemm", ins, (m, n), **attrs), (m, n)


def conv_out(size, k, s, p0, p1, d):
    return (size + p0 + p1 - d * (k - 1) - 1) // s + 1


def conv_anchor(b: Builder, x: str | None):
    rng = b.rng
    if x is None:
        c = int(rng.choice([2, 4, 6, 8]))
        h, w = int(rng.integers(4, 10)), int(rng.integers(4, 10))
        x = b.input((int(rng.integers(1, 3)), c, h, w))
    nb, c, h, w = b.shapes[x]
    groups = int(rng.choice([g for g in (1, 2, c) if c % g == 0])) if rng.random() < 0.4 else 1
    kout = groups * int(rng.choice([1, 2, 3, 4])) if groups > 1 else int(rng.choice([4, 6, 8]))
    kh, kw = int(rng.choice([1, 2, 3])), int(rng.choice([1, 3]))
    s = [int(rng.choice([1, 1, 2])) for _ in range(2)]
    d = [int(rng.choice([1, 1, 2])) for _ in range(2)]
    attrs = {"kernel_shape": [kh, kw], "strides": s, "dilations": d}
    if groups > 1:
        attrs["group"] = groups
    auto_pad = rng.choice(["NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"])
    if auto_pad == "NOTSET":
        pads = [int(rng.integers(0, 2)) for _ in range(4)]
        attrs["pads"] = pads
        oh = conv_out(h, kh, s[0], pads[0], pads[2], d[0])
        ow = conv_out(w, kw, s[1], pads[1], pads[3], d[1])
    else:
        attrs["auto_pad"] = str(auto_pad)
        if auto_pad != "VALID":  # ORT's CPU conv has no dilation with SAME_*
            d = attrs["dilations"] = [1, 1]
        if auto_pad == "VALID":
            oh, ow = conv_out(h, kh, s[0], 0, 0, d[0]), conv_out(w, kw, s[1], 0, 0, d[1])
        else:
            oh, ow = -(-h // s[0]), -(-w // s[1])
    if oh < 1 or ow < 1:
        attrs = {"kernel_shape": [1, 1]}
        kh = kw = 1
        oh, ow = h, w
        groups = 1
    ins = [x, weight(b, (kout, c // groups, kh, kw), c // groups * kh * kw)]
    if rng.random() < 0.6:
        ins.append(b.const(rng.standard_normal(kout)))
    return b.op("Conv", ins, (nb, kout, oh, ow), **attrs), (nb, kout, oh, ow)


# ---------------------------------------------------------------------------- activations


def scalar(b: Builder, v: float) -> str:
    return b.const(np.array(v, dtype=np.float32), "s")


def activation(b: Builder, x: str, shape) -> str:
    """One activation in a random spelling (single op or an exporter's decomposition)."""
    rng = b.rng
    kind = rng.choice(["Relu", "Sigmoid", "Tanh", "LeakyRelu", "Clip", "Clip_min", "HardSigmoid", "HardSwish",
                       "Softplus", "Elu", "silu", "gelu_erf", "gelu_erf2", "gelu_tanh", "hardswish_clip",
                       "hardswish_hs"])
    op = lambda t, ins, **a: b.op(t, ins, shape, **a)  # noqa: E731
    if kind in ("Relu", "Sigmoid", "Tanh", "Softplus", "HardSwish"):
        return op(kind, [x])
    if kind == "LeakyRelu":
        return op(kind, [x], alpha=float(rng.choice([0.01, 0.1, 0.2])))
    if kind == "Elu":  # sqrt(x*x + 1): element-wise, but no activation Bolt knows
        return op("Sqrt", [op("Add", [op("Mul", [x, x]), scalar(b, 1.0)])])
    if kind == "HardSigmoid":
        return op(kind, [x], alpha=float(rng.choice([0.2, 1 / 6])), beta=0.5)
    if kind == "Clip":
        return op(kind, [x, scalar(b, float(rng.choice([0.0, -1.0]))), scalar(b, float(rng.choice([6.0, 1.0])))])
    if kind == "Clip_min":
        return op("Clip", [x, scalar(b, 0.0)])
    if kind == "silu":
        s = op("Sigmoid", [x])
        return op("Mul", [x, s] if rng.random() < 0.5 else [s, x])
    if kind in ("gelu_erf", "gelu_erf2"):
        e = op("Erf", [op("Div", [x, scalar(b, float(np.sqrt(2.0)))])])
        one = op("Add", [e, scalar(b, 1.0)])
        if kind == "gelu_erf":
            return op("Mul", [op("Mul", [x, one]), scalar(b, 0.5)])
        return op("Mul", [op("Mul", [x, scalar(b, 0.5)]), one])
    if kind == "gelu_tanh":
        x3 = op("Mul", [op("Mul", [x, x]), x])
        inner = op("Mul", [op("Add", [x, op("Mul", [x3, scalar(b, 0.044715)])]), scalar(b, float(np.sqrt(2 / np.pi)))])
        return op("Mul", [op("Mul", [x, scalar(b, 0.5)]), op("Add", [op("Tanh", [inner]), scalar(b, 1.0)])])
    if kind == "hardswish_clip":
        c = op("Clip", [op("Add", [x, scalar(b, 3.0)]), scalar(b, 0.0), scalar(b, 6.0)])
        return op("Div", [op("Mul", [x, c]), scalar(b, 6.0)])
    # x * HardSigmoid(x, 1/6, 0.5)
    return op("Mul", [x, op("HardSigmoid", [x], alpha=1 / 6, beta=0.5)])


# ----------------------------------------------------------------------------- epilogues


def epilogue(b: Builder, x: str, shape, conv: bool, anchor_in: str | None) -> tuple[str, bool]:
    """A random chain after an anchor; returns (last tensor, whether it ends in a Cast)."""
    rng = b.rng
    cur, earlier = x, []
    ch = shape[1] if conv else shape[-1]
    for _ in range(int(rng.integers(0, 6))):
        step = rng.choice(["mul", "div", "bias", "bias", "residual", "residual", "act", "act", "output_mid",
                           "shared", "sub", "rank_raise", "channel_scale"])
        if step == "channel_scale":
            # A per-channel constant scale (a BatchNormalization frozen into Mul/Add, a layer
            # scale), multiplied or divided; right after the anchor Bolt folds it into the weights.
            if conv:
                shp = [(ch, 1, 1), (1, ch, 1, 1)][int(rng.integers(0, 2))]
            else:
                shp = [(ch,), (1,) * (len(shape) - 1) + (ch,)][int(rng.integers(0, 2))]
            v = rng.uniform(0.25, 2.0, shp) * rng.choice([-1.0, 1.0], shp)
            s = b.const(v.astype(np.float32), "s")
            if rng.random() < 0.3:
                cur = b.op("Div", [cur, s], shape)
            else:
                cur = b.op("Mul", [cur, s] if rng.random() < 0.5 else [s, cur], shape)
        elif step == "mul":
            shp = [(), (1,), (1,) * len(shape)][int(rng.integers(0, 3))]
            s = b.const(np.full(shp, float(rng.choice([0.1, 0.125, 2.0, -0.5, 3.0])), dtype=np.float32), "s")
            cur = b.op("Mul", [cur, s] if rng.random() < 0.5 else [s, cur], shape)
        elif step == "div":
            s = scalar(b, float(rng.choice([8.0, 0.5, -4.0, np.sqrt(8.0)])))
            # s / x is not linear in x: stays with the host.
            ins = [cur, s] if rng.random() < 0.85 else [s, cur]
            if ins[0] == s:
                # A denominator in [0.5, 1.5]: x + 10 could cancel to near 0, where an f16 ulp
                # of difference in x (any two correct convs) becomes any difference at all.
                ins = [s, b.op("Add", [b.op("Sigmoid", [cur], shape), scalar(b, 0.5)], shape)]
            cur = b.op("Div", ins, shape)
        elif step == "bias":
            if conv:
                shp = [(ch, 1, 1), (1, ch, 1, 1), (1,)][int(rng.integers(0, 3))]
            else:
                shp = [(ch,), (1,) * (len(shape) - 1) + (ch,), ()][int(rng.integers(0, 3))]
            bias = b.const(rng.standard_normal(shp))
            cur = b.op("Add", [cur, bias] if rng.random() < 0.5 else [bias, cur], shape)
        elif step == "rank_raise":  # a bias that raises the output's rank: not the kernel's shape
            bias = b.const(rng.standard_normal((1, 1, ch, 1, 1) if conv else (1,) * len(shape) + (ch,)))
            new = (1,) + tuple(shape)
            cur = b.op("Add", [cur, bias], new)
            return cur, False
        elif step == "residual":
            pick = rng.random()
            if pick < 0.2 and earlier:
                r = earlier[int(rng.integers(0, len(earlier)))]  # a shared intermediate
            elif pick < 0.3:
                r = cur  # x + x
            elif pick < 0.45 and anchor_in is not None and b.shapes.get(anchor_in) == tuple(shape):
                r = anchor_in  # a ResNet-style skip from the anchor's input
            else:
                r = b.input(shape, "r")
            cur = b.op("Add", [cur, r] if rng.random() < 0.5 else [r, cur], shape)
        elif step == "sub":
            cur = b.op("Sub", [cur, b.const(rng.standard_normal((ch, 1, 1) if conv else (ch,)))], shape)
        elif step == "act":
            cur = activation(b, cur, shape)
        elif step == "output_mid":
            b.output(cur)
        elif step == "shared":
            b.output(b.op("Relu", [cur], shape))
        earlier.append(cur)
    if rng.random() < 0.15:
        return b.op("Cast", [cur], shape, to=TensorProto.FLOAT if b.half else TensorProto.FLOAT16), True
    return cur, False


def pool_out(size, k, s, p, ceil):
    """Pooling output size; None in ceil mode when a last window would start in the end padding
    (ONNX's shape inference keeps it, PyTorch's rule and ORT's drop it)."""
    span = size + 2 * p - k
    out = (-(-span // s) if ceil else span // s) + 1
    return None if ceil and (out - 1) * s >= size + p else out


def glue(b: Builder, x: str) -> str:
    """Between two conv blocks: an op the layout pass may run NHWC (element-wise with a
    broadcast constant, Concat, Slice, Resize, pools, DepthToSpace) or one it may not, and the
    ops Bolt rewrites (a ConvTranspose that tiles its output, a standalone BatchNormalization)."""
    rng = b.rng
    nb, c, h, w = b.shapes[x]
    i64 = lambda v: b.inits.append(numpy_helper.from_array(np.array(v, np.int64), nm := b.name("i"))) or nm  # noqa: E731
    kind = rng.choice(["concat_self", "slice_ch", "slice_hw", "resize", "bcast_w", "bcast_hw", "maxpool", "two_branch",
                       "avgpool", "squeeze_excite", "deconv", "batchnorm", "resize_half", "softmax_axis", "focus",
                       "resize_linear", "squeeze_if", "run_time_if"])
    if kind == "squeeze_if":
        # PyTorch's x.squeeze(2) at opset >= 11: If(Shape(x)[2] == 1, Squeeze, ...), which
        # static shapes decide (the planner inlines it).
        u = b.op("Unsqueeze", [x, i64([2])], (nb, c, 1, h, w))
        dim = b.op("Gather", [b.op("Shape", [u], (5,)), i64(2)], ())
        cond = b.op("Equal", [dim, i64(1)], ())
        sq = helper.make_graph([helper.make_node("Squeeze", [u, i64([2])], ["sq_out" + u], name="sq" + u)], "then" + u,
                               [], [helper.make_tensor_value_info("sq_out" + u, b.elem, [nb, c, h, w])])
        # (The else branch keeps the rank, so that ONNX's shape inference types the If's output.)
        keep = helper.make_graph([helper.make_node("Reshape", [u, i64([nb, c, h, w])], ["id_out" + u], name="id" + u)],
                                 "else" + u, [], [helper.make_tensor_value_info("id_out" + u, b.elem, [nb, c, h, w])])
        return b.op("If", [cond], (nb, c, h, w), then_branch=sq, else_branch=keep)
    if kind == "run_time_if":
        # A condition only the run decides (a bool input): the host runs the branch it takes,
        # which reads x and the enclosing graph's constants.
        flag = b.typed_input(np.array(bool(rng.random() < 0.5)), stem="flag")
        scale = b.const(rng.uniform(0.5, 1.5, (1, c, 1, 1)))
        up = helper.make_graph([helper.make_node("Mul", [x, scale], ["mul_out" + flag], name="mul" + flag)],
                               "then" + flag, [], [helper.make_tensor_value_info("mul_out" + flag, b.elem, [nb, c, h, w])])
        down = helper.make_graph([helper.make_node("Sigmoid", [x], ["sig_out" + flag], name="sig" + flag)],
                                 "else" + flag, [], [helper.make_tensor_value_info("sig_out" + flag, b.elem, [nb, c, h, w])])
        return b.op("If", [flag], (nb, c, h, w), then_branch=up, else_branch=down)
    if kind == "softmax_axis":
        # A softmax over the channels or the rows (YOLOv8's DFL head), maybe read through a
        # transpose swapping channels and rows as that head does; or a LogSoftmax (CTC heads).
        op = "LogSoftmax" if rng.random() < 0.3 else "Softmax"
        if rng.random() < 0.5:
            x = b.op("Transpose", [x], (nb, h, c, w), perm=[0, 2, 1, 3])
            nb, c, h, w = b.shapes[x]
            sm = b.op(op, [x], (nb, c, h, w), axis=int(rng.choice([1, 2, -3])))
            return b.op("Transpose", [sm], (nb, h, c, w), perm=[0, 2, 1, 3])
        return b.op(op, [x], (nb, c, h, w), axis=int(rng.choice([0, 1, 2, -2])))
    if kind == "focus" and h % 2 == 0 and w % 2 == 0:
        # YOLOv5's Focus: the four pixel phases as channels (strided slices + Concat).
        parts = [b.op("Slice", [x, i64([r, q]), i64([h, w]), i64([2, 3]), i64([2, 2])], (nb, c, h // 2, w // 2))
                 for r, q in ((0, 0), (1, 0), (0, 1), (1, 1))]
        return b.op("Concat", parts, (nb, 4 * c, h // 2, w // 2), axis=1)
    if kind == "avgpool" and min(h, w) >= 2:
        k, p, ceil = int(rng.choice([2, 3])), int(rng.integers(0, 2)), int(rng.random() < 0.5)
        p = min(p, k - 1)
        if min(h, w) + 2 * p < k:  # a window must fit the padded input
            k = 2
        if None in (pool_out(h, k, 2, p, ceil), pool_out(w, k, 2, p, ceil)):
            ceil = 0
        shape = (nb, c, pool_out(h, k, 2, p, ceil), pool_out(w, k, 2, p, ceil))
        return b.op("AveragePool", [x], shape, kernel_shape=[k, k], strides=[2, 2], pads=[p] * 4, ceil_mode=ceil,
                    count_include_pad=int(rng.random() < 0.5))
    if kind == "squeeze_excite":
        g = b.op("GlobalAveragePool", [x], (nb, c, 1, 1))
        return b.op("Mul", [x, b.op("Sigmoid", [g], (nb, c, 1, 1))], (nb, c, h, w))
    if kind == "deconv":
        wt = weight(b, (c, c, 2, 2), c * 4)
        return b.op("ConvTranspose", [x, wt, b.const(rng.standard_normal(c) * 0.1)], (nb, c, 2 * h, 2 * w),
                    kernel_shape=[2, 2], strides=[2, 2])
    if kind == "batchnorm":
        params = [b.const(rng.uniform(0.5, 1.5, c)), b.const(rng.standard_normal(c) * 0.1),
                  b.const(rng.standard_normal(c) * 0.1), b.const(rng.uniform(0.5, 2.0, c))]
        return b.op("BatchNormalization", [x, *params], (nb, c, h, w), epsilon=1e-5)
    if kind == "resize_half":
        b.inits.append(numpy_helper.from_array(np.array([1, 1, 2, 1.5], np.float32), scales := b.name("scales")))
        return b.op("Resize", [x, "", scales], (nb, c, 2 * h, int(w * 1.5)), mode="nearest",
                    coordinate_transformation_mode="half_pixel", nearest_mode="round_prefer_floor")
    if kind == "resize_linear":
        # Bilinear upsampling as PyTorch (align_corners False / True), TF and others export it.
        coord = str(rng.choice(["pytorch_half_pixel", "align_corners", "half_pixel", "asymmetric"]))
        b.inits.append(numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), scales := b.name("scales")))
        return b.op("Resize", [x, "", scales], (nb, c, 2 * h, 2 * w), mode="linear",
                    coordinate_transformation_mode=coord)
    if kind == "concat_self":
        r = b.op("Relu", [x], (nb, c, h, w))
        return b.op("Concat", [x, r] if rng.random() < 0.5 else [r, x], (nb, 2 * c, h, w), axis=int(rng.choice([1, -3])))
    if kind == "slice_ch" and c >= 2:
        return b.op("Slice", [x, i64([c // 2]), i64([c]), i64([int(rng.choice([1, -3]))])], (nb, c - c // 2, h, w))
    if kind == "slice_hw":
        w0 = 1 if w >= 2 else 0
        return b.op("Slice", [x, i64([0, w0]), i64([h, w]), i64([2, 3]), i64([2, 2])], (nb, c, -(-h // 2), -(-(w - w0) // 2)))
    if kind == "resize":
        b.inits.append(numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), scales := b.name("scales")))
        return b.op("Resize", [x, "", scales], (nb, c, 2 * h, 2 * w), mode="nearest",
                    coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    if kind == "bcast_w":
        return b.op("Add", [x, b.const(rng.standard_normal(w))], (nb, c, h, w))
    if kind == "bcast_hw":
        return b.op("Mul", [b.const(rng.standard_normal((1, 1, h, w))), x], (nb, c, h, w))
    if kind == "maxpool":
        return b.op("MaxPool", [x], (nb, c, h, w), kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    # Two branches that meet again: x -> conv and x -> sigmoid, concatenated.
    y, (_, k, oh, ow) = conv_anchor(b, x)
    if (oh, ow) != (h, w):
        return y
    return b.op("Concat", [y, b.op("Sigmoid", [x], (nb, c, h, w))], (nb, k + c, h, w), axis=1)


def attention_block(b: Builder) -> str:
    """A random attention core with the head split / merge around it; returns its output."""
    rng = b.rng
    rank4 = rng.random() < 0.75
    nb, h = int(rng.integers(1, 3)), (int(rng.integers(1, 4)) if rank4 else 1)
    sq = int(rng.integers(1, 13))
    sk = sq if rng.random() < 0.6 else int(rng.integers(1, 13))
    d = int(rng.choice([4, 8, 12, 16, 20]))
    dv = d if rng.random() < 0.7 else int(rng.choice([4, 8, 16]))
    lead = (nb, h) if rank4 else (nb,)

    def operand(s: int, dim: int, kind: str) -> str:
        # [.., s, dim] for Q / V, or Kᵀ [.., dim, s] for K.
        shared = rank4 and kind != "q" and rng.random() < 0.2  # K, V shared by the heads
        hh = 1 if shared else h
        if kind == "k":
            form = rng.choice(["bshd", "bhsd", "given"]) if rank4 else rng.choice(["bsd", "given"])
            if form == "bshd":
                x = b.input((nb, s, hh, dim))
                return b.op("Transpose", [x], (nb, hh, dim, s), perm=[0, 2, 3, 1])
            if form in ("bhsd", "bsd"):
                x = b.input((nb, hh, s, dim) if rank4 else (nb, s, dim))
                perm = [0, 1, 3, 2] if rank4 else [0, 2, 1]
                return b.op("Transpose", [x], (nb, hh, dim, s) if rank4 else (nb, dim, s), perm=perm)
            return b.input((nb, hh, dim, s) if rank4 else (nb, dim, s))
        if rank4 and rng.random() < 0.5:
            x = b.input((nb, s, hh, dim))
            return b.op("Transpose", [x], (nb, hh, s, dim), perm=[0, 2, 1, 3])
        return b.input((nb, hh, s, dim) if rank4 else (nb, s, dim))

    q, kt, v = operand(sq, d, "q"), operand(sk, d, "k"), operand(sk, dv, "v")
    scores = (*lead, sq, sk)
    where = rng.choice(["div", "mul_left", "mul_right", "operands", "none"])
    if where == "operands":
        c = scalar(b, float(d) ** -0.25)
        q = b.op("Mul", [q, c], b.shapes[q])
        kt = b.op("Mul", [c, kt], b.shapes[kt])
    x = b.op("MatMul", [q, kt], scores)
    if where == "div":
        x = b.op("Div", [x, scalar(b, float(np.sqrt(d)))], scores)
    elif where.startswith("mul"):
        c = scalar(b, float(d) ** -0.5)
        x = b.op("Mul", [x, c] if where == "mul_right" else [c, x], scores)
    mask = rng.choice(["none", "padding", "causal", "full", "attention_mask", "token_ids"])
    mask_shape = (nb, 1, 1, sk) if rank4 else (nb, 1, sk)
    if mask == "padding":
        m = b.input((nb, 1, 1, sk) if rank4 else (nb, 1, sk))
        b.feeds[m] = np.where(rng.random(b.shapes[m]) < 0.3, -1e4, 0.0).astype(b.np_type)
        b.feeds[m][..., 0] = 0  # a key every query sees
    elif mask == "causal":
        # Top-left aligned, so every query sees key 0: a row masked whole adds -1e4 to every
        # score, which leaves the scores to the rounding of -1e4 (ill-conditioned in any order).
        m = b.const(np.where(np.arange(sk)[None, :] > np.arange(sq)[:, None], -1e4, 0.0), "causal")
    elif mask == "full":
        m = b.input((nb, 1, sq, sk) if rank4 else (nb, sq, sk))
    elif mask == "attention_mask":
        # HuggingFace's BERT export: (1 - mask[:, None, None, :].float()) * -1e4 from a bool or
        # int64 attention mask (a stitched mask region ahead of the attention).
        keep = rng.random((nb, sk)) >= 0.3
        keep[:, 0] = True
        a = b.typed_input(keep if rng.random() < 0.5 else keep.astype(np.int64))
        u = b.op("Unsqueeze", [a, b.const_i64([1, 2] if rank4 else [1])], mask_shape)
        f = b.op("Cast", [u], mask_shape, to=b.elem)
        inv = b.op("Sub", [scalar(b, 1.0), f], mask_shape)
        m = b.op("Mul", [inv, scalar(b, -1e4)], mask_shape)
    elif mask == "token_ids":
        # A mask from token ids (pad id 0): Where(ids == pad, -1e4, 0), or Not and a bool Cast.
        ids = rng.integers(0, 4, (nb, sk)).astype(np.int64)
        ids[:, 0] = 1
        eq = b.op("Equal", [b.typed_input(ids, "ids"), b.const_i64([0])], (nb, sk))
        u = b.op("Unsqueeze", [eq, b.const_i64([1, 2] if rank4 else [1])], mask_shape)
        if rng.random() < 0.5:
            m = b.op("Where", [u, scalar(b, -1e4), scalar(b, 0.0)], mask_shape)
        else:
            keep = b.op("Cast", [b.op("Not", [u], mask_shape)], mask_shape, to=b.elem)
            m = b.op("Mul", [b.op("Sub", [keep, scalar(b, 1.0)], mask_shape), scalar(b, 1e4)], mask_shape)
    if mask != "none":
        x = b.op("Add", [x, m] if rng.random() < 0.5 else [m, x], scores)
    p = b.op("Softmax", [x], scores, axis=-1)
    out = b.op("MatMul", [p, v], (*lead, sq, dv))
    if rank4 and rng.random() < 0.6:
        out = b.op("Transpose", [out], (nb, sq, h, dv), perm=[0, 2, 1, 3])
        if rng.random() < 0.5:
            out = b.op("Reshape", [out, b.const_i64([0, 0, h * dv])], (nb, sq, h * dv))
    return out


def embeddings(b: Builder) -> tuple[str, int]:
    """A transformer's embeddings ahead of the GEMMs: rows of a table by int64 token ids
    (negative ones count from the end), maybe plus position embeddings and a LayerNorm."""
    rng = b.rng
    m, k, vocab = int(rng.integers(1, 9)), int(rng.choice([4, 5, 8, 16])), int(rng.integers(2, 20))
    ids = b.typed_input(rng.integers(-vocab, vocab, (m,)).astype(np.int64), "ids")
    x = b.op("Gather", [b.const(rng.standard_normal((vocab, k)), "table"), ids], (m, k), axis=0)
    if rng.random() < 0.6:
        x = b.op("Add", [x, b.const(rng.standard_normal((m, k)) * 0.1, "pos")], (m, k))
    if rng.random() < 0.6:
        gamma, beta = b.const(1 + 0.1 * rng.standard_normal(k)), b.const(0.1 * rng.standard_normal(k))
        x = b.op("LayerNormalization", [x, gamma, beta], (m, k), axis=-1, epsilon=1e-5)
    return x, k


def bcast_shape(rng, shape) -> tuple:
    """A shape that broadcasts to `shape`: a scalar, the last axis, one axis kept, all of it,
    or a lower rank."""
    kind = rng.choice(["scalar", "last", "one_axis", "full", "lower_rank"])
    r = len(shape)
    if kind == "scalar" or r == 0:
        return ()
    if kind == "last":
        return (shape[-1],)
    if kind == "one_axis":
        a = int(rng.integers(0, r))
        return tuple(d if i == a else 1 for i, d in enumerate(shape))
    if kind == "lower_rank" and r >= 2:
        return tuple(shape[int(rng.integers(1, r)):])
    return tuple(shape)


def reduced(shape, axes, keep) -> tuple:
    return tuple(1 if i in axes else d for i, d in enumerate(shape) if keep or i not in axes)


def region_block(b: Builder) -> str:
    """A memory-intensive region for the stitcher: 2 to 8 element-wise, broadcast, reduction,
    normalisation and data-movement steps on a tensor of rank 1 to 4 with odd sizes (rows of
    any width, reductions over any axes, keepdims either way, results of earlier steps read
    again, a graph output in the middle). Values stay in a range where f32 rounding cannot
    flip a comparison's side by more than the tolerance allows."""
    rng = b.rng
    rank = int(rng.integers(1, 5))
    dims = [int(rng.choice([1, 2, 3, 5, 7, 8, 16, 33])) for _ in range(rank)]
    if rng.random() < 0.4:
        dims[-1] = int(rng.choice([64, 100, 300, 513]))  # a long row: block-wide reductions
    x = b.input(tuple(dims))
    seen = [x]  # earlier results, to read again
    for _ in range(int(rng.integers(2, 9))):
        shape = b.shapes[x]
        r = len(shape)
        kind = rng.choice(["unary", "bounded", "const", "other", "reduce", "reduce_back", "softmax",
                           "layernorm", "where", "transpose", "clip", "powsq"] if r else
                          ["unary", "bounded", "const", "other", "clip", "powsq"])
        if kind == "unary":
            x = b.op(str(rng.choice(["Relu", "Tanh", "Sigmoid", "Abs", "Neg", "Erf", "Softsign"])), [x], shape)
        elif kind == "bounded":
            # Exp, Log, Sqrt, Reciprocal on inputs that keep them finite and well-conditioned.
            op = str(rng.choice(["Exp", "Log", "Sqrt", "Reciprocal"]))
            if op == "Exp":
                inner = b.op("Tanh", [x], shape)
            else:
                inner = b.op("Add", [b.op("Abs", [x], shape), b.const(np.float32(0.5))], shape)
            x = b.op(op, [inner], shape)
        elif kind == "const":
            op = str(rng.choice(["Add", "Sub", "Mul", "Div", "Max", "Min"]))
            c = rng.uniform(0.5, 1.5, bcast_shape(rng, shape)) * rng.choice([-1, 1])
            ins = [x, b.const(c)] if op == "Div" or rng.random() < 0.5 else [b.const(c), x]
            x = b.op(op, ins, np.broadcast_shapes(shape, np.shape(c)))
        elif kind == "other":
            y = seen[int(rng.integers(0, len(seen)))]
            try:
                out = np.broadcast_shapes(shape, b.shapes[y])
            except ValueError:
                continue
            x = b.op(str(rng.choice(["Add", "Sub", "Mul", "Max"])), [x, y] if rng.random() < 0.5 else [y, x], out)
        elif kind in ("reduce", "reduce_back"):
            axes = sorted(int(a) for a in rng.choice(r, int(rng.integers(1, r + 1)), replace=False))
            keep = kind == "reduce_back" or rng.random() < 0.5
            op = str(rng.choice(["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceL2"]))
            # Negative axes count from the end.
            written = [a - r if rng.random() < 0.3 else a for a in axes]
            out_shape = reduced(shape, axes, keep)
            if op == "ReduceSum":  # axes an input from opset 13
                red = b.op(op, [x, b.const_i64(written)], out_shape, keepdims=int(keep))
            else:
                red = b.op(op, [x], out_shape, axes=written, keepdims=int(keep))
            if kind == "reduce_back":
                # Centre or scale by the reduction, as normalisations do.
                x = b.op(str(rng.choice(["Sub", "Div"])) if op != "ReduceMean" else "Sub",
                         [x, b.op("Add", [b.op("Abs", [red], out_shape), b.const(np.float32(1.0))], out_shape)],
                         shape)
            else:
                x = red
        elif kind == "softmax":
            x = b.op(str(rng.choice(["Softmax", "LogSoftmax"])), [x], shape, axis=int(rng.integers(-r, r)))
        elif kind == "layernorm":
            axis = int(rng.integers(-r, r))
            norm = shape[axis:] if axis >= 0 else shape[r + axis:]
            gamma, beta = b.const(1 + 0.1 * rng.standard_normal(norm)), b.const(0.1 * rng.standard_normal(norm))
            x = b.op("LayerNormalization", [x, gamma, beta], shape, axis=axis, epsilon=1e-5)
        elif kind == "where":
            cond = b.op(str(rng.choice(["Greater", "Less"])), [x, b.const(np.float32(rng.uniform(-0.3, 0.3)))], shape)
            other = b.const(rng.standard_normal(bcast_shape(rng, shape)))
            x = b.op("Where", [cond, x, other], shape)
        elif kind == "transpose" and r >= 2:
            perm = [int(a) for a in rng.permutation(r)]
            x = b.op("Transpose", [x], tuple(shape[a] for a in perm), perm=perm)
        elif kind == "clip":
            lo = float(rng.uniform(-1, 0))
            x = b.op("Clip", [x, b.const(np.float32(lo)), b.const(np.float32(lo + rng.uniform(0.2, 2)))], shape)
        elif kind == "powsq":
            # Squares of squares of squares outgrow f32's precision for the steps after them.
            x = b.op("Pow", [b.op("Tanh", [x], shape) if len(seen) > 3 else x, b.const(np.float32(2.0))], shape)
        seen.append(x)
        if rng.random() < 0.1:
            b.output(x)
    return x


def generate(seed: int) -> tuple[onnx.ModelProto, dict]:
    """The graph of `seed`: 1 to 3 anchor blocks of one family, each with its epilogue chain."""
    rng = np.random.default_rng([GENERATOR_VERSION, seed])
    b = Builder(rng, half=bool(rng.random() < 0.3))
    family = b.rng.choice(["gemm", "conv", "attention", "region"], p=[0.35, 0.35, 0.15, 0.15])
    if family == "region":
        # f32: onnxruntime's CPU provider has no f16 kernels for most of these ops.
        b.half = False
        b.output(region_block(b))
        return b.model(f"fuzz_v{GENERATOR_VERSION}_seed{seed}"), b.feeds
    if family == "attention":
        b.output(attention_block(b))
        return b.model(f"fuzz_v{GENERATOR_VERSION}_seed{seed}"), b.feeds
    x, k = None, None
    if family == "gemm" and b.rng.random() < 0.25:
        x, k = embeddings(b)
    for _ in range(int(b.rng.integers(1, 4))):
        if family == "gemm":
            y, shape = gemm_anchor(b, x, k)
        else:
            y, shape = conv_anchor(b, x)
        out, cast = epilogue(b, y, shape, family == "conv", x)
        if cast or b.shapes.get(out) != tuple(shape) or (family == "gemm" and len(shape) != 2):
            b.output(out)
            break
        x, k = out, shape[-1]
        if family == "conv" and b.rng.random() < 0.6:
            x = glue(b, x)
    else:
        b.output(x)
    return b.model(f"fuzz_v{GENERATOR_VERSION}_seed{seed}"), b.feeds


# ----------------------------------------------------------------------------- checking


def feeds_for(model: onnx.ModelProto, seed: int) -> dict:
    """Random inputs for a stored model (corpus replay)."""
    rng = np.random.default_rng(seed)
    init = {i.name for i in model.graph.initializer}
    feeds = {}
    for i in model.graph.input:
        if i.name in init:
            continue
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        np_type = onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)
        feeds[i.name] = rng.standard_normal(shape).astype(np_type)
    return feeds


def precision(model: onnx.ModelProto, feeds: dict) -> str:
    """f16 when any input or weight is (a graph fed only token ids has f16 tables)."""
    f16 = any(a.dtype == np.float16 for a in feeds.values())
    return "f16" if f16 or any(t.data_type == TensorProto.FLOAT16 for t in model.graph.initializer) else "f32"


def ort_cpu(model: onnx.ModelProto, feeds: dict) -> list:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def close(got, want, tol) -> str | None:
    rtol, atol = tol
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"{got.dtype}{list(got.shape)} but ORT CPU gives {want.dtype}{list(want.shape)}"
    g, w = got.astype(np.float64), want.astype(np.float64)
    bad = ~(np.abs(g - w) <= atol + rtol * np.abs(w))
    if bad.any():
        i = int(np.argmax(np.where(bad, np.abs(g - w), -1)))
        return f"max abs err {np.abs(g - w).max():.3e} (element {i}: {g.flat[i]} vs ORT {w.flat[i]})"
    return None


def write_case(d: Path, model: onnx.ModelProto, feeds: dict, want: list) -> None:
    d.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(d / "model.onnx"))
    ds = d / "test_data_set_0"
    ds.mkdir(exist_ok=True)
    for i, (n, a) in enumerate(feeds.items()):
        (ds / f"input_{i}.pb").write_bytes(numpy_helper.from_array(a, n).SerializeToString())
    for j, (o, a) in enumerate(zip(model.graph.output, want)):
        (ds / f"output_{j}.pb").write_bytes(numpy_helper.from_array(a, o.name).SerializeToString())


def bolt_check(root: Path, planned: bool, tol) -> dict:
    """{case: why} for the cases `bolt check [--planned]` fails under ROOT."""
    cmd = [str(bolt_exe()), "check", str(root), "--rtol", str(tol[0]), "--atol", str(tol[1])]
    if planned:
        cmd.append("--planned")
    r = subprocess.run(cmd, capture_output=True, text=True)
    fails = {}
    for line in r.stdout.splitlines():
        m = re.match(r"FAIL (\S+)\s+(.*)", line)
        if m:
            fails[m.group(1)] = m.group(2)
    if r.returncode != 0 and not fails:
        fails["<bolt check>"] = r.stderr.strip() or r.stdout[-2000:]
    return fails


def bolt_compile(model_path: Path) -> str | None:
    r = subprocess.run([str(bolt_exe()), "compile", "--no-artifact", str(model_path)], capture_output=True, text=True)
    return None if r.returncode == 0 else (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]


@dataclass
class Outcome:
    failures: dict  # case -> [why, ...]
    claimed: int = 0  # anchors of GEMM/conv graphs the provider ran on Bolt
    anchors: int = 0


def check_cases(cases: dict, provider: bool = True) -> Outcome:
    """Checks {name: (model, feeds)} three ways; returns what failed, per case."""
    out = Outcome(failures={})
    fail = lambda n, why: out.failures.setdefault(n, []).append(why)  # noqa: E731
    if provider:
        import bolt_ort

        bolt_ort.register()
    with tempfile.TemporaryDirectory(prefix="bolt-fuzz-") as tmp:
        root = Path(tmp)
        for name, (model, feeds) in cases.items():
            want = ort_cpu(model, feeds)
            prec = precision(model, feeds)
            k = magnitude(want)
            case = root / prec / f"m{k}" / name
            write_case(case, model, feeds, want)
            # 1. planned graph vs model on the reference executor.
            why = bolt_compile(case / "model.onnx")
            if why:
                fail(name, f"bolt compile: {why}")
            # 3. through the ONNX Runtime provider.
            if provider:
                so = ort.SessionOptions()
                so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
                try:
                    sess = bolt_ort.session(model.SerializeToString(), so=so)
                    got = sess.run(None, feeds)
                except Exception as e:  # noqa: BLE001 - any provider error is a finding
                    fail(name, f"bolt_ort: {str(e).splitlines()[0]}")
                    continue
                for o, g, w in zip(model.graph.output, got, want):
                    if (why := close(g, w, tolerance(prec, k))) is not None:
                        fail(name, f"bolt_ort output {o.name}: {why}")
                ops = [(n.op_type, sub.ep_name) for sub in sess.get_provider_graph_assignment_info()
                       for n in sub.get_nodes()]
                # GEMM/conv blocks only: attention blocks hold cores Bolt leaves to ORT on purpose
                # (Kᵀ given as a tensor, an activation-by-activation MatMul no kernel reads).
                if not any(op == "Softmax" for op, _ in ops):
                    out.anchors += sum(op in ("MatMul", "Gemm", "Conv") for op, _ in ops)
                    out.claimed += sum(op in ("MatMul", "Gemm", "Conv") and ep == bolt_ort.EP_NAME for op, ep in ops)
        # 2. model and planned graph on the reference executor vs ORT CPU.
        for bucket in sorted(root.glob("*/m*")):
            tol = tolerance(bucket.parent.name, int(bucket.name[1:]))
            for planned in (False, True):
                for name, why in bolt_check(bucket, planned, tol).items():
                    fail(name, f"bolt check{' --planned' if planned else ''}: {why}")
    return out


def seed_cases(start: int, count: int) -> dict:
    cases = {}
    for s in range(start, start + count):
        m, f = generate(s)
        cases[m.graph.name] = (m, f)
    return cases


def corpus_cases() -> dict:
    cases = {}
    for p in sorted(CORPUS.glob("*.onnx")):
        m = onnx.load(str(p))
        cases[p.stem] = (m, feeds_for(m, sum(p.stem.encode())))
    return cases


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=200, help="how many seeds")
    ap.add_argument("--start", type=int, default=0, help="first seed")
    ap.add_argument("--save", action="store_true", help=f"write failing graphs to {CORPUS.relative_to(REPO)}")
    ap.add_argument("--no-provider", action="store_true", help="skip the ONNX Runtime provider check")
    a = ap.parse_args()
    cases = seed_cases(a.start, a.seeds)
    out = check_cases(cases, provider=not a.no_provider)
    for name, whys in sorted(out.failures.items()):
        print(f"FAIL {name}")
        for w in whys:
            print(f"     {w}")
        if a.save and name in cases:
            CORPUS.mkdir(parents=True, exist_ok=True)
            onnx.save(cases[name][0], str(CORPUS / f"{name}.onnx"))
    print(f"{len(cases)} graphs, {len(out.failures)} failing; provider ran {out.claimed} of {out.anchors} anchors on Bolt")
    return 1 if out.failures else 0


if __name__ == "__main__":
    sys.exit(main())
