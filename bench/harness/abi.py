"""ctypes mirror of codegen/include/bolt_kernel.h and loading of the package's libraries.

The kernel libraries link the CUDA runtime statically, so they load on a host without CUDA and
their `<symbol>_can_implement` (host-side CUTLASS checks) answers without a GPU.
"""

import ctypes
import pathlib

c_i32, c_i64, c_f32, c_ptr = ctypes.c_int32, ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
MAX_LAYERS = 4  # BOLT_B2B_MAX_LAYERS

STATUS = {0: "ok", 1: "null argument", 2: "misaligned operand", 3: "unsupported problem",
          4: "workspace too small", 5: "CUTLASS internal error", 6: "launch failed", 7: "unknown",
          8: "invalid params"}
PARAMS_ALIGNMENT = 128  # BOLT_PARAMS_ALIGNMENT

GEMM_FIELDS = ["m", "n", "k", "batch", "lda", "ldb", "ldc", "ldd",
               "batch_stride_a", "batch_stride_b", "batch_stride_c", "batch_stride_d"]
CONV_FIELDS = ["n", "h", "w", "c", "k", "r", "s", "p", "q", "pad_h", "pad_w", "stride_h", "stride_w",
               "dilation_h", "dilation_w", "groups"]


class BoltGemmProblem(ctypes.Structure):
    _fields_ = [(f, c_i64) for f in GEMM_FIELDS]


class BoltConv2dProblem(ctypes.Structure):
    _fields_ = [(f, c_i32) for f in CONV_FIELDS]


class BoltArgs(ctypes.Structure):
    _fields_ = [("a", c_ptr), ("b", c_ptr), ("c", c_ptr), ("bias", c_ptr), ("d", c_ptr),
                ("alpha", c_f32), ("beta", c_f32)]


class BoltB2bGemmProblem(ctypes.Structure):
    _fields_ = [("layers", c_i64), ("m", c_i64), ("k", c_i64), ("n", c_i64 * MAX_LAYERS),
                ("lda", c_i64), ("ldc", c_i64), ("ldd", c_i64)]


class BoltB2bConv2dProblem(ctypes.Structure):
    _fields_ = [("layers", c_i64), ("conv", BoltConv2dProblem * MAX_LAYERS)]


class BoltB2bLayerArgs(ctypes.Structure):
    _fields_ = [("b", c_ptr), ("bias", c_ptr), ("alpha", c_f32), ("beta", c_f32)]


class BoltB2bArgs(ctypes.Structure):
    _fields_ = [("a", c_ptr), ("c", c_ptr), ("d", c_ptr), ("layer", BoltB2bLayerArgs * MAX_LAYERS)]


ATTENTION_FIELDS = ["batch", "heads", "seq_q", "seq_k", "head_dim", "head_dim_v"]


class BoltAttentionProblem(ctypes.Structure):
    _fields_ = ([(f, c_i64) for f in ATTENTION_FIELDS]
                + [(f, c_i64 * 3) for f in ("q_strides", "k_strides", "v_strides", "bias_strides")]
                + [("scale", ctypes.c_double)])


class BoltAttentionArgs(ctypes.Structure):
    _fields_ = [("q", c_ptr), ("k", c_ptr), ("v", c_ptr), ("bias", c_ptr), ("o", c_ptr)]


def make_problem(p):
    """The C struct of a package.json problem (`kind`: gemm, conv2d, b2b_gemm, b2b_conv2d,
    attention)."""
    kind = p.get("kind")
    if kind == "attention":
        s = BoltAttentionProblem(scale=p["scale"], **{f: p[f] for f in ATTENTION_FIELDS})
        for f in ("q_strides", "k_strides", "v_strides", "bias_strides"):
            getattr(s, f)[:] = p[f]
        return s
    if kind == "gemm":
        return BoltGemmProblem(**{f: p[f] for f in GEMM_FIELDS})
    if kind == "conv2d":
        return BoltConv2dProblem(**{f: p[f] for f in CONV_FIELDS})
    if kind == "b2b_gemm":
        s = BoltB2bGemmProblem(layers=p["layers"], m=p["m"], k=p["k"], lda=p["lda"], ldc=p["ldc"], ldd=p["ldd"])
        for i, n in enumerate(p["n"][:MAX_LAYERS]):
            s.n[i] = n
        return s
    if kind == "b2b_conv2d":
        s = BoltB2bConv2dProblem(layers=p["layers"])
        for i, c in enumerate(p["conv"]):
            s.conv[i] = BoltConv2dProblem(**{f: c[f] for f in CONV_FIELDS})
        return s
    raise ValueError(f"unknown problem kind {kind!r} in {p}")


class Libraries:
    """The package's kernel libraries, opened on first use, by path relative to the package."""

    def __init__(self, root):
        self.root = pathlib.Path(root)
        self._libs = {}

    def lib(self, relpath):
        if relpath not in self._libs:
            path = self.root / relpath
            if not path.is_file():
                raise FileNotFoundError(f"{path}: kernel library missing from the package (re-run bench/package.sh)")
            self._libs[relpath] = ctypes.CDLL(str(path))
        return self._libs[relpath]

    def function(self, kernel, name, argtypes):
        f = getattr(self.lib(kernel["library"]), f"{kernel['symbol']}_{name}")
        f.restype = ctypes.c_size_t if name in ("workspace_size", "params_size") else ctypes.c_int
        f.argtypes = argtypes
        return f

    def can_implement(self, kernel, problem):
        """BoltStatus of `<symbol>_can_implement(problem)`: host code, no GPU needed."""
        f = self.function(kernel, "can_implement", [c_ptr])
        return f(ctypes.byref(make_problem(problem)))

    def workspace_size(self, kernel, problem):
        f = self.function(kernel, "workspace_size", [c_ptr])
        return f(ctypes.byref(make_problem(problem)))

    def runner(self, kernel, problem, args, workspace, workspace_bytes, stream):
        """A no-argument callable launching the kernel; raises on a non-zero status. The
        kernel's params are built once here (`<symbol>_initialize`); the callable only launches."""
        kind = problem["kind"]
        arg_t = BoltB2bArgs if kind.startswith("b2b") else BoltAttentionArgs if kind == "attention" else BoltArgs
        size = self.function(kernel, "params_size", [])()
        initialize = self.function(kernel, "initialize", [c_ptr, ctypes.POINTER(arg_t), c_ptr, ctypes.c_size_t,
                                                          c_ptr, ctypes.c_size_t, c_ptr])
        launch = self.function(kernel, "launch", [c_ptr, c_ptr])
        prob = make_problem(problem)
        ws = c_ptr(workspace) if workspace else None
        st = c_ptr(stream)
        sym = kernel["symbol"]
        raw = ctypes.create_string_buffer(size + PARAMS_ALIGNMENT)
        params = c_ptr((ctypes.addressof(raw) + PARAMS_ALIGNMENT - 1) // PARAMS_ALIGNMENT * PARAMS_ALIGNMENT)
        status = initialize(ctypes.byref(prob), ctypes.byref(args), ws, workspace_bytes, params, size, st)
        if status != 0:
            raise RuntimeError(f"{sym}_initialize returned {status} ({STATUS.get(status, '?')})")

        def run():
            status = launch(params, st)
            if status != 0:
                raise RuntimeError(f"{sym}_launch returned {status} ({STATUS.get(status, '?')})")
        run._params = raw  # the params buffer must outlive the callable
        return run
