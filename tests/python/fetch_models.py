#!/usr/bin/env python3
"""Fetch real, trained models that nobody here wrote, and make reference cases for them.

  ppocrv4_det/  PP-OCRv4 text detector (PaddleOCR, converted to ONNX by paddle2onnx),
                shipped inside the PyPI wheel rapidocr-onnxruntime==1.4.4.

The wheel comes through pip (the only registry reachable here) and is checked against
a pinned sha256 before anything is extracted. Reference outputs come from onnxruntime
CPU, in the ONNX backend-test layout (see refcase.py).
"""
import argparse
import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from refcase import fresh_dir, is_fresh, write_case

WHEEL = "rapidocr-onnxruntime==1.4.4"
# From https://pypi.org/simple/rapidocr-onnxruntime/ (#sha256= of the py3-none-any wheel).
WHEEL_SHA256 = "971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf"
DET_MEMBER = "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx"


def download_wheel(tmp: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "-d", str(tmp), WHEEL], check=True)
    (whl,) = tmp.glob("*.whl")
    digest = hashlib.sha256(whl.read_bytes()).hexdigest()
    if digest != WHEEL_SHA256:
        sys.exit(f"{whl.name}: sha256 {digest} != pinned {WHEEL_SHA256}")
    return whl


def ppocr_image(rng, h: int, w: int) -> np.ndarray:
    """A deterministic page-like image: light paper, dark horizontal 'text lines' of
    random length, pixel noise. Normalised like PP-OCR's DetPreProcess:
    (pixel/255 - 0.5) / 0.5 per channel, HWC -> NCHW. H, W must be multiples of 32."""
    img = 0.85 + 0.1 * rng.random((h, w, 3), dtype=np.float32)
    for _ in range(h // 24):
        y, x = rng.integers(0, h - 12), rng.integers(0, w // 2)
        img[y:y + rng.integers(6, 12), x:x + rng.integers(w // 8, w // 2)] *= 0.2
    return ((img - 0.5) / 0.5).transpose(2, 0, 1)[None].astype(np.float32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args()

    out = args.out.resolve() / "ppocrv4_det"
    script = hashlib.sha256(Path(__file__).read_bytes() + (Path(__file__).parent / "refcase.py").read_bytes())
    stamp = f"script={script.hexdigest()[:16]} wheel={WHEEL_SHA256[:16]} ort={ort.__version__}"
    if not args.force and is_fresh(out, stamp):
        print("ppocrv4_det: up to date")
        return
    print(f"ppocrv4_det: downloading {WHEEL}")
    fresh_dir(out)
    with tempfile.TemporaryDirectory() as tmp:
        whl = download_wheel(Path(tmp))
        with zipfile.ZipFile(whl) as z:
            (out / "model.onnx").write_bytes(z.read(DET_MEMBER))
    model = onnx.load(out / "model.onnx")
    onnx.checker.check_model(model)
    (inp,) = model.graph.input  # "x": [N, 3, H, W], all but channels dynamic
    rng = np.random.default_rng(4)
    datasets = [{inp.name: ppocr_image(rng, 320, 320)},   # square, like a cropped page
                {inp.name: ppocr_image(rng, 256, 384)}]   # non-square: exercises shape handling
    meta = {"source": f"PyPI wheel {WHEEL}, member {DET_MEMBER}", "wheel_sha256": WHEEL_SHA256,
            "model_sha256": hashlib.sha256((out / "model.onnx").read_bytes()).hexdigest(),
            "opset": next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
            "ops": sorted({n.op_type for n in model.graph.node}),
            "preprocess": "(pixel/255 - 0.5) / 0.5, HWC->NCHW, H and W multiples of 32"}
    write_case(out, out / "model.onnx", datasets, meta, stamp)


if __name__ == "__main__":
    main()
