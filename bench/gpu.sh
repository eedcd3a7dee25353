#!/usr/bin/env bash
# One run on a machine with an NVIDIA GPU (sm_80 or newer), nvcc, torch with CUDA and Cython, and no
# network: build fastln in place with its CUDA path, run the CUDA tests, and benchmark against
# torch's CUDA kernels and a device-to-device copy.
#
#   bash bench/gpu.sh [OUTDIR]        (default bench/out; 9.5 minutes at most: each phase is
#                                     time-boxed, build 4, tests 2, benchmark 3.3)
#
# Writes OUTDIR/{env.txt, build.log, runtime_info.json, tests.log, bench.log, gpu_bench.json,
# gpu_bench.md}. Each phase is time-boxed; a failed test run is reported but the benchmark still
# runs (its numbers are then marked as coming from a build whose tests failed).
set -euo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${1:-bench/out}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
T0=$(date +%s)
phase() { echo "== [$(($(date +%s) - T0))s] $*"; }

phase "environment"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv || true
  command -v nvcc && nvcc --version | tail -2
  "$PY" -c "import sys, numpy, torch, Cython; print(sys.version.split()[0], 'numpy', numpy.__version__, 'torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available(), 'Cython', Cython.__version__)"
  "$PY" -c "import cupy; print('cupy', cupy.__version__)" 2>/dev/null || echo "cupy: not installed"
} 2>&1 | tee "$OUTDIR/env.txt"

phase "build in place (FASTLN_CUDA=1: a CUDA build failure stops here)"
if ! FASTLN_CUDA=1 timeout 240 "$PY" setup.py build_ext --inplace -j 4 >"$OUTDIR/build.log" 2>&1; then
  tail -40 "$OUTDIR/build.log"
  echo "BUILD FAILED (log: $OUTDIR/build.log)"
  exit 1
fi
tail -3 "$OUTDIR/build.log"
"$PY" -c "import fastln, json; print(json.dumps(fastln.runtime_info(), indent=1))" | tee "$OUTDIR/runtime_info.json"
"$PY" -c "import fastln, sys; c = fastln.runtime_info()['cuda']; sys.exit(0 if c['available'] else 'CUDA path unavailable: ' + c['detail'])"

phase "CUDA tests"
TESTS=passed
if ! timeout 120 "$PY" -m pytest -q -p no:cacheprovider tests/test_cuda.py >"$OUTDIR/tests.log" 2>&1; then
  TESTS=FAILED
fi
tail -15 "$OUTDIR/tests.log"
echo "tests: $TESTS"

phase "benchmark"
BENCH=ok
if ! timeout 200 "$PY" bench/gpu_bench.py --out "$OUTDIR" --budget 170 2>&1 | tee "$OUTDIR/bench.log"; then
  BENCH=FAILED
fi

[ -f "$OUTDIR/gpu_bench.md" ] && echo "- CUDA tests in this run: $TESTS" >>"$OUTDIR/gpu_bench.md"

phase "done: tests $TESTS, benchmark $BENCH; results in $OUTDIR"
[ "$TESTS" = passed ] && [ "$BENCH" = ok ]
