#!/usr/bin/env bash
# The GPU entry point (H100-class machine: nvcc 13.0, PyTorch 2.11, no Rust). Runs from the
# package folder that bench/package.sh built, or from the repository with --pkg:
#
#   bash gpu.sh [--suites all|kernels,gemm,conv,epilogue,b2b,padding,attention,e2e] [--out DIR] [--memcheck]
#               [--budget-s SECS] [--runs N] [--warmup N] [--compile-mode MODE] [--dry-run]
#   bash bench/gpu.sh --pkg target/bench-pkg ...
#
# Writes DIR/<date>-<gpu>-<suite>.json + .md (default DIR: ./results, or $OUT/results when the
# device tool's $OUT is set), then the tables and roofline plot (render.py).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PKG="$HERE" ARGS=() RESULTS=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --pkg) PKG="$(cd "$2" && pwd)"; shift 2 ;;
        --out) RESULTS="$2"; shift 2 ;;
        *) ARGS+=("$1"); shift ;;
    esac
done
[[ -f $PKG/package.json ]] || { echo "gpu.sh: $PKG/package.json missing (build with bash bench/package.sh, pass --pkg)" >&2; exit 2; }
[[ -n $RESULTS ]] || RESULTS="${OUT:+$OUT/results}"
RESULTS="${RESULTS:-$PWD/results}"
mkdir -p "$RESULTS" && RESULTS="$(cd "$RESULTS" && pwd)"
PY="${PYTHON:-python3}"
HARNESS_DIR="$PKG"
[[ -d $PKG/harness ]] || HARNESS_DIR="$HERE"   # repository layout: bench/harness
if ! printf '%s\n' ${ARGS[@]+"${ARGS[@]}"} | grep -q -- '--dry-run'; then
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv || true
fi
export PYTHONUNBUFFERED=1
rc=0
(cd "$HARNESS_DIR" && "$PY" -m harness.run --pkg "$PKG" --out "$RESULTS" ${ARGS[@]+"${ARGS[@]}"}) || rc=$?
(cd "$HARNESS_DIR" && "$PY" -m harness.render "$RESULTS" --out "$RESULTS") || true
exit $rc
