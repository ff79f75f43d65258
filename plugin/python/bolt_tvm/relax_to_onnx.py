"""Relax dataflow -> ONNX: the form Bolt's Rust core reads (the ONNX Runtime provider hands it
the same). Covers the ops Bolt's patterns match; anything else is a clear error naming the op.

NHWC convolutions become ONNX's NCHW Conv: a tensor produced in NHWC is kept NCHW inside the
graph (elementwise ops and epilogues commute with the layout), and a Transpose is inserted only
where an NHWC tensor enters or leaves. Bolt's planner then chooses the kernel layout itself.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
import tvm
from tvm import relax, tirx

OPSET = 20  # Gelu (with approximate="tanh") is an ONNX op from opset 20.

_DTYPES = {
    "float32": TensorProto.FLOAT,
    "float16": TensorProto.FLOAT16,
    "bfloat16": TensorProto.BFLOAT16,
    "float64": TensorProto.DOUBLE,
    "int64": TensorProto.INT64,
    "int32": TensorProto.INT32,
    "int8": TensorProto.INT8,
    "uint8": TensorProto.UINT8,
    "bool": TensorProto.BOOL,
}
_NCHW = [0, 3, 1, 2]  # NHWC -> NCHW
_NHWC = [0, 2, 3, 1]  # NCHW -> NHWC
_UNARY = {
    "relax.nn.relu": ("Relu", {}),
    "relax.nn.gelu": ("Gelu", {}),
    "relax.nn.gelu_tanh": ("Gelu", {"approximate": "tanh"}),
    "relax.sigmoid": ("Sigmoid", {}),
    "relax.tanh": ("Tanh", {}),
}
_BINARY = {"relax.add": "Add", "relax.multiply": "Mul", "relax.subtract": "Sub", "relax.divide": "Div"}


class UnsupportedRelax(ValueError):
    """A Relax construct this converter (and so Bolt) does not take."""


def onnx_dtype(dtype: str, what: str) -> int:
    try:
        return _DTYPES[str(dtype)]
    except KeyError:
        raise UnsupportedRelax(f"{what}: element type {dtype} is not supported by Bolt") from None


def _dims(sinfo, what: str) -> list:
    if not isinstance(sinfo, relax.TensorType) or sinfo.shape is None:
        raise UnsupportedRelax(f"{what}: needs a tensor with a known rank, has {sinfo}")
    out = []
    for d in sinfo.shape.values:
        if isinstance(d, tirx.IntImm):
            out.append(int(d.value))
        elif isinstance(d, tirx.Var):
            out.append(d.name)
        else:
            raise UnsupportedRelax(f"{what}: dimension {d} is not a constant or a plain variable")
    return out


@dataclass
class _Value:
    """How a Relax value exists in the ONNX graph."""

    name: str | None = None  # ONNX tensor name (None: a constant not yet emitted)
    const: np.ndarray | None = None  # constant value (emitted as an initializer on first use)
    nchw_of_nhwc: bool = False  # the ONNX tensor is the NCHW transpose of the Relax NHWC value
    sinfo: object = None  # the Relax struct info, once bound to a variable


@dataclass
class Converter:
    """Accumulates ONNX nodes for a sequence of Relax bindings."""

    name: str
    nodes: list = field(default_factory=list)
    initializers: list = field(default_factory=list)
    inputs: list = field(default_factory=list)
    values: dict = field(default_factory=dict)  # relax.Var -> _Value
    functions: dict = field(default_factory=dict)  # relax.Var bound to a local Function
    used_names: set = field(default_factory=set)
    # Nodes that only move data between layouts: not something Bolt must take for a match.
    layout_nodes: set = field(default_factory=set)
    _next: int = 0

    # -------------------------------------------------------------------------------- names
    def fresh(self, hint: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_.]", "_", hint) or "t"
        name, i = base, 0
        while name in self.used_names:
            i += 1
            name = f"{base}_{i}"
        self.used_names.add(name)
        return name

    def node(self, op: str, inputs: list[str], hint: str, layout: bool = False, **attrs) -> str:
        out = self.fresh(hint)
        name = self.fresh(f"{op}_{out}")
        self.nodes.append(helper.make_node(op, inputs, [out], name=name, **attrs))
        if layout:
            self.layout_nodes.add(name)
        return out

    def constant(self, value: np.ndarray, hint: str) -> str:
        name = self.fresh(hint)
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    # ------------------------------------------------------------------------------- inputs
    def add_input(self, var: relax.Var) -> None:
        name = self.fresh(var.name)
        sinfo = var.ty
        self.inputs.append(
            helper.make_tensor_value_info(name, onnx_dtype(sinfo.dtype, f"input '{var.name}'"), _dims(sinfo, var.name))
        )
        self.values[var] = _Value(name=name, sinfo=sinfo)

    def value(self, expr, what: str) -> _Value:
        if isinstance(expr, tvm.ir.expr.Constant):
            return _Value(const=expr.value.numpy())
        if isinstance(expr, relax.Var):
            if expr not in self.values:
                self.add_input(expr)  # a free variable of a matched subgraph
            v = self.values[expr]
            if isinstance(v, _Value) and v.sinfo is None:
                v.sinfo = expr.ty
            return v
        raise UnsupportedRelax(f"{what}: argument {type(expr).__name__} is not a variable or constant")

    def plain(self, v: _Value, hint: str) -> str:
        """The ONNX tensor holding `v` in its Relax layout."""
        if v.name is None:
            v.name = self.constant(v.const, hint)
        if v.nchw_of_nhwc:
            return self.node("Transpose", [v.name], f"{hint}_nhwc", layout=True, perm=_NHWC)
        return v.name

    def nchw(self, v: _Value, hint: str) -> str:
        """The ONNX tensor holding NHWC value `v` as NCHW."""
        if v.nchw_of_nhwc:
            return v.name
        if v.const is not None:
            return self.constant(v.const.transpose(_NCHW), f"{hint}_nchw")
        return self.node("Transpose", [v.name], f"{hint}_nchw", layout=True, perm=_NCHW)

    # ----------------------------------------------------------------------------- bindings
    def bind(self, var: relax.Var, expr) -> None:
        hint = var.name
        if isinstance(expr, relax.Function):
            self.functions[var] = expr
            return
        if isinstance(expr, (relax.Var, tvm.ir.expr.Constant)):
            self.values[var] = self.value(expr, hint)
            return
        if isinstance(expr, relax.TupleGetItem):
            # batch_norm's tuple: only its first field (the normalised tensor) is a tensor Bolt reads.
            tup = self.values.get(expr.tuple_value)
            if not isinstance(tup, tuple) or expr.index >= len(tup) or tup[expr.index] is None:
                raise UnsupportedRelax(f"'{hint}': tuple field {expr.index} is not supported")
            self.values[var] = tup[expr.index]
            return
        if not isinstance(expr, relax.Call):
            raise UnsupportedRelax(f"'{hint}': {type(expr).__name__} bindings are not supported")
        if isinstance(expr.op, (relax.Var, relax.GlobalVar)) and expr.op in self.functions:
            self.values[var] = self.inline(self.functions[expr.op], list(expr.args))
            return
        if not isinstance(expr.op, tvm.ir.Op):
            raise UnsupportedRelax(f"'{hint}': calls to {expr.op} are not supported")
        self.values[var] = self.call(expr, hint)

    def inline(self, func: relax.Function, args: list) -> _Value:
        """A call of a local (composite) function: its body, with params bound to the args."""
        for p, a in zip(func.params, args):
            self.values[p] = self.value(a, p.name)
        return self.body(func.body)

    def body(self, body) -> _Value:
        return self.value(self.blocks(body), f"{self.name} result")

    def blocks(self, body):
        """Binds a SeqExpr's bindings; returns its result expression."""
        if not isinstance(body, relax.SeqExpr):
            return body
        for block in body.blocks:
            for b in block.bindings:
                if not isinstance(b, relax.VarBinding):
                    raise UnsupportedRelax(f"{self.name}: match_cast bindings are not supported")
                self.bind(b.var, b.value)
        return body.body

    def call(self, call: relax.Call, hint: str) -> _Value:
        op = call.op.name
        args = list(call.args)
        if op in _UNARY:
            kind, attrs = _UNARY[op]
            x = self.value(args[0], hint)
            if x.name is None:
                x.name = self.constant(x.const, f"{hint}_in")
            return _Value(self.node(kind, [x.name], hint, **attrs), nchw_of_nhwc=x.nchw_of_nhwc)
        if op == "relax.nn.silu":
            x = self.value(args[0], hint)
            if x.name is None:
                x.name = self.constant(x.const, f"{hint}_in")
            s = self.node("Sigmoid", [x.name], f"{hint}_sigmoid")
            return _Value(self.node("Mul", [x.name, s], hint), nchw_of_nhwc=x.nchw_of_nhwc)
        if op in _BINARY:
            return self.binary(_BINARY[op], args, call, hint)
        if op == "relax.matmul":
            a, b = (self.value(x, hint) for x in args)
            out = self.node("MatMul", [self.plain(a, f"{hint}_a"), self.plain(b, f"{hint}_b")], hint)
            return self.cast_to(out, call, hint)
        if op == "relax.permute_dims":
            x = self.value(args[0], hint)
            axes = call.attrs.axes
            if x.const is not None:  # weights: transposed here, so Bolt sees a constant
                return _Value(const=x.const.transpose(None if axes is None else [int(a) for a in axes]))
            kw = {} if axes is None else {"perm": [int(a) for a in axes]}
            return _Value(self.node("Transpose", [self.plain(x, hint)], hint, **kw))
        if op == "relax.reshape":
            x = self.value(args[0], hint)
            shape = [int(d) for d in _dims(call.ty, hint)] if all(
                isinstance(d, tirx.IntImm) for d in call.ty.shape.values
            ) else None
            if x.const is not None and shape is not None:
                return _Value(const=x.const.reshape(shape))
            if shape is None:
                raise UnsupportedRelax(f"'{hint}': reshape to a symbolic shape is not supported")
            s = self.constant(np.array(shape, dtype=np.int64), f"{hint}_shape")
            return _Value(self.node("Reshape", [self.plain(x, hint), s], hint))
        if op == "relax.astype":
            x = self.value(args[0], hint)
            to = onnx_dtype(call.attrs.dtype, hint)
            if x.const is not None:
                return _Value(const=x.const.astype(helper.tensor_dtype_to_np_dtype(to)))
            return _Value(self.node("Cast", [x.name], hint, to=to), nchw_of_nhwc=x.nchw_of_nhwc)
        if op == "relax.where":  # masked_fill: Where(mask, fill, scores) or Where(mask, scores, fill)
            c, x, y = (self.value(a, hint) for a in args)
            names = [self.plain(v, f"{hint}_{i}") for i, v in enumerate((c, x, y))]
            return _Value(self.node("Where", names, hint))
        if op == "relax.nn.softmax":
            x = self.value(args[0], hint)
            return _Value(self.node("Softmax", [self.plain(x, hint)], hint, axis=int(call.attrs.axis)))
        if op == "relax.nn.conv2d":
            return self.conv2d(call, args, hint)
        if op == "relax.nn.batch_norm":
            return self.batch_norm(call, args, hint)
        raise UnsupportedRelax(f"'{hint}': operator {op} is not supported by Bolt")

    def cast_to(self, out: str, call: relax.Call, hint: str, nchw: bool = False) -> _Value:
        """Matmul/conv with an out_dtype other than the inputs': the ONNX op, then a Cast."""
        want = call.ty.dtype
        src = call.args[0].ty.dtype
        if str(want) != str(src):
            out = self.node("Cast", [out], f"{hint}_cast", to=onnx_dtype(want, hint))
        return _Value(out, nchw_of_nhwc=nchw)

    def binary(self, kind: str, args: list, call: relax.Call, hint: str) -> _Value:
        a, b = (self.value(x, hint) for x in args)
        if a.const is not None and b.const is not None:
            raise UnsupportedRelax(f"'{hint}': {kind} of two constants (fold constants first)")
        if a.nchw_of_nhwc or b.nchw_of_nhwc:
            rank = len(call.ty.shape.values)
            names = [self.broadcast_nchw(v, rank, f"{hint}_{i}") for i, v in enumerate((a, b))]
            return _Value(self.node(kind, names, hint), nchw_of_nhwc=True)
        return _Value(self.node(kind, [self.plain(a, f"{hint}_a"), self.plain(b, f"{hint}_b")], hint))

    def broadcast_nchw(self, v: _Value, rank: int, hint: str) -> str:
        """Operand `v` of an elementwise op on NHWC data kept as NCHW."""
        if v.nchw_of_nhwc:
            return v.name
        if rank != 4:
            raise UnsupportedRelax(f"'{hint}': elementwise op of rank {rank} on NHWC data")
        if v.const is not None:
            c = v.const.reshape((1,) * (4 - v.const.ndim) + v.const.shape)
            return self.constant(c.transpose(_NCHW), hint)
        if v.sinfo is None or len(_dims(v.sinfo, hint)) != 4:
            raise UnsupportedRelax(f"'{hint}': broadcasting a non-constant tensor onto NHWC data")
        return self.nchw(v, hint)

    def conv2d(self, call: relax.Call, args: list, hint: str) -> _Value:
        at = call.attrs
        data_layout, kernel_layout, out_layout = str(at.data_layout), str(at.kernel_layout), str(at.out_layout)
        if data_layout not in ("NCHW", "NHWC") or out_layout not in ("NCHW", "NHWC"):
            raise UnsupportedRelax(f"'{hint}': conv2d layouts {data_layout}->{out_layout} (NCHW or NHWC only)")
        to_oihw = {"OIHW": None, "OHWI": [0, 3, 1, 2], "HWIO": [3, 2, 0, 1]}
        if kernel_layout not in to_oihw:
            raise UnsupportedRelax(f"'{hint}': conv2d kernel layout {kernel_layout} (OIHW, OHWI or HWIO only)")
        x, w = self.value(args[0], hint), self.value(args[1], hint)
        xin = self.nchw(x, f"{hint}_x") if data_layout == "NHWC" else self.plain(x, f"{hint}_x")
        perm = to_oihw[kernel_layout]
        if w.const is not None:
            win = self.constant(w.const if perm is None else w.const.transpose(perm), f"{hint}_w")
        else:
            win = self.plain(w, f"{hint}_w")
            if perm is not None:
                win = self.node("Transpose", [win], f"{hint}_w_oihw", layout=True, perm=perm)
        pad = [int(p) for p in at.padding]  # Relax: top, left, bottom, right == ONNX's order
        out = self.node(
            "Conv",
            [xin, win],
            hint,
            strides=[int(s) for s in at.strides],
            pads=pad,
            dilations=[int(d) for d in at.dilation],
            group=int(at.groups),
        )
        return self.cast_to(out, call, hint, nchw=out_layout == "NHWC")

    def batch_norm(self, call: relax.Call, args: list, hint: str):
        at = call.attrs
        if int(at.axis) != 1 or bool(at.training):
            raise UnsupportedRelax(f"'{hint}': batch_norm on axis {int(at.axis)} / in training mode")
        x = self.value(args[0], hint)
        params = []
        # scale=False / center=False switch gamma / beta off (ONNX's op always applies both):
        # ones / zeros of their shape take their place.
        off = {0: None if bool(at.scale) else 1.0, 1: None if bool(at.center) else 0.0}
        for i, a in enumerate(args[1:]):
            if off.get(i) is not None:
                dims = _dims(a.ty, hint)
                if not all(isinstance(d, int) for d in dims):
                    raise UnsupportedRelax(f"'{hint}': batch_norm without gamma or beta of symbolic size")
                neutral = np.full(dims, off[i], dtype=helper.tensor_dtype_to_np_dtype(onnx_dtype(a.ty.dtype, hint)))
                params.append(self.constant(neutral, f"{hint}_p{i}"))
                continue
            v = self.value(a, hint)
            params.append(self.plain(v, f"{hint}_p{i}"))
        gamma, beta, mean, var = params
        y = self.node(
            "BatchNormalization", [self.plain(x, f"{hint}_x"), gamma, beta, mean, var], hint, epsilon=float(at.epsilon)
        )
        return (_Value(y), None, None)  # the running mean/var outputs are not computed

    # -------------------------------------------------------------------------------- model
    def model(self, outputs: list[tuple[str, _Value, object]]) -> onnx.ModelProto:
        outs = []
        for hint, v, sinfo in outputs:
            if isinstance(v, tuple):
                raise UnsupportedRelax(f"{self.name}: output '{hint}' is a tuple")
            name = self.plain(v, hint)
            if name in (i.name for i in self.inputs) or any(name == o.name for o in outs):
                name = self.node("Identity", [name], f"{hint}_out")
            outs.append(helper.make_tensor_value_info(name, onnx_dtype(sinfo.dtype, hint), _dims(sinfo, hint)))
        graph = helper.make_graph(self.nodes, self.name, self.inputs, outs, self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="bolt_tvm")
        model.ir_version = 10
        return model


