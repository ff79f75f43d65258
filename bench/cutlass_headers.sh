#!/usr/bin/env bash
# Packs the CUTLASS headers kernel builds read into one xz tarball (about 1.1 MiB), for a
# machine that has nvcc but no CUTLASS (the GPU machine): extract it there and set CUTLASS_DIR.
#
#   bash bench/cutlass_headers.sh OUT.tar.xz
#
# The tree is the one the toolchain uses here (CUTLASS_DIR, else the pinned install): include/
# and tools/util/include/ (every unit) and the example directories some kernel families build
# from (codegen: b2b::EXAMPLE_DIR, sm80::GEMM_SOFTMAX_EXAMPLE_DIR, attention::EXAMPLE_DIR and
# SM90_EXAMPLE_DIR; tests/python/test_bench_models.py checks the list against them).
set -euo pipefail
[[ $# -eq 1 ]] || { echo "usage: bash bench/cutlass_headers.sh OUT.tar.xz" >&2; exit 2; }
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo build --release -q -p bolt --bin bolt
dir="$(target/release/bolt toolchain status | sed -n 's/^CUTLASS: *[^ ]* at \(.*\) (.*)$/\1/p')"
[[ -f $dir/include/cutlass/cutlass.h ]] || { echo "cutlass_headers.sh: no CUTLASS tree ($dir)" >&2; exit 2; }
tar -C "$dir" -cf - include tools/util/include examples/13_two_tensor_op_fusion examples/35_gemm_softmax \
    examples/41_fused_multi_head_attention examples/88_hopper_fmha | xz -T0 -6 > "$1"
