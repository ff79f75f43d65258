"""Turns run.sh's logs into RESULTS/<date>-<gpu>-models.json and .md (stdlib only).

Each artifact has `<case>.check.log` (`bolt run --check --oracle reference --bench`: the device
against the same plan on the CPU reference), `<case>.ort.log` (`--check --oracle expected.npz`:
against onnxruntime's outputs) and, on the cuda device, `<case>.graph.log` (`--bench --graph`),
each with its exit status in `.rc`; a model run.sh generated and compiled there also has
`<case>.build.log` (+ `.build.s`, the build's wall seconds), `<case>.big.log` (the larger batch
against onnxruntime's outputs repeated) and `<case>.biggraph.log`; `torch_e2e.json` holds
PyTorch's times for the same networks. A case is `ok` when both checks ran and every output is
within the precision's tolerance; `mismatch` when the device differs from the reference device
(a kernel bug); `precision` when the device agrees with the reference device but the plan at
this precision does not reach onnxruntime's f32 answer within the precision's tolerance;
`error` when bolt failed (the log's tail says why); `not-built` when the package could not
build the artifact (its `.skipped` file says why)."""
import argparse
import datetime
import json
import pathlib
import re

VERDICT = re.compile(r"^(ok|MISMATCH) (\S+): max abs diff (\S+)")
DEVICE_TIME = re.compile(r"^device time ([\d.]+) us over (\d+) launches; host overhead ([\d.]+) us per launch")
WALL = re.compile(r"^mean of (\d+) runs: ([\d.]+) s")
KERNEL = re.compile(r"^  (\S+)\s+([\d.]+) us  (\S+)$")
DEVICE = re.compile(r"^device (.+)$")
WHOLE = re.compile(r"^whole run ([\d.]+) us median of (\d+) \(p10 ([\d.]+), p90 ([\d.]+)\)")
BUILT = re.compile(r"^  \d+ kernel nodes.*; (\d+) nvcc runs, build ([\d.]+) s, total ([\d.]+) s")


def parse(log):
    text = log.read_text(errors="replace") if log.is_file() else ""
    rc_file = log.with_name(log.name + ".rc")
    rc = int(rc_file.read_text().strip()) if rc_file.is_file() else None
    out = {"exit": rc, "outputs": [], "kernels": []}
    for line in text.splitlines():
        if m := VERDICT.match(line):
            out["outputs"].append({"name": m[2], "verdict": m[1], "max_abs_diff": float(m[3])})
        elif m := DEVICE_TIME.match(line):
            out.update(device_us=float(m[1]), launches=int(m[2]), host_us_per_launch=float(m[3]))
        elif m := WALL.match(line):
            out.update(wall_s_mean=float(m[2]), wall_runs=int(m[1]))
        elif m := KERNEL.match(line):
            out["kernels"].append({"node": m[1], "us": float(m[2]), "symbol": m[3]})
        elif m := DEVICE.match(line):
            out["device"] = m[1]
        elif m := WHOLE.match(line):
            out["whole_run_us"] = {"median": float(m[1]), "runs": int(m[2]), "p10": float(m[3]), "p90": float(m[4])}
        elif m := BUILT.match(line):
            out.update(nvcc_runs=int(m[1]), build_s=float(m[2]), compile_total_s=float(m[3]))
    out["log_tail"] = text[-1500:]
    return out


def built(logs, name):
    b = parse(logs / f"{name}.build.log")
    secs = logs / f"{name}.build.s"
    b["wall_s"] = float(secs.read_text()) if secs.is_file() else None
    return b


