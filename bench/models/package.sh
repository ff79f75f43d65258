#!/usr/bin/env bash
# Packages whole models for the GPU machine (here: Rust, the pinned nvcc, the project's venv):
#
#   bash bench/models/package.sh [--out DIR] [--models a,b|none] [--precisions f16,tf32] [--arch sm90]
#                                [--generate a,b|all] [--dry]
#
#   DIR/bin/bolt                         the bolt binary with the cuda device (stripped)
#   DIR/models/<model>-<precision>/      artifacts (`bolt compile`: plan, weights, kernel library)
#   DIR/inputs/<model>/inputs.npz        the model's real inputs (test_data_set_0), expected.npz
#   DIR/run.sh                           the GPU entry point (bench/models/run.sh)
#   with --generate (models of bench/models/generated.txt, built on the GPU machine, not here):
#   DIR/generated.txt, DIR/make/         which ones, and the seeded generator (tests/python)
#   DIR/cutlass-headers.tar.xz           CUTLASS's include trees (about 1 MiB packed) for nvcc there
#   DIR/torch_e2e.py                     the same networks in PyTorch, eager and torch.compile
#
# Models and their flags: bench/models/models.txt. `--dry` (what CI checks): small_conv_mlp
# only, sm80, tf32, into target/bench-models-dry. Defaults: every listed model, f16, sm90
# (kernels only CUTLASS 2.x has, and Bolt's own, are sm80 kernels built as sm_90 SASS + compute_80 PTX), DIR
# target/bench-models: about 55 MiB (the binary 17). Fails if DIR is over the device's 64 MiB
# carry limit. TF32 weights are twice the size: two packages carry them, e.g.
#   --precisions tf32 --models small_conv_mlp,ppocrv4_det,magika,akiki_vad,silero_vad,trueocr_rec
#   --precisions tf32 --models mobilenet_v2,ppocrv4_rec
# Cold, every model's kernels take about 25 minutes of nvcc here (2 cores); warm, seconds.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT="$PWD"
OUT="" MODELS="" PRECISIONS="f16" ARCH=sm90 DRY=0 GENERATE=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --out) OUT="$2"; shift 2 ;;
        --models) MODELS="$2"; shift 2 ;;
        --precisions) PRECISIONS="$2"; shift 2 ;;
        --arch) ARCH="$2"; shift 2 ;;
        --generate) GENERATE="$2"; shift 2 ;;
        --dry) DRY=1; shift ;;
        *) echo "models/package.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
if (( DRY )); then
    MODELS="${MODELS:-small_conv_mlp}" PRECISIONS=tf32 ARCH=sm80 OUT="${OUT:-target/bench-models-dry}"
fi
OUT="${OUT:-target/bench-models}"
TESTDATA="${BOLT_TESTDATA:-$ROOT/testdata}/models"
PY="${BOLT_PYTHON:-$ROOT/.venv/bin/python}"
[[ -d $TESTDATA ]] || { echo "models/package.sh: no test models at $TESTDATA (bash tests/run.sh makes them; or set BOLT_TESTDATA)" >&2; exit 2; }

cargo build --release -q --features cuda -p bolt --bin bolt
rm -rf "$OUT" && mkdir -p "$OUT/bin" "$OUT/models" "$OUT/inputs"
strip -o "$OUT/bin/bolt" target/release/bolt
cp bench/models/run.sh bench/models/summary.py bench/models/models.txt bench/models/inputs.py "$OUT/"
echo "$(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo -dirty)" > "$OUT/commit.txt"

while read -r name flags; do
    [[ -z $name || $name == \#* ]] && continue
    if [[ -n $MODELS && ",$MODELS," != *",$name,"* ]]; then continue; fi
    model="$TESTDATA/$name/model.onnx"
    [[ -f $model ]] || { echo "models/package.sh: $model missing" >&2; exit 2; }
    "$PY" bench/models/inputs.py "$TESTDATA/$name" "$OUT/inputs/$name"
    for p in ${PRECISIONS//,/ }; do
        art="$OUT/models/$name-$p"
        echo "models/package.sh: $name ($p, $ARCH${flags:+, $flags})"
        # shellcheck disable=SC2086 # flags are words
        if ! target/release/bolt compile "$model" --arch "$ARCH" --precision "$p" --inputs "$OUT/inputs/$name/inputs.npz" \
            $flags -o "$art" > "$art.log" 2>&1; then
            # A model whose values leave the precision's range is a result, not a packaging error.
            if grep -q -- "--precision $p: tensor" "$art.log"; then
                grep -- "--precision $p: tensor" "$art.log" > "$art.skipped"
                echo "models/package.sh: $name ($p) not built: $(cat "$art.skipped")"
                rm -rf "$art"
                continue
            fi
            tail -20 "$art.log" >&2
            exit 1
        fi
        rm -rf "$art/.build"
    done
done < bench/models/models.txt

if [[ -n $GENERATE ]]; then
    mkdir -p "$OUT/make"
    cp tests/python/make_models.py tests/python/refcase.py "$OUT/make/"
    cp bench/models/torch_e2e.py "$OUT/"
    awk -v want=",$GENERATE," '/^#/ || NF == 0 { next } want == ",all," || index(want, "," $1 ",") { print }' \
        bench/models/generated.txt > "$OUT/generated.txt"
    [[ -s $OUT/generated.txt ]] || { echo "models/package.sh: --generate $GENERATE: none of bench/models/generated.txt" >&2; exit 2; }
    bash bench/cutlass_headers.sh "$OUT/cutlass-headers.tar.xz"
    echo "models/package.sh: generated there: $(cut -d' ' -f1 "$OUT/generated.txt" | sort -u | tr '\n' ' ')"
fi

BYTES=$(du -sb "$OUT" | cut -f1)
LIMIT=$((64 * 1024 * 1024))
echo "models/package.sh: $OUT, $((BYTES / 1024)) KiB of $((LIMIT / 1024)) KiB"
if (( BYTES >= LIMIT )); then
    echo "models/package.sh: $OUT is over the 64 MiB carry limit: package fewer models (--models)" >&2
    exit 1
fi
