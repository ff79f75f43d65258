"""Renders result files into one Markdown summary and a roofline-style SVG per run (stdlib only:
a tiny SVG writer, so no matplotlib is needed).

    python3 -m harness.render RESULTS_DIR [--out DIR]

Writes DIR/summary.md (every suite table, newest run first) and DIR/<date>-<gpu>-roofline.svg
per (date, gpu) with gemm/conv results: achieved TFLOP/s against arithmetic intensity
(FLOPs / minimum DRAM bytes) for Bolt, PyTorch and torch.compile, under the device's roofs.
Dry-run files get a roofline with no points and say so: there are no GPU numbers to plot.
"""

import argparse
import json
import math
import pathlib
import sys
from xml.sax.saxutils import escape

from .common import DRAM_TBPS, PEAK_F16_TFLOPS

SERIES = [("bolt", "Bolt", "#d62728"), ("torch", "PyTorch (cuBLAS/cuDNN)", "#1f77b4"),
          ("torch_compile", "torch.compile", "#2ca02c")]


def load(results_dir):
    runs = {}
    for p in sorted(pathlib.Path(results_dir).glob("*.json")):
        try:
            r = json.loads(p.read_text())
        except json.JSONDecodeError as e:
            raise SystemExit(f"render: {p}: not valid JSON: {e}")
        if r.get("schema", "").startswith("bolt-bench-result/"):
            gpu = "dryrun" if r["mode"] == "dry-run" else r["environment"]["gpu"]["name"]
            runs.setdefault((r["date"][:10], gpu), []).append((p, r))
    return runs


def roofline_svg(title, points, peak, bw, note=None, w=720, h=460):
    """points: [(label, series_key, intensity, tflops)]; log-log axes."""
    ml, mr, mt, mb = 70, 190, 40, 50
    x0, x1, y0, y1 = 1.0, 10000.0, 1.0, max(peak or 1000.0, 10.0) * 1.5
    for _, _, ai, tf in points:
        x0, x1 = min(x0, ai / 2), max(x1, ai * 2)
        y0 = min(y0, tf / 2)
    lx = lambda v: ml + (math.log10(v) - math.log10(x0)) / (math.log10(x1) - math.log10(x0)) * (w - ml - mr)  # noqa
    ly = lambda v: h - mb - (math.log10(v) - math.log10(y0)) / (math.log10(y1) - math.log10(y0)) * (h - mt - mb)  # noqa
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2}" y="20" text-anchor="middle" font-size="14">{escape(title)}</text>',
           f'<rect x="{ml}" y="{mt}" width="{w - ml - mr}" height="{h - mt - mb}" fill="none" stroke="#444"/>']
    for e in range(math.ceil(math.log10(x0)), math.floor(math.log10(x1)) + 1):
        x = lx(10 ** e)
        out.append(f'<line x1="{x:.1f}" y1="{mt}" x2="{x:.1f}" y2="{h - mb}" stroke="#eee"/>'
                   f'<text x="{x:.1f}" y="{h - mb + 15}" text-anchor="middle">1e{e}</text>')
    for e in range(math.ceil(math.log10(y0)), math.floor(math.log10(y1)) + 1):
        y = ly(10 ** e)
        out.append(f'<line x1="{ml}" y1="{y:.1f}" x2="{w - mr}" y2="{y:.1f}" stroke="#eee"/>'
                   f'<text x="{ml - 5}" y="{y + 4:.1f}" text-anchor="end">{10 ** e:g}</text>')
    out.append(f'<text x="{(ml + w - mr) / 2}" y="{h - 12}" text-anchor="middle">FLOPs per DRAM byte (minimum traffic)</text>'
               f'<text x="16" y="{(mt + h - mb) / 2}" transform="rotate(-90 16 {(mt + h - mb) / 2})" text-anchor="middle">TFLOP/s</text>')
    if peak and bw:
        ridge = peak / bw  # TFLOP/s over TB/s = FLOP per byte
        pts = [(x0, x0 * bw), (ridge, peak), (x1, peak)]
        pts = [(max(x, x0), max(y, y0)) for x, y in pts]
        out.append('<polyline fill="none" stroke="#555" stroke-width="2" points="'
                   + " ".join(f"{lx(x):.1f},{ly(y):.1f}" for x, y in pts) + '"/>')
        out.append(f'<text x="{lx(x1) - 4:.1f}" y="{ly(peak) - 5:.1f}" text-anchor="end">f16 peak {peak:g} TFLOP/s, {bw:g} TB/s</text>')
    for i, (key, label, color) in enumerate(SERIES):
        y = mt + 10 + 18 * i
        out.append(f'<circle cx="{w - mr + 15}" cy="{y}" r="4" fill="{color}"/><text x="{w - mr + 25}" y="{y + 4}">{escape(label)}</text>')
        for _, k, ai, tf in points:
            if k == key:
                out.append(f'<circle cx="{lx(ai):.1f}" cy="{ly(tf):.1f}" r="3.5" fill="{color}" fill-opacity="0.8"/>')
    if note:
        out.append(f'<text x="{(ml + w - mr) / 2}" y="{(mt + h - mb) / 2}" text-anchor="middle" font-size="16" fill="#a00">{escape(note)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", type=pathlib.Path)
    ap.add_argument("--out", type=pathlib.Path)
    o = ap.parse_args(argv)
    out = o.out or o.results
    out.mkdir(parents=True, exist_ok=True)
    runs = load(o.results)
    if not runs:
        print(f"render: no result files in {o.results}", file=sys.stderr)
        return 1
    md = ["# Bolt benchmark results\n"]
    for (date, gpu), files in sorted(runs.items(), reverse=True):
        md.append(f"\n## {date} · {gpu}\n")
        points = []
        for p, r in files:
            table = p.with_suffix(".md")
            md.append(table.read_text() if table.exists() else f"({p.name}: no table)\n")
            if r["suite"] in ("gemm", "conv") and r["mode"] == "gpu":
                for c in r["cases"]:
                    if not c.get("bytes"):
                        continue
                    ai = c["flops"] / c["bytes"]
                    for key, _, _ in SERIES:
                        tf = (c.get(key) or {}).get("tflops")
                        if tf:
                            points.append((c["id"], key, ai, tf))
        dry = gpu == "dryrun"
        ref_gpu = "H100" if dry else gpu
        peak = next((v for k, v in PEAK_F16_TFLOPS.items() if k in ref_gpu), None)
        bw = next((v for k, v in DRAM_TBPS.items() if k in ref_gpu), None)
        title = f"gemm + conv roofline, {date}, " + ("dry run (roofs: H100 datasheet)" if dry else gpu)
        note = "DRY RUN: no GPU measurements" if dry else (None if points else "no gemm/conv timings in these files")
        svg = out / f"{date}-{'dryrun' if dry else ''.join(ch if ch.isalnum() else '-' for ch in gpu).lower()}-roofline.svg"
        svg.write_text(roofline_svg(title, points, peak, bw, note))
        md.append(f"\n![roofline]({svg.name})\n")
    (out / "summary.md").write_text("".join(md))
    print(f"render: {len(runs)} run(s) -> {out / 'summary.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