def e2e_rows(cases, torch):
    """Bolt's whole-run latency (inputs on the device, CUDA graph where it ran) next to PyTorch's
    for the generated models, at batch 1 and the larger batch."""
    rows = ["", "| model | precision | batch | Bolt build s | Bolt whole run ms | PyTorch eager ms | "
            "torch.compile ms (mode, compile s) | eager / Bolt |", "|---|---|---|---|---|---|---|---|"]
    recs = (torch or {}).get("records", [])
    for c in cases:
        if "build" not in c or c["status"] == "error":
            continue
        for batch, logs in ((1, (c.get("graph"), c["check"])), (c.get("big_batch"), (c.get("big_graph"), c.get("big")))):
            run = next((r["whole_run_us"] for r in logs if r and "whole_run_us" in r), None)
            bolt_ms = run["median"] / 1e3 if run else None
            mine = [r for r in recs if r["model"] == c["model"] and r["precision"] == c["precision"] and r["batch"] == batch]
            eager = next((r for r in mine if r["mode"] == "eager" and r["status"] == "ok"), None)
            comp = [f"{r['median_ms']:.3f} ({r['mode']}, {r['compile_s']:.0f} s)" for r in mine
                    if r["mode"] != "eager" and r["status"] == "ok"]
            ratio = eager["median_ms"] / bolt_ms if eager and bolt_ms else None
            rows.append(f"| {c['model']} | {c['precision']} | {batch} | {c['build'].get('wall_s')} | "
                        f"{None if bolt_ms is None else round(bolt_ms, 3)} | "
                        f"{None if not eager else round(eager['median_ms'], 3)} | {'; '.join(comp) or None} | "
                        f"{None if ratio is None else round(ratio, 2)} |")
    return rows if len(rows) > 3 else []


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--logs", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", required=True)
    ap.add_argument("--package", required=True)
    ap.add_argument("--command", default=None, help="the run.sh command line, recorded in the result")
    o = ap.parse_args()
    logs, out = pathlib.Path(o.logs), pathlib.Path(o.out)
    pkg = pathlib.Path(o.package)
    cases = []
    for check in sorted(logs.glob("*.check.log")):
        name = check.name[: -len(".check.log")]
        c = parse(check)
        ort = parse(logs / f"{name}.ort.log")
        g = parse(logs / f"{name}.graph.log") if (logs / f"{name}.graph.log").is_file() else None
        bad = lambda r: any(x["verdict"] == "MISMATCH" for x in r["outputs"])  # noqa: E731
        if bad(c):
            status = "mismatch"  # the device's kernels differ from their meaning: a kernel bug
        elif bad(ort):
            status = "precision"  # the plan at this precision differs from onnxruntime's f32 answer
        elif c["exit"] == 0 and ort["exit"] == 0 and c["outputs"] and ort["outputs"]:
            status = "ok"
        else:
            status = "error"
        model, _, precision = name.rpartition("-")
        case = {"case": name, "model": model, "precision": precision, "status": status, "check": c,
                "onnxruntime": ort, "graph": g}
        if (logs / f"{name}.build.log").is_file():
            case["build"] = built(logs, name)
        if (logs / f"{name}.big.log").is_file():
            big = case["big"] = parse(logs / f"{name}.big.log")
            case["big_graph"] = parse(logs / f"{name}.biggraph.log")
            batch = logs / f"{name}.batch"
            case["big_batch"] = int(batch.read_text()) if batch.is_file() else None
            if bad(big) and status == "ok":
                # Right at batch 1, wrong at the larger batch: its kernels (another bucket) are.
                case["status"] = "mismatch"
            elif big["exit"] != 0 and status == "ok":
                case["status"] = "error"
        tensors = logs / f"{name}.tensors.log"  # run.sh's tensor-by-tensor rerun of a mismatch
        if tensors.is_file():
            lines = tensors.read_text(errors="replace").splitlines()
            case["tensors"] = {"first_differing": next((x.split(": ", 1)[1] for x in lines
                                                        if x.startswith("first differing tensor: ")), None),
                               "differing": [x.strip() for x in lines if x.startswith("  TENSOR ")],
                               "summary": next((x for x in lines if x.startswith("every tensor: ")), None)}
        cases.append(case)
    # Generated models whose build failed here (run.sh removed the artifact).
    for log in sorted(logs.glob("*.build.log")):
        name = log.name[: -len(".build.log")]
        if not any(c["case"] == name for c in cases):
            model, _, precision = name.rpartition("-")
            b = built(logs, name)
            cases.append({"case": name, "model": model, "precision": precision, "status": "error", "build": b,
                          "reason": f"build exit {b['exit']}: {b['log_tail'][-300:]}"})
    # Artifacts the package could not build at a precision (bench/models/package.sh).
    for skipped in sorted((pkg / "models").glob("*.skipped")):
        name = skipped.name[: -len(".skipped")]
        model, _, precision = name.rpartition("-")
        cases.append({"case": name, "model": model, "precision": precision, "status": "not-built",
                      "reason": skipped.read_text().strip()})
    torch_file = logs / "torch_e2e.json"
    torch = json.loads(torch_file.read_text()) if torch_file.is_file() else None
    smi = logs / "nvidia-smi.csv"
    gpu = smi.read_text().strip().splitlines()[1:] if smi.is_file() else []
    commit = (pkg / "commit.txt").read_text().strip() if (pkg / "commit.txt").is_file() else None
    now = datetime.datetime.now(datetime.timezone.utc)
    gpu_name = gpu[0].split(",")[0].strip().replace(" ", "-") if gpu else o.device
    result = {"schema": "bolt-models-v1", "date": now.isoformat(timespec="seconds"), "device": o.device,
              "gpu": gpu, "commit": commit, "command": o.command,
              "oracle": "the artifact's plan on the CPU reference device",
              "cases": cases, "torch": torch,
              "counts": {s: sum(c["status"] == s for c in cases) for s in ("ok", "mismatch", "precision", "error", "not-built")}}
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{now:%Y-%m-%d}-{gpu_name}-models"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    rows = ["| case | status | vs reference: max abs diff | vs onnxruntime: max abs diff | device us | launches | "
            "graph device us | wall ms |", "|---|---|---|---|---|---|---|---|"]
    for c in cases:
        if "check" not in c:  # not built (package) or its build failed (run.sh)
            rows.append(f"| {c['case']} | {c['status']}: {' '.join(c['reason'].split())[:200]} | | | | | | |")
            continue
        ck, g = c["check"], c["graph"] or {}
        diff = lambda r: max((x["max_abs_diff"] for x in r["outputs"]), default=None)  # noqa: E731
        wall = ck.get("wall_s_mean")
        rows.append(f"| {c['case']} | {c['status']} | {diff(ck)} | {diff(c['onnxruntime'])} | {ck.get('device_us')} | "
                    f"{ck.get('launches')} | {g.get('device_us')} | {None if wall is None else round(wall * 1e3, 3)} |")
    rows += e2e_rows(cases, torch)
    md = f"# models — {o.device} {gpu[0] if gpu else ''}\n\n{result['date']} · commit {commit} · {json.dumps(result['counts'])}\n\n"
    stem.with_suffix(".md").write_text(md + "\n".join(rows) + "\n")
    print(f"models: {json.dumps(result['counts'])} -> {stem}.json")
    # A kernel that differs from its meaning, or a run that failed, fails the run; precision
    # loss against onnxruntime and models not built are results.
    return 0 if cases and not (result["counts"]["mismatch"] or result["counts"]["error"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
