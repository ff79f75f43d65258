#!/usr/bin/env bash
# A GPU session in few device calls. A session's device time is short (minutes, the machine's
# start included) and packaging takes tens of minutes of nvcc here, so everything is prepared
# first, here, into archives that each fit one call's 64 MiB carry; each archive then runs in
# one call whose steps go in the order of ../shared/GPU.md, every step inside what is left of
# the call's budget, and everything it wrote comes back as one archive of results and logs.
#
#   bash bench/session.sh prepare [--out DIR] [--parts models,suites] [--models a,b|none]
#                                 [--generate a,b|none] [--dry]                      (here)
#   bash bench/session.sh run PART [--budget-s SECS] [--archive FILE] [--steps a,b] [--dry]   (GPU machine)
#
# Parts (DIR default target/gpu-session; DIR/PART.tar.xz, one device call each):
#   models  the whole-models package (bench/models): the models of models.txt run while ResNet-50,
#           BERT-base and MobileNetV2 are generated and compiled there; then those run, against
#           PyTorch; then, if the budget allows, bolt-tune on the generated BERT-base (top-k
#           timed) and the same build with its database, timed: profiler truth on a model.
#           `--models a,b|none` and `--generate a,b|none` choose the carried and the generated
#           models (a short recheck of a few).
#   suites  the kernel suites (bench/package.sh): every sm80 conv family x epilogue, the
#           attention kernels with memcheck, the Fig. 9 epilogues; ONNX Runtime + Bolt's cuda
#           device on compiled-once EPContext models (bench/ort/ctx.py: MobileNetV2 and
#           PP-OCRv4 det compiled here and run first, then ResNet-50 generated and compiled
#           there; the results file is rewritten after every model); TVM's cuda build with
#           Bolt's partitions (bench/tvm/cuda.py).
#
# On the GPU machine the device tool runs in a copy of this repository; carry the part's
# archive, e.g. carry ["target/gpu-session/models.tar.xz"] and the command
#   bash bench/session.sh run models --budget-s 540
# `--steps` names the steps to run, in order: suites kernels-sm80-conv,attention,ort,tvm,epilogue
# (the default); models carried,generated,torch,tune (the default; without torch no PyTorch
# timings, without tune the generated models get its time). A short call puts first what has never run on a GPU.
# Results: $OUT/session-PART.tgz (results/ with each step's JSON and Markdown, logs/ with each
# step's output and exit status, steps.tsv: step, exit, seconds). Unpack it into
# bench/results/<date>-<gpu>-<label>/ and write that folder's README.
#
# `--dry` (what CI checks): prepare builds the dry variants (small_conv_mlp only, the dry kernel
# profile, the CPU twins of the ORT and TVM runs) and run executes every step on the CPU
# (reference device, --dry-run suites), so the plumbing is exercised without a GPU.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
[[ $# -ge 1 ]] || usage
CMD="$1"; shift

prepare() {
    local out=target/gpu-session parts=models,suites dry=0 models="" generate=bert_base,resnet50,mobilenet_v2
    while [[ $# -gt 0 ]]; do
        case "$1" in
            --out) out="$2"; shift 2 ;;
            --parts) parts="$2"; shift 2 ;;
            --models) models="$2"; shift 2 ;;
            --generate) generate="$2"; shift 2 ;;
            --dry) dry=1; shift ;;
            *) echo "session.sh prepare: unknown argument $1" >&2; exit 2 ;;
        esac
    done
    set -e
    local commit
    commit="$(git rev-parse HEAD)$(git diff --quiet HEAD || echo -dirty)"
    mkdir -p "$out"
    out="$(cd "$out" && pwd)"
    local stage="$out/stage"
    local py="${BOLT_PYTHON:-$ROOT/.venv/bin/python}"
    for part in ${parts//,/ }; do
        rm -rf "$stage" && mkdir -p "$stage/$part"
        case $part in
            models)
                if (( dry )); then
                    bash bench/models/package.sh --dry --out "$stage/models/pkg"
                else
                    local gen=()
                    [[ $generate != none ]] && gen=(--generate "$generate")
                    bash bench/models/package.sh ${models:+--models "$models"} "${gen[@]}" --out "$stage/models/pkg"
                    if [[ $generate != none ]]; then
                        cargo build --release -q --features cuda -p bolt --bin bolt-tune
                        strip -o "$stage/models/pkg/bin/bolt-tune" target/release/bolt-tune
                    fi
                fi ;;
            suites)
                if (( dry )); then
                    bash bench/package.sh --profile dry --out "$stage/suites/pkg"
                    "$py" bench/ort/ctx.py prepare --models small_conv_mlp --out "$stage/suites/ort"
                    "$py" bench/tvm/cuda.py prepare --target llvm --no-wheel --out "$stage/suites/tvm"
                else
                    bash bench/package.sh --out "$stage/suites/pkg"
                    "$py" bench/ort/ctx.py prepare --models mobilenet_v2,ppocrv4_det --generate resnet50 --out "$stage/suites/ort"
                    "$py" bench/tvm/cuda.py prepare --out "$stage/suites/tvm"
                fi ;;
            *) echo "session.sh prepare: unknown part $part (models, suites)" >&2; exit 2 ;;
        esac
        echo "$commit" > "$stage/$part/commit.txt"
        (( dry )) && touch "$stage/$part/dry"
        tar -C "$stage" -cf - "$part" | xz -T2 -6 > "$out/$part.tar.xz"
        local bytes
        bytes=$(stat -c %s "$out/$part.tar.xz")
        echo "session.sh: $out/$part.tar.xz: $((bytes / 1024)) KiB of 65536 KiB"
        if (( bytes >= 64 * 1024 * 1024 )); then
            echo "session.sh: $part is over the 64 MiB carry limit" >&2
            exit 1
        fi
    done
    rm -rf "$stage"
    set +e
}