def function_to_onnx(func: relax.Function, name: str) -> onnx.ModelProto:
    """An offloaded function as an ONNX model: its params are the graph inputs and the fields
    of its result (a tensor or a tuple of tensors, as merged functions return) the graph
    outputs, in order; composite calls are inlined."""
    cv = Converter(name)
    for p in func.params:
        cv.add_input(p)
    result = cv.blocks(func.body)
    fields = list(result.fields) if isinstance(result, relax.Tuple) else [result]
    outs = []
    for i, f in enumerate(fields):
        if not isinstance(f.ty, relax.TensorType):
            raise UnsupportedRelax(f"{name}: result {i} is not a tensor ({f.ty})")
        outs.append((f"{name}_out{i}", cv.value(f, f"{name} result {i}"), f.ty))
    return cv.model(outs)


def output_count(func: relax.Function) -> int:
    """How many output tensors the function's destination-passing call gets."""
    ret = func.ret_ty
    return len(ret.fields) if isinstance(ret, relax.TupleType) else 1


def bindings_to_onnx(bindings: dict, output, name: str) -> tuple[onnx.ModelProto, Converter]:
    """A matched subgraph (var -> expr, in binding order) whose result is `output` as an
    ONNX model; free variables become inputs. Returns the converter too (its layout nodes)."""
    cv = Converter(name)
    for var, expr in _in_binding_order(bindings):
        cv.bind(var, expr)
    return cv.model([(output.name, cv.values[output], output.ty)]), cv


def _in_binding_order(bindings) -> list:
    """(var, expr) pairs with every var after the vars its expr reads (the check context's
    map carries no order)."""
    done, order = set(), []

    def visit(var):
        if var in done:
            return
        done.add(var)
        for a in getattr(bindings[var], "args", []):
            for x in a.fields if isinstance(a, relax.Tuple) else [a]:
                if isinstance(x, relax.Var) and x in bindings:
                    visit(x)
        tv = getattr(bindings[var], "tuple_value", None)
        if isinstance(tv, relax.Var) and tv in bindings:
            visit(tv)
        order.append((var, bindings[var]))

    for v in bindings:
        visit(v)
    return order
