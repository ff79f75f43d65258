"""Bolt's ONNX Runtime plugin execution provider, from Python.

    import bolt_ort
    sess = bolt_ort.session("model.onnx")          # Bolt partitions + ORT CPU for the rest
    outputs = sess.run(None, {"input": x})

The library is found through BOLT_LIBRARY, else target/release/libbolt_plugin.so of the
repository this package sits in (built by `cargo build --release -p bolt-plugin`).
"""
from __future__ import annotations

from pathlib import Path

import onnxruntime as ort

import bolt_plugin

EP_NAME = bolt_plugin.EP_NAME
REGISTRATION_NAME = "bolt"

_registered: str | None = None


def library_path() -> Path:
    """The built plugin library (BOLT_LIBRARY, else this repository's release build)."""
    return bolt_plugin.library_path("BOLT_LIBRARY")


def register(name: str = REGISTRATION_NAME) -> str:
    """Registers the library with ONNX Runtime once per process; returns the registration name."""
    global _registered
    if _registered is None:
        ort.register_execution_provider_library(name, str(library_path()))
        _registered = name
    return _registered


def unregister() -> None:
    """Unregisters the library (sessions using it must be gone)."""
    global _registered
    if _registered is not None:
        ort.unregister_execution_provider_library(_registered)
        _registered = None


def devices(kind: str | None = None) -> list:
    """Bolt's OrtEpDevices: one `cuda` device per NVIDIA GPU CUDA can open, and the CPU
    `reference` device (the host_gpu test device instead when BOLT_ORT_TEST_DEVICE=host_gpu was
    set before registration); with `kind`, only those whose EP option `device` is `kind`."""
    register()
    devs = [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]
    return [d for d in devs if kind is None or d.ep_options.get("device") == kind]


def session_options(options: dict[str, str] | None = None, so: ort.SessionOptions | None = None) -> ort.SessionOptions:
    """SessionOptions with Bolt added for one of its devices: the one EP option `device` (and
    `device_id`) names, else a GPU when there is one, else the CPU reference device."""
    so = so or ort.SessionOptions()
    options = {k: str(v) for k, v in (options or {}).items()}
    kind = options.get("device")
    if kind in ("cuda", "gpu") or (kind is None and devices("cuda")):
        gpus = [d for d in devices("cuda") if d.ep_options.get("device_id") == options.get("device_id", d.ep_options.get("device_id"))]
        # No such GPU: Bolt's CPU device with these options makes session creation fail
        # with Bolt's reason (no driver, no NVIDIA GPU, no such ordinal).
        devs = gpus[:1] or [d for d in devices() if d.ep_options.get("device") != "cuda"][:1]
        if gpus and kind is None:
            options["device"] = "cuda"
    else:
        devs = [d for d in devices() if d.ep_options.get("device") != "cuda"][:1]
    if not devs:
        raise RuntimeError(f"{EP_NAME} offers no device on this machine")
    so.add_provider_for_devices(devs, options)
    return so


def session(model, options: dict[str, str] | None = None, so: ort.SessionOptions | None = None) -> ort.InferenceSession:
    """An InferenceSession on `model` (path or bytes) with Bolt first and ORT's CPU provider for the rest."""
    so = session_options(options, so)
    # No silent fallback to CPU-only: a Bolt error (bad option, failed compile) raises.
    return ort.InferenceSession(str(model) if isinstance(model, Path) else model, sess_options=so, enable_fallback=0)