# Runs step NAME (a command line) within CAP seconds and what is left of the budget; records
# its exit status and seconds. A step needs at least MIN seconds or is skipped.
step() {
    local name="$1" cap="$2" min="$3"; shift 3
    local left=$((DEADLINE - $(date +%s)))
    local t=$(( cap < left ? cap : left ))
    if (( t < min )); then
        echo "session.sh: $name skipped: ${left}s left of the budget" | tee -a "$LOGS/session.log"
        printf '%s\tskipped\t0\n' "$name" >> "$STEPS"
        return
    fi
    echo "session.sh: $name (up to ${t}s)" | tee -a "$LOGS/session.log"
    local t0
    t0=$(date +%s)
    timeout -k 10 "$t" "$@" > "$LOGS/$name.log" 2>&1
    local rc=$?
    printf '%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - t0 ))" >> "$STEPS"
    echo "session.sh: $name: exit $rc in $(( $(date +%s) - t0 ))s" | tee -a "$LOGS/session.log"
    tail -3 "$LOGS/$name.log" | sed 's/^/    /'
}

run_models() {
    local pkg="$W/models/pkg"
    if (( DRY )); then
        step models 300 30 bash "$pkg/run.sh" --out "$RESULTS" --device reference
        return
    fi
    # The generated models are built (generated from their seed, compiled with this machine's
    # nvcc into a cold cache: the build's seconds are a result) on the CPU while the carried
    # ones run on the GPU; then the generated ones run, PyTorch timing the same networks while
    # the budget allows.
    local carried generated
    carried="$(cd "$pkg/models" && ls -d */ | sed 's|-[a-z0-9]*/$||' | sort -u | paste -sd,)"
    generated="$( [[ -f $pkg/generated.txt ]] && grep -v '^#' "$pkg/generated.txt" | awk 'NF { print $1 }' | sort -u | paste -sd,)"
    mkdir -p "$RESULTS/carried" "$RESULTS/generated"
    if [[ -z $generated ]]; then
        # A package of carried models only (package.sh without --generate).
        step models-carried 150 30 bash "$pkg/run.sh" --phase run --models "$carried" --out "$RESULTS/carried" \
            --timeout 60 --torch-timeout 0
        return
    fi
    # What the steps after the build need: the generated models' runs, PyTorch's, the tune's.
    local after=60 torch_timeout=0
    [[ ,$STEPS_ORDER, == *,torch,* ]] && after=$((after + 100)) torch_timeout=150
    [[ ,$STEPS_ORDER, == *,tune,* ]] && after=$((after + 100))
    local build_s=$((DEADLINE - $(date +%s) - after))
    timeout -k 10 $((build_s > 60 ? build_s : 60)) bash "$pkg/run.sh" --phase build --out "$RESULTS/generated" --build-timeout 200 \
        > "$LOGS/models-build.log" 2>&1 &
    local build=$!
    step models-carried 150 60 bash "$pkg/run.sh" --phase run --models "$carried" --out "$RESULTS/carried" \
        --timeout 60 --torch-timeout 0
    wait "$build"
    printf 'models-build\t%s\t-\n' "$?" >> "$STEPS"
    # The tune steps need about 100 s after this one; without them this one takes what is left.
    local reserve=15
    [[ ,$STEPS_ORDER, == *,tune,* ]] && reserve=100
    step models-generated $((DEADLINE - $(date +%s) - reserve)) 60 bash "$pkg/run.sh" --phase run --models "$generated" \
        --out "$RESULTS/generated" --timeout 60 --torch-timeout "$torch_timeout"
    # Profiler truth on a whole model: BERT-base's GEMMs, the analytic top-4 of each timed,
    # then the same build with that database, timed as the analytic one was (models step).
    [[ ,$STEPS_ORDER, == *,tune,* ]] || return 0
    local bert="$pkg/testdata/bert_base"
    [[ -f $bert/model.onnx ]] || { echo "session.sh: tune skipped: no generated BERT-base" | tee -a "$LOGS/session.log"; return; }
    export CUTLASS_DIR="$pkg/cutlass" BOLT_CACHE_DIR="$pkg/cache"
    step tune 150 60 "$pkg/bin/bolt-tune" model "$bert/model.onnx" --precision f16 --dim batch=32 --dim seq=128 \
        --top-k 4 --time-budget 90 --db "$RESULTS/tuning.json" --json "$RESULTS/tune.json"
    step tuned-build 90 30 "$pkg/bin/bolt" compile "$bert/model.onnx" --arch sm90 --precision f16 --dim batch=1..32 \
        --dim seq=128 --inputs "$pkg/inputs/bert_base/inputs.npz" --tuning-db "$RESULTS/tuning.json" -o "$W/bert-tuned"
    step tuned-run 60 20 "$pkg/bin/bolt" run "$W/bert-tuned" --inputs "$pkg/inputs/bert_base/inputs_b32.npz" \
        --check --oracle "$pkg/inputs/bert_base/expected_b32.npz" --bench --graph
}

