"""Bolt's one native library, behind both hosts: the ONNX Runtime plugin execution provider
(`bolt_ort`) and TVM's BYOC codegen (`bolt_tvm`).

    import onnxruntime as ort, bolt_plugin
    ort.register_execution_provider_library("bolt", bolt_plugin.get_library_path())
    devices = [d for d in ort.get_ep_devices() if d.ep_name == bolt_plugin.get_ep_name()]

Following ONNX Runtime's plugin-EP packaging guidance, this package carries the library and
says where it is and what its EP is called; it does not depend on onnxruntime.
"""
from __future__ import annotations

import os
from pathlib import Path

__version__ = "0.1.0"

EP_NAME = "BoltExecutionProvider"
LIBRARY_NAME = "libbolt_plugin.so"

_HERE = Path(__file__).resolve().parent
# In a source checkout this file is plugin/python/bolt_plugin/__init__.py.
_REPO = _HERE.parents[2]


def get_ep_name() -> str:
    """The name of the execution provider the library registers."""
    return EP_NAME


def get_ep_names() -> list[str]:
    return [EP_NAME]


def get_library_path(env_var: str = "BOLT_LIBRARY") -> str:
    """The library: `$env_var` if set, else the copy installed with this package (the wheel),
    else target/release/libbolt_plugin.so of the source checkout. Raises FileNotFoundError
    naming where it looked."""
    env = os.environ.get(env_var)
    if env:
        candidates = [Path(env)]
    else:
        candidates = [_HERE / LIBRARY_NAME, _REPO / "target" / "release" / LIBRARY_NAME]
    for path in candidates:
        if path.is_file():
            return str(path.resolve())
    how = f"from {env_var}" if env else "build it with: cargo build --release -p bolt-plugin, or install the wheel"
    raise FileNotFoundError(f"Bolt library not found at {' or '.join(map(str, candidates))} ({how})")


def library_path(env_var: str = "BOLT_LIBRARY") -> Path:
    """[`get_library_path`] as a Path."""
    return Path(get_library_path(env_var))
