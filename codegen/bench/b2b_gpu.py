#!/usr/bin/env python3
"""Runs Bolt's back-to-back chain kernels on a GPU: numerics against a layer-by-layer
reference (each intermediate rounded to f16, as Bolt's reference executor does) and fused vs
unfused timings, for every two-layer chain of ../shared/workloads/b2b.json.

Build the kernels (on a machine with Rust and the pinned nvcc; no GPU needed):

    cargo run --release -p bolt-codegen --example b2b_workloads -- /work/shared/workloads/b2b.json target/b2b_workloads

then on the GPU machine (PyTorch, no Rust; the library links the CUDA runtime statically):

    python3 codegen/bench/b2b_gpu.py target/b2b_workloads --out bench/results/b2b.json

`--dry-run` only asks each kernel's can_implement (host code: no GPU, no PyTorch).
The unfused baseline is PyTorch's own layers (cuBLAS / cuDNN, f16, bias + ReLU each), a stand-in
for "the best unfused pair of tuned kernels".
"""

import argparse
import ctypes
import json
import pathlib
import sys

MAX_LAYERS = 4
c_i32, c_i64, c_f32, c_ptr = ctypes.c_int32, ctypes.c_int64, ctypes.c_float, ctypes.c_void_p


class BoltB2bGemmProblem(ctypes.Structure):
    _fields_ = [("layers", c_i64), ("m", c_i64), ("k", c_i64), ("n", c_i64 * MAX_LAYERS),
                ("lda", c_i64), ("ldc", c_i64), ("ldd", c_i64)]


CONV_FIELDS = ["n", "h", "w", "c", "k", "r", "s", "p", "q", "pad_h", "pad_w", "stride_h", "stride_w",
               "dilation_h", "dilation_w", "groups"]


class BoltConv2dProblem(ctypes.Structure):
    _fields_ = [(f, c_i32) for f in CONV_FIELDS]


class BoltB2bConv2dProblem(ctypes.Structure):
    _fields_ = [("layers", c_i64), ("conv", BoltConv2dProblem * MAX_LAYERS)]


class BoltB2bLayerArgs(ctypes.Structure):
    _fields_ = [("b", c_ptr), ("bias", c_ptr), ("alpha", c_f32), ("beta", c_f32)]


class BoltB2bArgs(ctypes.Structure):
    _fields_ = [("a", c_ptr), ("c", c_ptr), ("d", c_ptr), ("layer", BoltB2bLayerArgs * MAX_LAYERS)]


def make_problem(p):
    if p["kind"] == "gemm":
        s = BoltB2bGemmProblem(layers=p["layers"], m=p["m"], k=p["k"], lda=p["lda"], ldc=p["ldc"], ldd=p["ldd"])
        for i, n in enumerate(p["n"]):
            s.n[i] = n
        return s
    s = BoltB2bConv2dProblem(layers=p["layers"])
    for i, values in enumerate(p["conv"]):
        s.conv[i] = BoltConv2dProblem(*values)
    return s


def conv_dict(values):
    return dict(zip(CONV_FIELDS, values))


