#!/usr/bin/env bash
# Builds the native test program (tests/native/test_kernels.cpp + src/, no Python) and runs it.
#
#   bash tests/native/run.sh             native build, run here
#   bash tests/native/run.sh --aarch64   cross-compile with Debian's g++-aarch64-linux-gnu (static)
#                                        and run under qemu-aarch64; installs both if missing
#   bash tests/native/run.sh --aarch64-tools   only install those two, so that pytest's
#                                        tests/test_native.py runs the aarch64 build instead of skipping
#
# Environment: CXX (native compiler, default g++), FASTLN_OPENMP=0 (build without OpenMP),
# FASTLN_NATIVE_BUILD_DIR (default build/native-<arch> in the repository).
# Compiler flags follow setup.py: the baseline for every file, ISA flags for kernels_<isa>.cpp only.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TARGET=native
TOOLS_ONLY=0
case "${1:-}" in
  "") ;;
  --aarch64) [ "$(uname -m)" = aarch64 ] || TARGET=aarch64 ;;  # on an aarch64 host: native
  --aarch64-tools) TARGET=aarch64; TOOLS_ONLY=1 ;;
  *) echo "usage: $0 [--aarch64 | --aarch64-tools]" >&2; exit 2 ;;
esac

need_pkgs() {  # install Debian packages whose commands are missing
  local missing=()
  while [ $# -gt 0 ]; do
    command -v "$1" >/dev/null 2>&1 || missing+=("$2")
    shift 2
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "run.sh: installing ${missing[*]}" >&2
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
}

RUNNER=()
LDFLAGS=()
if [ "$TARGET" = aarch64 ]; then
  need_pkgs aarch64-linux-gnu-g++ g++-aarch64-linux-gnu qemu-aarch64 qemu-user
  [ "$TOOLS_ONLY" = 1 ] && exit 0
  CXX=aarch64-linux-gnu-g++
  ARCH=aarch64
  LDFLAGS=(-static)  # qemu-aarch64 then needs no aarch64 sysroot
  RUNNER=(qemu-aarch64)
else
  CXX="${CXX:-g++}"
  ARCH="$(uname -m)"
fi

BUILD="${FASTLN_NATIVE_BUILD_DIR:-$ROOT/build/native-$ARCH}"
mkdir -p "$BUILD"

CXXFLAGS=(-std=c++17 -O3 -ffp-contract=off -fvisibility=hidden -Wall -Wextra
          -I"$ROOT/include" -I"$ROOT/src")
OMP=()
if [ "${FASTLN_OPENMP:-1}" != 0 ] &&
   echo 'int main(){return 0;}' | "$CXX" -x c++ -fopenmp - -o "$BUILD/omp-probe" "${LDFLAGS[@]}" 2>/dev/null; then
  OMP=(-fopenmp)
fi

isa_flags() {
  case "$1:$ARCH" in
    kernels_avx2:x86_64) echo "-mavx2 -mfma -mf16c" ;;
    kernels_avx512:x86_64) echo "-mavx512f -mavx512vl -mavx512bw -mavx512dq -mfma -mf16c" ;;
  esac
}

OBJS=()
pids=()
for src in "$ROOT"/src/*.cpp "$ROOT"/tests/native/test_kernels.cpp; do
  base="$(basename "$src" .cpp)"
  obj="$BUILD/$base.o"
  werror=""
  [ "$base" = test_kernels ] && werror=-Werror  # the library's warnings show, the test's fail
  # shellcheck disable=SC2046
  "$CXX" "${CXXFLAGS[@]}" "${OMP[@]}" $(isa_flags "$base") $werror -c "$src" -o "$obj" &
  pids+=($!)
  OBJS+=("$obj")
done
for p in "${pids[@]}"; do wait "$p"; done
"$CXX" "${OBJS[@]}" "${OMP[@]}" "${LDFLAGS[@]}" -o "$BUILD/test_kernels"

echo "run.sh: $ARCH build with $CXX${OMP:+ -fopenmp}${RUNNER:+, running under ${RUNNER[*]}}"
exec "${RUNNER[@]}" "$BUILD/test_kernels"
