#!/usr/bin/env bash
# The release check: `python -m build` makes an sdist and, from it, a wheel; the wheel installs in a
# fresh virtualenv and passes the test suite shipped in the sdist (so a file MANIFEST.in forgot
# fails here, not on a user's machine).
#
#   bash tests/check_dist.sh               default build (OpenMP when the compiler has it)
#   bash tests/check_dist.sh --no-openmp   FASTLN_OPENMP=0: checks the wheel is single-threaded
#   ... --wheel-only    leaves out the shipped tests that build the sources with the system compiler
#                       (tests/test_native.py and tests/test_c_api.py: minutes each, and they test
#                       the source tree rather than the wheel; .ci/run's pytest has run them)
#
# Environment: PYTHON (default python3), for the build and for the fresh virtualenv.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
OPENMP=1
PYTEST_ARGS=()
for arg in "$@"; do
  case "$arg" in
    --no-openmp) OPENMP=0 ;;
    --wheel-only) PYTEST_ARGS=(--ignore=tests/test_native.py --ignore=tests/test_c_api.py) ;;
    *) echo "usage: $0 [--no-openmp] [--wheel-only]" >&2; exit 2 ;;
  esac
done

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

"$PY" -m venv "$WORK/venv"
VPY="$WORK/venv/bin/python"
"$VPY" -m pip install -q --upgrade pip build
echo "check_dist: python -m build (FASTLN_OPENMP=$OPENMP)"
FASTLN_OPENMP=$OPENMP "$VPY" -m build --outdir "$WORK/dist" "$ROOT" > "$WORK/build.log" 2>&1 ||
  { cat "$WORK/build.log"; exit 1; }
ls "$WORK/dist"

# A second, clean environment for the wheel: only what a user would install.
"$PY" -m venv "$WORK/test-venv"
TPY="$WORK/test-venv/bin/python"
"$TPY" -m pip install -q "$WORK"/dist/*.whl numpy pytest hypothesis
mkdir "$WORK/sdist"
tar xzf "$WORK"/dist/*.tar.gz -C "$WORK/sdist"
(cd "$WORK" && "$TPY" - "$OPENMP") <<'EOF'
import sys, fastln
info = fastln.runtime_info()
print("check_dist: installed", fastln.__file__, info)
if sys.argv[1] == "0":
    assert info["openmp"] is False and info["num_threads"] == 1, info
EOF
cd "$WORK"/sdist/*/
"$TPY" -m pytest -q -p no:cacheprovider ${PYTEST_ARGS[@]+"${PYTEST_ARGS[@]}"}