def run_chain(lib, chain, iters):
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    dev = torch.device("cuda")
    h = torch.float16
    sym = chain["symbol"]
    params_size = getattr(lib, sym + "_params_size")
    params_size.restype, params_size.argtypes = ctypes.c_size_t, []
    initialize = getattr(lib, sym + "_initialize")
    initialize.restype = ctypes.c_int
    initialize.argtypes = [c_ptr, ctypes.POINTER(BoltB2bArgs), c_ptr, ctypes.c_size_t, c_ptr, ctypes.c_size_t, c_ptr]
    launch = getattr(lib, sym + "_launch")
    launch.restype, launch.argtypes = ctypes.c_int, [c_ptr, c_ptr]
    padded, original = chain["problem"], chain["original_problem"]
    prob = make_problem(padded)

    def uniform(*shape, scale=1.0):
        return ((torch.rand(*shape, device=dev) * 2 - 1) * scale).to(h)

    if padded["kind"] == "gemm":
        m, k, (n0, n1) = padded["m"], padded["k"], padded["n"][:2]
        on0 = original["n"][0]
        a = uniform(m, k)
        # Weights as [N, K] (column-major K x N); layer 0's padded columns and their bias are 0,
        # and so are layer 1's weights reading them.
        w0 = torch.zeros(n0, k, device=dev, dtype=h)
        w0[:on0] = uniform(on0, k, scale=k ** -0.5)
        b0 = torch.zeros(n0, device=dev, dtype=h)
        b0[:on0] = uniform(on0, scale=0.5)
        w1 = torch.zeros(n1, n0, device=dev, dtype=h)
        w1[:, :on0] = uniform(n1, on0, scale=on0 ** -0.5)
        b1 = uniform(n1, scale=0.5)
        d = torch.empty(m, n1, device=dev, dtype=h)

        def reference():
            x = torch.relu(a.float() @ w0[:on0].float().t() + b0[:on0].float()).to(h)
            return torch.relu(x.float() @ w1[:, :on0].float().t() + b1.float()).to(h)

        def unfused():
            return F.relu(F.linear(F.relu(F.linear(a, w0[:on0], b0[:on0])), w1[:, :on0], b1))

        flops = 2 * m * (on0 * k + n1 * on0)
    else:
        c0, c1 = conv_dict(padded["conv"][0]), conv_dict(padded["conv"][1])
        oc0 = conv_dict(original["conv"][0])
        n, hh, ww, c, k0, k1 = c0["n"], c0["h"], c0["w"], c0["c"], c0["k"], c1["k"]
        oc, ok0 = oc0["c"], oc0["k"]
        a = torch.zeros(n, hh, ww, c, device=dev, dtype=h)
        a[..., :oc] = uniform(n, hh, ww, oc)
        w0 = torch.zeros(k0, c0["r"], c0["s"], c, device=dev, dtype=h)
        w0[:ok0, :, :, :oc] = uniform(ok0, c0["r"], c0["s"], oc, scale=(oc * c0["r"] * c0["s"]) ** -0.5)
        b0 = torch.zeros(k0, device=dev, dtype=h)
        b0[:ok0] = uniform(ok0, scale=0.5)
        w1 = torch.zeros(k1, 1, 1, k0, device=dev, dtype=h)
        w1[..., :ok0] = uniform(k1, 1, 1, ok0, scale=ok0 ** -0.5)
        b1 = uniform(k1, scale=0.5)
        d = torch.empty(n, c1["p"], c1["q"], k1, device=dev, dtype=h)
        stride, pad = (c0["stride_h"], c0["stride_w"]), (c0["pad_h"], c0["pad_w"])
        a_nchw = a[..., :oc].permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)
        w0_nchw = w0[:ok0, :, :, :oc].permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)
        w1_nchw = w1[..., :ok0].permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)

        def reference():
            x = torch.relu(F.conv2d(a_nchw.float(), w0_nchw.float(), b0[:ok0].float(), stride, pad)).to(h)
            y = torch.relu(F.conv2d(x.float(), w1_nchw.float(), b1.float()))
            return y.to(h).permute(0, 2, 3, 1)

        def unfused():
            x = F.relu(F.conv2d(a_nchw, w0_nchw, b0[:ok0], stride, pad))
            return F.relu(F.conv2d(x, w1_nchw, b1)).permute(0, 2, 3, 1)

        flops = 2 * n * c0["p"] * c0["q"] * (ok0 * oc * c0["r"] * c0["s"] + k1 * ok0)

    args = BoltB2bArgs(a=a.data_ptr(), c=None, d=d.data_ptr())
    args.layer[0] = BoltB2bLayerArgs(w0.data_ptr(), b0.data_ptr(), 1.0, 0.0)
    args.layer[1] = BoltB2bLayerArgs(w1.data_ptr(), b1.data_ptr(), 1.0, 0.0)
    stream = torch.cuda.current_stream().cuda_stream

    # Params built once (BOLT_PARAMS_ALIGNMENT = 128), then only launches.
    size = params_size()
    raw = ctypes.create_string_buffer(size + 128)
    params = c_ptr((ctypes.addressof(raw) + 127) // 128 * 128)
    status = initialize(ctypes.byref(prob), ctypes.byref(args), None, 0, params, size, c_ptr(stream))
    if status != 0:
        raise RuntimeError(f"{sym}_initialize returned status {status}")

    def fused():
        status = launch(params, c_ptr(stream))
        if status != 0:
            raise RuntimeError(f"{sym}_launch returned status {status}")

    fused()
    torch.cuda.synchronize()
    want = reference()
    err = (d.float() - want.float()).abs()
    tol = 2e-2 + 2e-2 * want.float().abs()
    ok = bool((err <= tol).all().item())

    def time(fn):
        for _ in range(3):
            fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / iters * 1e3  # microseconds

    torch.backends.cudnn.benchmark = True
    t_fused, t_unfused = time(fused), time(unfused)
    return {
        "name": chain["name"], "symbol": sym, "residency": chain["residency"], "numerics_ok": ok,
        "max_abs_err": err.max().item(), "fused_us": t_fused, "unfused_torch_us": t_unfused,
        "speedup": t_unfused / t_fused, "fused_tflops": flops / t_fused / 1e6,
        "paper_speedup": chain["workload"].get("paper_speedup"),
        "padded_input_channels": chain["padded_input_channels"],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", type=pathlib.Path, help="output directory of the b2b_workloads example")
    ap.add_argument("--dry-run", action="store_true", help="only call can_implement (no GPU)")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--out", type=pathlib.Path, help="write the results as JSON here")
    opts = ap.parse_args()
    index = json.loads((opts.dir / "workloads.json").read_text())
    lib = ctypes.CDLL(str(opts.dir / index["library"]))
    failures, results = 0, []
    for chain in index["chains"]:
        can = getattr(lib, chain["symbol"] + "_can_implement")
        can.restype, can.argtypes = ctypes.c_int, [c_ptr]
        status = can(ctypes.byref(make_problem(chain["problem"])))
        if status != 0:
            failures += 1
            print(f"{chain['name']}: can_implement returned {status}", file=sys.stderr)
            continue
        if opts.dry_run:
            print(f"{chain['name']}: {chain['symbol']} can_implement ok")
            continue
        r = run_chain(lib, chain, opts.iters)
        failures += not r["numerics_ok"]
        results.append(r)
        print(f"{r['name']:20s} {r['residency']:13s} numerics {'ok' if r['numerics_ok'] else 'FAIL'} "
              f"(max err {r['max_abs_err']:.3g}) fused {r['fused_us']:.1f} us, unfused {r['unfused_torch_us']:.1f} us "
              f"-> {r['speedup']:.2f}x (paper {r['paper_speedup']})")
    if results:
        import math
        import torch
        geo = math.exp(sum(math.log(r["speedup"]) for r in results) / len(results))
        print(f"geomean speedup vs torch unfused: {geo:.2f}x")
        if opts.out:
            opts.out.parent.mkdir(parents=True, exist_ok=True)
            opts.out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "geomean_speedup": geo,
                                            "chains": results}, indent=2) + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
