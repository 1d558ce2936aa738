#!/usr/bin/env bash
# One prepared run on a machine with a CUDA GPU: the GPU tests, Lab 0.3's GPU cells on the reference
# answers, the two kernel benchmarks and the engine's decode on the GPU, in under 8 minutes, from the
# repository root, with only PyTorch, Triton, numpy and pytest installed (nothing of this project, no
# model file, no network). It prints each step as it runs and one table last, written to
# $OUT/gpu_check.md ($OUT set) or ./gpu_check.md. On a machine without a GPU it refuses in one line
# (exit code 2). What each step does: benchmarks/gpu_check.py. PYTHON picks the interpreter (python3).
set -u
cd "$(dirname "$0")/.." || exit 2
PYTHON="${PYTHON:-python3}"
if ! command -v "$PYTHON" > /dev/null 2>&1; then
    echo "gpu_check: refused: no $PYTHON on this machine's PATH (set PYTHON to the Python that has PyTorch); nothing was run" >&2
    exit 2
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
exec "$PYTHON" benchmarks/gpu_check.py "$@"
