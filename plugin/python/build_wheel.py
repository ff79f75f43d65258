"""Builds the `bolt-plugin` wheel from the built library (offline, standard library only).

    cargo build --release -p bolt-plugin
    python plugin/python/build_wheel.py [--lib target/release/libbolt_plugin.so] [--out target/wheels]
    pip install target/wheels/bolt_plugin-*.whl

The wheel carries the library inside the `bolt_plugin` package (with `get_library_path()` and
`get_ep_name()`, after ONNX Runtime's plugin-EP packaging guidance) and the host helpers
`bolt_ort` and `bolt_tvm`. It declares no dependency: onnxruntime (or TVM) is the user's own,
any version with the plugin EP API (>= 1.23). A wheel is a zip with a dist-info folder
(PEP 427), small enough to write here rather than pull in a build backend.
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
import bolt_plugin  # noqa: E402

NAME, DIST = "bolt-plugin", "bolt_plugin"
PACKAGES = ["bolt_plugin", "bolt_ort", "bolt_tvm"]


def platform_tag() -> str:
    return sysconfig.get_platform().replace("-", "_").replace(".", "_")


def record_line(arcname: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def build(lib: Path, out: Path) -> Path:
    if not lib.is_file():
        raise SystemExit(f"{lib}: no such library (cargo build --release -p bolt-plugin)")
    version = bolt_plugin.__version__
    tag = f"py3-none-{platform_tag()}"
    files: dict[str, bytes] = {}
    for pkg in PACKAGES:
        for f in sorted((HERE / pkg).rglob("*.py")):
            files[f.relative_to(HERE).as_posix()] = f.read_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        # The debug line tables are most of the library's size; strip them when strip exists.
        stripped = Path(tmp) / bolt_plugin.LIBRARY_NAME
        if shutil.which("strip") and subprocess.run(["strip", "-o", str(stripped), str(lib)]).returncode == 0:
            files[f"bolt_plugin/{bolt_plugin.LIBRARY_NAME}"] = stripped.read_bytes()
        else:
            files[f"bolt_plugin/{bolt_plugin.LIBRARY_NAME}"] = lib.read_bytes()
    info = f"{DIST}-{version}.dist-info"
    files[f"{info}/METADATA"] = (
        "Metadata-Version: 2.1\n"
        f"Name: {NAME}\n"
        f"Version: {version}\n"
        "Summary: Bolt: CUTLASS kernels for ONNX Runtime (plugin execution provider) and TVM (BYOC)\n"
        "License: Apache-2.0\n"
        "Requires-Python: >=3.9\n"
    ).encode()
    files[f"{info}/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: bolt build_wheel.py\nRoot-Is-Purelib: false\n" f"Tag: {tag}\n"
    ).encode()
    files[f"{info}/top_level.txt"] = "\n".join(PACKAGES).encode() + b"\n"
    record = [record_line(n, d) for n, d in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    out.mkdir(parents=True, exist_ok=True)
    wheel = out / f"{DIST}-{version}-{tag}.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            zi = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            zi.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    return wheel


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", type=Path, default=REPO / "target" / "release" / bolt_plugin.LIBRARY_NAME)
    ap.add_argument("--out", type=Path, default=REPO / "target" / "wheels")
    a = ap.parse_args()
    print(build(a.lib, a.out))


if __name__ == "__main__":
    main()
