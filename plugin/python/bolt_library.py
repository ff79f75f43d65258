"""Where Bolt's plugin library is: the one Rust library behind both hosts (bolt_ort for ONNX
Runtime, bolt_tvm for TVM)."""
from __future__ import annotations

import os
from pathlib import Path

_REPO = Path(__file__).resolve().parents[2]


def library_path(env_var: str = "BOLT_LIBRARY") -> Path:
    """`$env_var` if set, else target/release/libbolt_ort.so of this repository; raises
    FileNotFoundError naming where it looked."""
    env = os.environ.get(env_var)
    path = Path(env) if env else _REPO / "target" / "release" / "libbolt_ort.so"
    if not path.is_file():
        raise FileNotFoundError(
            f"Bolt library not found at {path} "
            f"({f'from {env_var}' if env else 'build it with: cargo build --release -p bolt-ort'})"
        )
    return path.resolve()
