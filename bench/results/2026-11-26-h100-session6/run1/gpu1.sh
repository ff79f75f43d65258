#!/usr/bin/env bash
# Device call 1 of session 6. Everything under $OUT/res, tarred at the end.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
DEADLINE=${DEADLINE:-530}
left() { echo $(( DEADLINE - $(el) )); }
R=/tmp/res; rm -rf $R; mkdir -p $R; exec > >(tee $R/run.log) 2>&1
W=/tmp/w; rm -rf $W; mkdir -p $W; tar -xJf target/gpu.tar.xz -C $W
echo "[$(el)] extracted"; git rev-parse HEAD > $R/repo-head.txt 2>/dev/null
nvidia-smi > $R/nvidia-smi.txt 2>&1; nvcc --version > $R/nvcc.txt 2>&1
python3 -c "import torch, onnxruntime; print(torch.__version__, onnxruntime.__version__)" >> $R/nvcc.txt 2>&1
# 1. the sm80 128x256x64 betac launch failures with eager module loading
(cd $W/bench-pkg && CUDA_MODULE_LOADING=EAGER timeout 70 bash gpu.sh --suites kernels --cases sm80/gemm/betac --out $R/betac-eager > $R/betac-eager.log 2>&1)
echo "[$(el)] betac eager: $(grep -o '{"[^}]*}' $R/betac-eager.log | head -1)"
if grep -q failed $R/betac-eager.log; then
  (cd $W/bench-pkg && CUDA_LAUNCH_BLOCKING=1 timeout 60 bash gpu.sh --suites kernels --cases sm80/gemm/betac_tanh,sm80/gemm/betac_clip --out $R/betac-blocking > $R/betac-blocking.log 2>&1)
  echo "[$(el)] betac blocking: $(grep -o '{"[^}]*}' $R/betac-blocking.log | head -1)"
fi
# 2. builds (CPU, nvcc) while PyTorch times on the otherwise idle GPU
export BOLT_CACHE_DIR=$W/cache
M=$R/models; mkdir -p $M/models-logs
(timeout 230 python3 $W/bench-gen/torch_e2e.py --models resnet50:32:f16,bert_base:32:f16 \
   --compile-modes reduce-overhead,max-autotune --deadline-s 150 --out $M/models-logs/torch_e2e.json \
   > $M/models-logs/torch_e2e.log 2>&1; echo "[$(el)] torch done rc=$?") &
TP=$!
timeout $(( $(left) - 150 )) bash $W/bench-gen/run.sh --phase build --out $M --build-timeout 150
echo "[$(el)] builds done"
wait $TP
# 3. runs (GPU)
timeout $(( $(left) - 70 )) bash $W/bench-gen/run.sh --phase run --out $M --timeout 60 --torch-timeout 0
echo "[$(el)] runs done"
# 4. ONNX Runtime + Bolt's cuda device, the same models, kernels from the same cache
if (( $(left) > 40 )); then
  timeout $(( $(left) - 10 )) python3 $W/bench-ort-gen/ctx.py run --out $R/ort > $R/ort.log 2>&1
  echo "[$(el)] ort rc=$?"; tail -5 $R/ort.log
fi
cp -r $W/bench-gen/models/*/report* $R/ 2>/dev/null
cd /tmp && tar -czf $OUT/res.tgz res && echo "[$(el)] packed $(du -sh $OUT/res.tgz)"
