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
# Models the package lists in generated.txt are first generated here from their seeded script
# and compiled here (this machine's nvcc, the packaged CUTLASS headers, a cold kernel cache): the
# build's seconds are a result (<case>.build.log). Those also run at a larger batch (inputs and
# onnxruntime's outputs repeated along axis 0): checked and timed (`<case>.big.log`, graph too),
# and torch_e2e.py times the same networks in PyTorch on the same GPU.
#
#   bash run.sh [--out DIR] [--device cuda|reference] [--timeout SECS] [--models a,b]
#               [--build-timeout SECS] [--torch-timeout SECS] [--arch sm90] [--phase build|run|all]
#
# `--phase build` only generates and compiles (CPU and nvcc: PyTorch may time on the idle GPU
# meanwhile); `--phase run` runs what an earlier build phase left, with the same --out.
# `--torch-timeout 0` leaves PyTorch out.
# `--device reference` runs the same steps on the CPU (what CI does to check this script).
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
COMMAND="bash run.sh $*"
RESULTS="" DEVICE=cuda TIMEOUT=240 MODELS="" BUILD_TIMEOUT=240 TORCH_TIMEOUT=240 ARCH=sm90 PHASE=all
while [[ $# -gt 0 ]]; do
    case "$1" in
        --out) RESULTS="$2"; shift 2 ;;
        --device) DEVICE="$2"; shift 2 ;;
        --timeout) TIMEOUT="$2"; shift 2 ;;
        --models) MODELS="$2"; shift 2 ;;
        --build-timeout) BUILD_TIMEOUT="$2"; shift 2 ;;
        --torch-timeout) TORCH_TIMEOUT="$2"; shift 2 ;;
        --arch) ARCH="$2"; shift 2 ;;
        --phase) PHASE="$2"; shift 2 ;;
        *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[[ $PHASE == build || $PHASE == run || $PHASE == all ]] || { echo "run.sh: --phase must be build, run or all" >&2; exit 2; }
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
PY="${PYTHON:-python3}"
if [[ -f $HERE/generated.txt && $PHASE != run ]]; then
    mkdir -p "$HERE/cutlass" "$HERE/models" "$HERE/inputs"
    tar -xJf "$HERE/cutlass-headers.tar.xz" -C "$HERE/cutlass"
    # nvcc: this machine's (CUDA_HOME or PATH); a kernel cache of the package's own: cold.
    export CUTLASS_DIR="$HERE/cutlass" BOLT_CACHE_DIR="${BOLT_CACHE_DIR:-$HERE/cache}"
    "$BOLT" toolchain status > "$LOGS/toolchain.log" 2>&1
    while read -r name precisions batch flags; do
        if [[ -n $MODELS && ",$MODELS," != *",$name,"* ]]; then continue; fi
        if [[ ! -f $HERE/inputs/$name/inputs_b$batch.npz ]]; then
            "$PY" "$HERE/make/make_models.py" --out "$HERE/testdata" --only "$name" > "$LOGS/$name.make.log" 2>&1 &&
                "$PY" "$HERE/inputs.py" "$HERE/testdata/$name" "$HERE/inputs/$name" --batch "$batch" >> "$LOGS/$name.make.log" 2>&1 ||
                { echo "run.sh: generating $name failed (see $name.make.log)"; continue; }
        fi
        for p in ${precisions//,/ }; do
            art="$HERE/models/$name-$p"
            echo "$batch" > "$art.batch"
            echo "$batch" > "$LOGS/$name-$p.batch"
            t0=$(date +%s.%N)
            # shellcheck disable=SC2086 # flags are words
            timeout "$BUILD_TIMEOUT" "$BOLT" compile "$HERE/testdata/$name/model.onnx" --arch "$ARCH" --precision "$p" \
                --inputs "$HERE/inputs/$name/inputs.npz" $flags -o "$art" > "$LOGS/$name-$p.build.log" 2>&1
            rc=$?
            echo "$rc" > "$LOGS/$name-$p.build.log.rc"
            # Milliseconds: a small model whose kernels are all cached builds in well under 0.1 s.
            echo "$(date +%s.%N) $t0" | awk '{ printf "%.3f\n", $1 - $2 }' > "$LOGS/$name-$p.build.s"
            echo "run.sh: built $name-$p: exit $rc in $(cat "$LOGS/$name-$p.build.s") s"
            [[ $rc == 0 ]] || rm -rf "$art"
        done
    done < <(grep -v '^#' "$HERE/generated.txt" | grep -v '^ *$')
fi
[[ $PHASE == build ]] && exit 0
for art in "$HERE"/models/*/; do
    art="${art%/}"
    case_name="$(basename "$art")"
    model="${case_name%-*}"
    if [[ -n $MODELS && ",$MODELS," != *",$model,"* ]]; then continue; fi
    inputs="$HERE/inputs/$model/inputs.npz"
    batch="$(cat "$art.batch" 2>/dev/null)"
    for mode in check ort graph big biggraph; do
        run_inputs="$inputs"
        case $mode in
            check) extra=(--check --oracle reference --bench) ;;
            # onnxruntime's outputs for the same inputs, recorded with the model (f32, CPU).
            ort) extra=(--check --oracle "$HERE/inputs/$model/expected.npz") ;;
            graph) extra=(--bench --graph) ;;
            # The larger batch, checked against onnxruntime's outputs repeated (inputs.py --batch).
            big) extra=(--check --oracle "$HERE/inputs/$model/expected_b$batch.npz" --bench) ;;
            biggraph) extra=(--bench --graph) ;;
        esac
        if [[ $mode == big* ]]; then
            [[ -n $batch ]] || continue
            run_inputs="$HERE/inputs/$model/inputs_b$batch.npz"
        fi
        [[ $mode == *graph && $DEVICE != cuda ]] && continue  # a CUDA graph needs the cuda device
        log="$LOGS/$case_name.$mode.log"
        timeout "$TIMEOUT" "$BOLT" run "$art" --device "$DEVICE" --inputs "$run_inputs" "${extra[@]}" > "$log" 2>&1
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
if [[ -f $HERE/torch_e2e.py && $DEVICE == cuda && $TORCH_TIMEOUT != 0 ]]; then
    # The same networks in PyTorch on this GPU, at the batches the generated models ran.
    nets="$(grep -v '^#' "$HERE/generated.txt" | awk 'NF { n = split($2, p, ","); for (i = 1; i <= n; i++) print $1 ":" $3 ":" p[i] }' | tr '\n' ',')"
    timeout "$TORCH_TIMEOUT" "$PY" "$HERE/torch_e2e.py" --models "${nets%,}" --out "$LOGS/torch_e2e.json" \
        --deadline-s "$((TORCH_TIMEOUT * 2 / 3))" \
        > "$LOGS/torch_e2e.log" 2>&1
    echo "run.sh: torch_e2e: exit $?"
fi
"$PY" "$HERE/summary.py" --logs "$LOGS" --out "$RESULTS" --device "$DEVICE" --package "$HERE" --command "$COMMAND"