run_suites() {
    local pkg="$W/suites/pkg"
    if (( DRY )); then
        step suites 300 30 bash "$pkg/gpu.sh" --dry-run --out "$RESULTS" --suites kernels,attention,epilogue
        step ort 120 20 python3 "$W/suites/ort/ctx.py" run --device reference --out "$RESULTS"
        step tvm 120 20 python3 "$W/suites/tvm/cuda.py" run --device cpu --iters 5 --out "$RESULTS"
        return
    fi
    # Default order: the sm80 conv families (unit-stride, grouped, depthwise: never run with
    # every epilogue), attention (the head-dim-256 kernel accumulating in its workspace among
    # them), ONNX Runtime, TVM, the epilogues; `--steps` reorders or trims them.
    local s
    for s in ${STEPS_ORDER//,/ }; do
        case $s in
            kernels-sm80-conv) step kernels-sm80-conv 150 60 bash "$pkg/gpu.sh" --out "$RESULTS" --suites kernels --cases sm80/conv --budget-s 120 ;;
            attention) step attention 120 60 bash "$pkg/gpu.sh" --out "$RESULTS" --suites attention --memcheck --budget-s 90 ;;
            ort) step ort 120 60 python3 "$W/suites/ort/ctx.py" run --out "$RESULTS" ;;
            tvm) step tvm 90 45 python3 "$W/suites/tvm/cuda.py" run --out "$RESULTS" ;;
            epilogue) step epilogue 90 45 bash "$pkg/gpu.sh" --out "$RESULTS" --suites epilogue --budget-s 70 ;;
            *) echo "session.sh: unknown suites step $s (kernels-sm80-conv, attention, ort, tvm, epilogue)" >&2; return 2 ;;
        esac
    done
}

run() {
    [[ $# -ge 1 ]] || usage
    PART="$1"; shift
    BUDGET=540 DRY=0 STEPS_ORDER=""
    local archive=""
    while [[ $# -gt 0 ]]; do
        case "$1" in
            --budget-s) BUDGET="$2"; shift 2 ;;
            --archive) archive="$2"; shift 2 ;;
            --dry) DRY=1; shift ;;
            --steps) STEPS_ORDER="$2"; shift 2 ;;
            *) echo "session.sh run: unknown argument $1" >&2; exit 2 ;;
        esac
    done
    [[ $PART == models || $PART == suites ]] || { echo "session.sh run: unknown part $PART (models, suites)" >&2; exit 2; }
    if [[ -z $STEPS_ORDER ]]; then
        [[ $PART == models ]] && STEPS_ORDER=carried,generated,torch,tune || STEPS_ORDER=kernels-sm80-conv,attention,ort,tvm,epilogue
    fi
    archive="${archive:-target/gpu-session/$PART.tar.xz}"
    [[ -f $archive ]] || { echo "session.sh run: $archive missing (bash bench/session.sh prepare; carry it)" >&2; exit 2; }
    DEADLINE=$(( $(date +%s) + BUDGET ))
    W="${BOLT_SESSION_DIR:-/tmp/bolt-session}"
    local back="${OUT:-$ROOT/target/gpu-session}"
    local collect="$W/collect-$PART"
    rm -rf "$W/$PART" "$collect" && mkdir -p "$W" "$collect/results" "$collect/logs"
    RESULTS="$collect/results" LOGS="$collect/logs" STEPS="$collect/steps.tsv"
    printf 'step\texit\tseconds\n' > "$STEPS"
    tar -xJf "$archive" -C "$W"
    [[ -f $W/$PART/dry && $DRY == 0 ]] && { echo "session.sh run: $archive is a dry package: run with --dry" >&2; exit 2; }
    cp "$W/$PART/commit.txt" "$collect/"
    {
        echo "command: bash bench/session.sh run $PART --budget-s $BUDGET --steps $STEPS_ORDER$( (( DRY )) && echo " --dry")"
        date -u +%FT%TZ
        nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw \
            --format=csv 2>&1 || true
        nvcc --version 2>&1 | tail -2 || true
        python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)' 2>&1 || true
    } > "$collect/machine.txt"
    "run_$PART"
    mkdir -p "$back"
    tar -C "$collect" -czf "$back/session-$PART.tgz" .
    echo "session.sh: $back/session-$PART.tgz"
    cat "$STEPS"
}

case "$CMD" in
    prepare) prepare "$@" ;;
    run) run "$@" ;;
    *) usage ;;
esac
