"""Runs Bolt's plugin EP on its test-only host-backed GPU-memory device and prints what happened
as JSON (tests/python/test_ort_plugin.py checks it). A separate process because the device is
offered only when BOLT_ORT_TEST_DEVICE=host_gpu is set before the library is registered.

Usage: BOLT_ORT_TEST_DEVICE=host_gpu python ort_host_gpu_child.py MODEL.onnx
"""
import ctypes
import json
import sys
import threading
from pathlib import Path

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugin" / "python"))
import bolt_ort  # noqa: E402

STATS = ["copies_queued", "copies_now", "computes_queued", "activations", "device_waits"]


def stats():
    lib = ctypes.CDLL(str(bolt_ort.library_path()))  # the library ORT loaded: same counters
    out = (ctypes.c_uint64 * len(STATS))()
    lib.bolt_ort_test_device_stats(out, len(STATS))
    return dict(zip(STATS, map(int, out)))


def max_err(a, b):
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))))


def main(model):
    r = {}
    devs = bolt_ort.devices()
    r["devices"] = [{"options": dict(d.ep_options), "metadata": dict(d.ep_metadata)} for d in devs]
    (dev,) = devs
    mi = dev.memory_info(ort.OrtDeviceMemoryType.DEFAULT)
    r["memory_info"] = {
        "name": mi.name,
        "vendor_id": mi.device_vendor_id,
        "allocator_type": str(mi.allocator_type),
        "mem_type": str(mi.device_mem_type),
    }

    # Bolt's data transfer through ORT's copy API: host -> device -> device -> host, without a
    # stream (synchronous) and on a stream (queued; done once the stream is released).
    x = np.random.default_rng(1).standard_normal((3, 5)).astype(np.float32)
    d1 = ort.OrtValue.ortvalue_from_shape_and_type(x.shape, np.float32, memory_info=mi)
    d2 = ort.OrtValue.ortvalue_from_shape_and_type(x.shape, np.float32, memory_info=mi)
    back = ort.OrtValue.ortvalue_from_numpy(np.zeros_like(x))
    before = stats()
    ort.copy_tensors([ort.OrtValue.ortvalue_from_numpy(x)], [d1], None)
    ort.copy_tensors([d1], [d2], None)
    ort.copy_tensors([d2], [back], None)
    r["copy_sync_equal"] = bool(np.array_equal(back.numpy(), x))
    stream = dev.create_sync_stream()
    back2 = ort.OrtValue.ortvalue_from_numpy(np.zeros_like(x))
    d3 = ort.OrtValue.ortvalue_from_shape_and_type(x.shape, np.float32, memory_info=mi)
    ort.copy_tensors([d2], [d3], stream)
    ort.copy_tensors([d3], [back2], stream)
    del stream  # releasing the stream runs what it still holds
    r["copy_stream_equal"] = bool(np.array_equal(back2.numpy(), x))
    after = stats()
    r["copy_stats"] = {k: after[k] - before[k] for k in STATS}

    # A session: ORT copies the CPU input to Bolt's memory and the result back, Compute runs
    # queued on ORT's compute stream, and CPU nodes wait on notifications.
    inp = "input"
    xs = [np.random.default_rng(i).standard_normal((2, 3, 32, 32)).astype(np.float32) for i in range(4)]
    cpu = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    want = [cpu.run(None, {inp: v})[0] for v in xs]
    so = ort.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    sess = bolt_ort.session(model, so=so)
    r["assigned"] = sorted(
        n.op_type for s in sess.get_provider_graph_assignment_info() if s.ep_name == bolt_ort.EP_NAME for n in s.get_nodes()
    )
    before = stats()
    r["run_err"] = max(max_err(sess.run(None, {inp: v})[0], w) for v, w in zip(xs, want))
    r["run_stats"] = {k: v - before[k] for k, v in stats().items()}

    # IOBinding: input and output both in Bolt's memory.
    out_name = sess.get_outputs()[0].name
    dx = ort.OrtValue.ortvalue_from_shape_and_type(xs[0].shape, np.float32, memory_info=mi)
    ort.copy_tensors([ort.OrtValue.ortvalue_from_numpy(xs[0])], [dx], None)
    dy = ort.OrtValue.ortvalue_from_shape_and_type(want[0].shape, np.float32, memory_info=mi)
    io = sess.io_binding()
    io.bind_ortvalue_input(inp, dx)
    io.bind_ortvalue_output(out_name, dy)
    sess.run_with_iobinding(io)
    io.synchronize_outputs()
    y = ort.OrtValue.ortvalue_from_numpy(np.zeros_like(want[0]))
    ort.copy_tensors([dy], [y], None)
    r["iobinding_err"] = max_err(y.numpy(), want[0])
    r["iobinding_output_device"] = io.get_outputs()[0].device_name()

    # Concurrent Run from threads, each its own input.
    errs = [None] * 8

    def worker(i):
        try:
            errs[i] = max_err(sess.run(None, {inp: xs[i % 4]})[0], want[i % 4])
        except Exception as e:  # reported, not swallowed
            errs[i] = f"{type(e).__name__}: {e}"

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    r["threads"] = errs

    # A session asking for a device that does not exist fails clearly; the next one works.
    try:
        bolt_ort.session(model, {"device_id": "2"})
        r["bad_device_id"] = "no error"
    except Exception as e:
        r["bad_device_id"] = str(e)
    r["after_error_err"] = max_err(bolt_ort.session(model).run(None, {inp: xs[0]})[0], want[0])
    print(json.dumps(r))


if __name__ == "__main__":
    main(sys.argv[1])
