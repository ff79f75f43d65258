"""Runs one kernel per listed case once; meant to run under
`compute-sanitizer --tool memcheck --error-exitcode 99` (see run.py --memcheck)."""

import argparse
import sys

import numpy as np

from . import reference as ref
from .abi import Libraries
from .common import load_package
from .suites import Ctx, Operands, attention_operands, attention_runner, bolt_runner


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pkg", required=True)
    ap.add_argument("--cases", required=True, help="comma-separated kernels- or attention-suite case ids")
    o = ap.parse_args()
    import torch
    package = load_package(o.pkg)
    by_id = {c["id"]: c for suite in ("kernels", "attention") for c in package["suites"].get(suite, [])}
    ctx = Ctx(package, Libraries(o.pkg), dry=False)
    rng = np.random.default_rng(0)
    for cid in o.cases.split(","):
        case = by_id.get(cid)
        if case is None or case.get("status") != "ready":
            print(f"memcheck: {cid}: no ready case of that id in the package", file=sys.stderr)
            return 2
        if case["suite"] == "attention":
            ops = attention_operands(case, 0)
            for kern in case["kernels"]:  # every kernel of the case (sm80 and sm90)
                run, _ = attention_runner(ctx, case, kern, *ops)
                run()
            torch.cuda.synchronize()
            print(f"memcheck: ran {cid} ({len(case['kernels'])} kernels)")
            continue
        a, b, c, bias = ref.random_operands(case["problem"], rng, case["epilogue"])
        dev = lambda x: None if x is None else torch.from_numpy(x.astype(np.float16)).cuda()  # noqa: E731
        ops = Operands.__new__(Operands)
        ops.problem = ops.bolt_problem = case["problem"]
        ops.form, ops._bolt = case["epilogue"], None
        ops.a, ops.b, ops.c, ops.bias = dev(a), dev(b), dev(c), dev(bias)
        run, _ = bolt_runner(ctx, case["kernels"][0], ops, 0.75, 0.5)
        run()
        torch.cuda.synchronize()
        print(f"memcheck: ran {cid}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
