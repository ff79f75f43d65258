#!/usr/bin/env bash
# Bolt's test command:  bash tests/run.sh [extra cargo test args, e.g. a test-name filter]
#
# Works on a fresh clone from any cwd. Sets up everything it needs, then runs every test:
#   1. .venv/            Python venv with the hash-pinned tests/python/requirements.txt
#   2. toolchain         CUDA/CUTLASS via bolt-toolchain (pinned, hash-checked)
#   3. testdata/         ONNX conformance cases + models with onnxruntime reference outputs
#   4. cargo test --workspace --release   (BOLT_TESTDATA, BOLT_PYTHON set)
#   5. cargo build of every target (benches, examples) with every feature (cuda, kernel-library)
#   6. cargo build --release -p bolt-plugin, then pytest tests/python
# Steps 1-3 skip work whose inputs are unchanged (stamp files), so reruns are cheap.
# Set-up failures stop the run at once; the test suites and the feature build always run,
# and the exit status is non-zero if any failed.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"
START=$SECONDS
trap 'rc=$?; echo; echo "== tests/run.sh: exit $rc after $((SECONDS - START))s total"' EXIT

section() { echo; echo "==== $* ($((SECONDS - START))s)"; }

# ---------------------------------------------------------------------------- 1. venv
section "python venv (.venv)"
REQ=tests/python/requirements.txt
# The lock file only has CPython 3.11 wheels: prefer that interpreter by name.
PY_BOOT="$(command -v python3.11 || command -v python3)"
WANT="$(sha256sum "$REQ" | cut -d' ' -f1) $("$PY_BOOT" -c 'import sys; print(sys.version.split()[0])')"
STAMP=.venv/.bolt-requirements.stamp
if [[ -x .venv/bin/python && -f $STAMP && "$(cat "$STAMP")" == "$WANT" ]]; then
    echo "up to date"
else
    # Rebuild from scratch rather than upgrade in place: the venv then holds exactly the lock.
    echo "creating .venv with $PY_BOOT and installing $REQ"
    rm -rf .venv
    "$PY_BOOT" -m venv .venv
    .venv/bin/python -m pip install -q --require-hashes -r "$REQ"
    echo "$WANT" > "$STAMP"
fi
PY="$ROOT/.venv/bin/python"
"$PY" -c 'import onnx, onnxruntime, numpy; print(f"onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__}, numpy {numpy.__version__}")'

# ----------------------------------------------------------------------- 2. toolchain
section "CUDA/CUTLASS toolchain"
cargo run --release -q -p bolt-cutlass --bin bolt-toolchain -- install

# ------------------------------------------------------------------------ 3. testdata
section "test data (testdata/)"
mkdir -p testdata
"$PY" tests/python/gen_conformance.py --out testdata/onnx-conformance
"$PY" tests/python/fetch_models.py --out testdata/models
"$PY" tests/python/make_models.py --out testdata/models
"$PY" tests/python/gen_legacy_opsets.py --out testdata/legacy-opsets

export BOLT_TESTDATA="$ROOT/testdata" BOLT_PYTHON="$PY" BOLT_REQUIRE_TESTDATA=1

# --------------------------------------------------------------------------- 4. cargo
section "cargo test --workspace --release $*"
cargo_rc=0
# --show-output prints the conformance report (passed / failed per op) and model errors.
cargo test --workspace --release "$@" -- --show-output || cargo_rc=$?

# ------------------------------------------------------- 5. every target and feature
section "cargo build --workspace --release --all-targets, every feature"
# What `cargo test` does not build: bench targets and the feature-gated code. `cuda` loads the
# driver at run time (cudarc's dynamic loading), so it builds on machines without a GPU or
# driver. `kernel-library` builds the candidate library with nvcc (42 sm80 kernels, several
# minutes cold on 2 cores), so CI builds a reduced one: BOLT_KERNEL_LIMIT kernels spread over
# the list, enough to compile the build script's code path and link. Measured: 7 min wall
# (3.6 min CPU) on a shared 2-core machine with the other test builds' dependencies warm.
build_rc=0
BOLT_KERNEL_LIMIT=2 cargo build --workspace --release --all-targets \
    --features bolt/cuda,bolt/kernel-library,bolt-profiler/cuda || build_rc=$?

# -------------------------------------------------------------------------- 6. pytest
section "pytest tests/python"
pytest_rc=0
# The ONNX Runtime plugin EP library that tests/python/test_ort_plugin.py loads, and the
# bolt command line the epilogue fuzzer (tests/python/test_fuzz_graphs.py) runs.
cargo build --release -q -p bolt-plugin || pytest_rc=$?
cargo build --release -q -p bolt --bin bolt || pytest_rc=$?
"$PY" -m pytest tests/python -q || pytest_rc=$?
if [[ $pytest_rc == 5 ]]; then echo "(no python tests collected)"; pytest_rc=0; fi

section "summary"
echo "cargo test:  $([[ $cargo_rc == 0 ]] && echo ok || echo "FAILED (exit $cargo_rc)")"
echo "cargo build: $([[ $build_rc == 0 ]] && echo ok || echo "FAILED (exit $build_rc)")"
echo "pytest:      $([[ $pytest_rc == 0 ]] && echo ok || echo "FAILED (exit $pytest_rc)")"
[[ $cargo_rc == 0 && $build_rc == 0 && $pytest_rc == 0 ]]
