"""ctypes binding of Bolt's framework-neutral C ABI (plugin/src/capi.rs) in the library the
ONNX Runtime provider also lives in."""
from __future__ import annotations

import ctypes
import json
from pathlib import Path

import bolt_plugin

_lib: ctypes.CDLL | None = None


class BoltError(RuntimeError):
    """A failure reported by Bolt's Rust core (the message names the entry point and reason)."""


def library_path() -> Path:
    """The Bolt library: BOLT_LIBRARY, else target/release/libbolt_plugin.so of this repository."""
    return bolt_plugin.library_path("BOLT_LIBRARY")


def lib() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        L = ctypes.CDLL(str(library_path()))
        L.bolt_last_error.restype = ctypes.c_char_p
        L.bolt_string_free.argtypes = [ctypes.c_void_p]
        L.bolt_partition_json.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]
        L.bolt_module_create.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
        L.bolt_module_report.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
        L.bolt_module_destroy.argtypes = [ctypes.c_void_p]
        L.bolt_artifact_build.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p,
                                          ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t)]
        L.bolt_bytes_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        _lib = L
    return _lib


def _check(rc: int) -> None:
    if rc != 0:
        raise BoltError(lib().bolt_last_error().decode("utf-8", "replace"))


def _take_string(p: ctypes.c_void_p) -> str:
    try:
        return ctypes.string_at(p.value).decode()
    finally:
        lib().bolt_string_free(p)


def partition(model_bytes: bytes) -> dict:
    """Bolt's claimable partitions of an ONNX model (as ONNX Runtime's GetCapability decides)."""
    out = ctypes.c_void_p()
    _check(lib().bolt_partition_json(model_bytes, len(model_bytes), ctypes.byref(out)))
    return json.loads(_take_string(out))


def plan_report(model_bytes: bytes, options: dict | None = None) -> dict:
    """Plans an ONNX model as the runtime will (bolt_module_create) and returns the plan report."""
    m = ctypes.c_void_p()
    _check(lib().bolt_module_create(model_bytes, len(model_bytes), json.dumps(options or {}).encode(), ctypes.byref(m)))
    try:
        out = ctypes.c_void_p()
        _check(lib().bolt_module_report(m, ctypes.byref(out)))
        return json.loads(_take_string(out))
    finally:
        lib().bolt_module_destroy(m)


def build_artifact(model_bytes: bytes, options: dict | None = None) -> bytes:
    """Compiles an ONNX model into a packed Bolt artifact (plan, weights and, for device=cuda,
    the kernel library for the `arch` option's archs) that bolt_module_load runs as is."""
    out, n = ctypes.c_void_p(), ctypes.c_size_t()
    _check(lib().bolt_artifact_build(model_bytes, len(model_bytes), json.dumps(options or {}).encode(),
                                     ctypes.byref(out), ctypes.byref(n)))
    try:
        return ctypes.string_at(out.value, n.value)
    finally:
        lib().bolt_bytes_free(out, n)
