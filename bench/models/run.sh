#!/usr/bin/env bash
# The GPU side of the models package (bench/models/package.sh built it): every artifact run on
# the cuda device with its model's real inputs, checked against the same plan and weights on
# the CPU reference (`bolt run --check --oracle reference`: the device's kernels against their
# meaning; the plan against the original model is checked where the package was built), timed
# per kernel (`--bench`) and again as one CUDA graph (`--graph`). An artifact whose outputs
# differ from the reference device's runs once more with `--every-tensor`, which names the first
# node whose output differs (<case>.tensors.log). Writes
# RESULTS/<date>-<gpu>-models.json and .md (RESULTS: --out, else $OUT/results, else ./results).
#
#   bash run.sh [--out DIR] [--device cuda|reference] [--timeout SECS] [--models a,b]
#
# `--device reference` runs the same steps on the CPU (what CI does to check this script).
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
COMMAND="bash run.sh $*"
RESULTS="" DEVICE=cuda TIMEOUT=240 MODELS=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --out) RESULTS="$2"; shift 2 ;;
        --device) DEVICE="$2"; shift 2 ;;
        --timeout) TIMEOUT="$2"; shift 2 ;;
        --models) MODELS="$2"; shift 2 ;;
        *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
RESULTS="${RESULTS:-${OUT:+$OUT/results}}"
RESULTS="${RESULTS:-$PWD/results}"
LOGS="$RESULTS/models-logs"
mkdir -p "$LOGS"
BOLT="$HERE/bin/bolt"
[[ -x $BOLT ]] || { echo "run.sh: $BOLT missing (build the package with bench/models/package.sh)" >&2; exit 2; }
if [[ $DEVICE == cuda ]]; then
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv \
        > "$LOGS/nvidia-smi.csv" 2>&1 || true
fi
for art in "$HERE"/models/*/; do
    art="${art%/}"
    case_name="$(basename "$art")"
    model="${case_name%-*}"
    if [[ -n $MODELS && ",$MODELS," != *",$model,"* ]]; then continue; fi
    inputs="$HERE/inputs/$model/inputs.npz"
    for mode in check ort graph; do
        case $mode in
            check) extra=(--check --oracle reference --bench) ;;
            # onnxruntime's outputs for the same inputs, recorded with the model (f32, CPU).
            ort) extra=(--check --oracle "$HERE/inputs/$model/expected.npz") ;;
            graph) extra=(--bench --graph) ;;
        esac
        [[ $mode == graph && $DEVICE != cuda ]] && continue  # a CUDA graph needs the cuda device
        log="$LOGS/$case_name.$mode.log"
        timeout "$TIMEOUT" "$BOLT" run "$art" --device "$DEVICE" --inputs "$inputs" "${extra[@]}" > "$log" 2>&1
        echo $? > "$log.rc"
        echo "run.sh: $case_name $mode: exit $(cat "$log.rc")"
        if [[ $mode == check ]] && grep -q '^MISMATCH' "$log"; then
            # Which node's output first differs from the reference device's: every tensor kept.
            timeout "$TIMEOUT" "$BOLT" run "$art" --device "$DEVICE" --inputs "$inputs" --check --oracle reference \
                --every-tensor > "$LOGS/$case_name.tensors.log" 2>&1
            grep -E '^(every tensor|first differing)' "$LOGS/$case_name.tensors.log" | sed "s/^/run.sh: $case_name: /"
        fi
    done
done
PY="${PYTHON:-python3}"
"$PY" "$HERE/summary.py" --logs "$LOGS" --out "$RESULTS" --device "$DEVICE" --package "$HERE" --command "$COMMAND"
