#!/usr/bin/env bash
# Device call 2 of session 6: the sm80 kernels under lazy loading after the unit-own epilogue
# types; ResNet-50 through ONNX Runtime after the bias-type fix; BERT-base after the row-base
# change in stitched kernels.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
R=/tmp/res; rm -rf $R; mkdir -p $R; exec > >(tee $R/run.log) 2>&1
W=/tmp/w; rm -rf $W; mkdir -p $W; tar -xJf target/gpu.tar.xz -C $W
echo "[$(el)] extracted"; nvidia-smi > $R/nvidia-smi.txt 2>&1
export BOLT_CACHE_DIR=$W/cache
M=$R/models; mkdir -p $M
# CPU: BERT-base's build; ONNX Runtime's ResNet-50 (generate, compile once, run) beside it.
(timeout 150 bash $W/bench-gen/run.sh --phase build --out $M --build-timeout 140 --models bert_base; echo "[$(el)] bert build done") &
BP=$!
(timeout 200 python3 $W/bench-ort-gen/ctx.py run --out $R/ort > $R/ort.log 2>&1; echo "[$(el)] ort rc=$?"; grep -v "W:onnx" $R/ort.log | tail -3) &
OP=$!
# GPU meanwhile: the sm80 kernels under CUDA's default (lazy) module loading.
(cd $W/bench-pkg && timeout 100 bash gpu.sh --suites kernels --cases sm80/ --budget-s 75 --out $R/kernels > $R/kernels.log 2>&1)
echo "[$(el)] kernels: $(grep -o '{"[^}]*}' $R/kernels.log | head -1)"
wait $BP; wait $OP
timeout 90 bash $W/bench-gen/run.sh --phase run --out $M --timeout 40 --torch-timeout 0 --models bert_base
echo "[$(el)] runs done"
grep -h "whole run" $M/models-logs/bert_base-f16.*graph.log
grep -h "LayerNorm" $M/models-logs/bert_base-f16.big.log | head -3
cd /tmp && tar -czf $OUT/res.tgz res && echo "[$(el)] packed $(du -sh $OUT/res.tgz)"
