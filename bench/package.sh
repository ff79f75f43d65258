#!/usr/bin/env bash
# Packaging step (here: Rust + the pinned nvcc; no GPU). Puts everything the GPU machine needs
# into one folder, checked to stay under the device's 64 MiB carry limit:
#
#   bash bench/package.sh [--profile dry|full] [--out DIR] [extra bench_package args]
#
#   DIR/package.json         every workload of ../shared/workloads, its kernels and problem
#   DIR/kernels/*.so         generated CUTLASS kernel libraries (+ manifests), cudart static
#   DIR/b2b/*.so             back-to-back chain kernels
#   DIR/workloads/*.json     copy of the shapes files (../shared does not travel)
#   DIR/harness/, DIR/gpu.sh the Python drivers (stdlib + numpy; torch on the GPU only)
#   DIR/plugin/              libbolt_plugin.so (stripped) + bolt_ort, for the end-to-end suite
#
# Defaults: --profile full --out target/bench-pkg (dry: target/bench-pkg-dry). Workloads from
# $BOLT_WORKLOADS, else ../shared/workloads beside the repository or an ancestor.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"
PROFILE=full OUT="" EXTRA=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --profile) PROFILE="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        *) EXTRA+=("$1"); shift ;;
    esac
done
[[ $PROFILE == dry || $PROFILE == full ]] || { echo "package.sh: --profile must be dry or full" >&2; exit 2; }
OUT="${OUT:-target/bench-pkg$([[ $PROFILE == dry ]] && echo -dry || true)}"
# ../shared/workloads of the repository or of an ancestor (git worktrees live below the clone).
WORKLOADS="${BOLT_WORKLOADS:-}"
if [[ -z $WORKLOADS ]]; then
    d="$ROOT"
    while [[ $d != / && ! -f $d/../shared/workloads/gemm.json ]]; do d="$(dirname "$d")"; done
    WORKLOADS="$d/../shared/workloads"
fi
[[ -f $WORKLOADS/gemm.json ]] || { echo "package.sh: no workloads at $WORKLOADS (set BOLT_WORKLOADS)" >&2; exit 2; }
MODELS="${BOLT_TESTDATA:-$ROOT/testdata}/models"

cargo build --release -q --example bench_package -p bolt
cargo build --release -q -p bolt-plugin
mkdir -p "$OUT"
export BOLT_BENCH_COMMIT="$(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo -dirty)"
ARGS=(--workloads "$WORKLOADS" --out "$OUT" --profile "$PROFILE")
[[ -d $MODELS ]] && ARGS+=(--models "$MODELS")
target/release/examples/bench_package "${ARGS[@]}" ${EXTRA[@]+"${EXTRA[@]}"}

# Scripts, shapes and the ORT plugin (stripped: the debug line tables are 50 MB).
rm -rf "$OUT/harness" "$OUT/workloads" "$OUT/plugin"
mkdir -p "$OUT/harness" "$OUT/workloads" "$OUT/plugin/python"
cp bench/harness/*.py "$OUT/harness/"
cp bench/gpu.sh bench/README.md "$OUT/"
cp "$WORKLOADS"/*.json "$WORKLOADS"/README.md "$OUT/workloads/" 2>/dev/null || cp "$WORKLOADS"/*.json "$OUT/workloads/"
strip -o "$OUT/plugin/libbolt_plugin.so" target/release/libbolt_plugin.so
cp -r plugin/python/bolt_ort plugin/python/bolt_plugin "$OUT/plugin/python/"
# Build leftovers the GPU does not need (sources stay: small, and useful to read).
rm -rf "$OUT"/kernels/logs "$OUT"/b2b/logs "$OUT"/*/.bolt-build.lock
find "$OUT" -name __pycache__ -prune -exec rm -rf {} +

BYTES=$(du -sb "$OUT" | cut -f1)
LIMIT=$((64 * 1024 * 1024))
echo "package: $OUT, $((BYTES / 1024)) KiB of $((LIMIT / 1024)) KiB"
if (( BYTES >= LIMIT )); then
    echo "package.sh: $OUT is $BYTES bytes, over the 64 MiB carry limit" >&2
    exit 1
fi
