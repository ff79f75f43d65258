#!/usr/bin/env bash
# Device call 3 of session 6: BERT-base with one warp per LayerNorm row; bolt-tune timing the
# analytic top-k of BERT-base's GEMMs on the GPU (candidates built there), and the build that
# takes its picks; the sm80 conv cases the last call's budget skipped.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
DEADLINE=${DEADLINE:-222}; left() { echo $(( DEADLINE - $(el) )); }
R=/tmp/res; rm -rf $R; mkdir -p $R; exec > >(tee $R/run.log) 2>&1
W=/tmp/w; rm -rf $W; mkdir -p $W; tar -xJf target/gpu.tar.xz -C $W
G=$W/bench-gen
echo "[$(el)] extracted"; nvidia-smi > $R/nvidia-smi.txt 2>&1
export BOLT_CACHE_DIR=$W/cache
M=$R/models; mkdir -p $M
(timeout 150 bash $G/run.sh --phase build --out $M --build-timeout 140 --models bert_base; echo "[$(el)] bert build done") &
BP=$!
(cd $W/bench-pkg && timeout 60 bash gpu.sh --suites kernels --cases sm80/conv --budget-s 45 --out $R/kernels > $R/kernels.log 2>&1)
echo "[$(el)] kernels: $(grep -o '{"[^}]*}' $R/kernels.log | head -1)"
while [[ ! -f $G/testdata/bert_base/model.onnx ]] && (( $(left) > 100 )); do sleep 2; done
export CUTLASS_DIR=$G/cutlass
timeout $(( $(left) - 95 )) $G/bin/bolt-tune model $G/testdata/bert_base/model.onnx --precision f16 --dim batch=32 --dim seq=128 \
  --device h100 --arch sm90 --top-k 2 --db $R/tune-db.json --json $R/tune.json > $R/tune.log 2>&1
echo "[$(el)] tune rc=$?"; grep "bolt-tune:" $R/tune.log | tail -4
wait $BP
timeout 40 bash $G/run.sh --phase run --out $M --timeout 30 --torch-timeout 0 --models bert_base > /dev/null 2>&1
echo "[$(el)] analytic runs done"; grep -h "whole run" $M/models-logs/bert_base-f16.*graph.log
grep -h "LayerNorm" $M/models-logs/bert_base-f16.big.log | head -2
if [[ -s $R/tune-db.json ]] && (( $(left) > 55 )); then
  ln -s bert_base $G/inputs/bert_base_tuned
  echo 32 > $G/models/bert_base_tuned-f16.batch
  ( time timeout $(( $(left) - 35 )) $G/bin/bolt compile $G/testdata/bert_base/model.onnx --arch sm90 --precision f16 \
      --dim batch=1..32 --dim seq=128 --inputs $G/inputs/bert_base/inputs.npz --tuning-db $R/tune-db.json \
      -o $G/models/bert_base_tuned-f16 ) > $R/tuned-build.log 2>&1
  echo "[$(el)] tuned build rc=$? $(grep real $R/tuned-build.log)"
  grep -o "\"source\":\"[^\"]*\"" $G/models/bert_base_tuned-f16/plan.json | sort | uniq -c > $R/tuned-sources.txt
  for mode in biggraph big; do
    case $mode in big) x=(--check --oracle $G/inputs/bert_base/expected_b32.npz) ;; *) x=(--bench --graph) ;; esac
    timeout 25 $G/bin/bolt run $G/models/bert_base_tuned-f16 --device cuda --inputs $G/inputs/bert_base/inputs_b32.npz "${x[@]}" > $R/tuned-$mode.log 2>&1
    echo "[$(el)] tuned $mode rc=$?"; grep -h "whole run\|^ok\|MISMATCH" $R/tuned-$mode.log | head -2
  done
fi
cd /tmp && tar -czf $OUT/res.tgz res && echo "[$(el)] packed $(du -sh $OUT/res.tgz)"
