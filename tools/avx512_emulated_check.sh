#!/usr/bin/env bash
# avx512_emulated_check.sh — the AVX-512 F32 / F16 kernels
# (vendor/engine/quants/float_tiles_avx512.cpp) checked on a machine without
# AVX-512: tests/cpp/avx512_emulated_check.cpp compiles them against SIMDe's
# portable _mm512 intrinsics and compares vec_dot, tiles, mat-vec and panels
# with each other (bits) and with a double-precision sum. Needs an x86-64 CPU
# with AVX2 + FMA + F16C (the emulation's own vectors). Says nothing about
# speed; on an AVX-512 CPU the Python tests run the real instructions.
#
# SIMDe >= 0.8 (0.7, Debian 12's libsimde-dev, lacks intrinsics the kernels
# use): SIMDE_DIR if set, else the headers of the simde-py package on PyPI,
# fetched once into the build folder with pip.
#
# Usage: bash tools/avx512_emulated_check.sh [BUILD_DIR]   (default build/avx512-emulated)
# Ends with "N passed, M failed"; exit status 1 on any failure. ~15 s.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-"$root/build/avx512-emulated"}
mkdir -p "$build"
simde=${SIMDE_DIR:-}
if [ -z "$simde" ]; then
  simde=$(find "$build/simde-py" -path '*/simde/x86/avx512.h' 2>/dev/null | head -1 || true)
  if [ -z "$simde" ]; then
    echo "avx512_emulated_check: fetching SIMDe headers (pip download simde-py)"
    rm -rf "$build/simde-py" && mkdir -p "$build/simde-py"
    python3 -m pip download -q --no-deps --no-binary :all: -d "$build/simde-py" "simde-py==0.8.2.post1"
    tar -xzf "$build"/simde-py/simde_py-*.tar.gz -C "$build/simde-py"
    simde=$(find "$build/simde-py" -path '*/simde/x86/avx512.h' | head -1)
  fi
  simde=$(dirname "$(dirname "$(dirname "$simde")")")
fi
if ! grep -q avx2 /proc/cpuinfo 2>/dev/null || ! grep -q f16c /proc/cpuinfo 2>/dev/null; then
  echo "avx512_emulated_check: this CPU lacks AVX2 / F16C; nothing to run" >&2
  exit 2
fi
bin="$build/avx512_emulated_check"
${CXX:-g++} -std=c++17 -O1 -Wall -Wextra -Wno-psabi -Wno-unused-parameter -ffp-contract=off \
  -mavx2 -mfma -mf16c -mbmi2 -mpopcnt -DLP_ENABLE_AVX2 -DLP_ENABLE_AVX512 \
  -I"$simde" -I"$root/vendor/engine" "$root/tests/cpp/avx512_emulated_check.cpp" -o "$bin"
"$bin"
