#!/usr/bin/env bash
# neon_check.sh — the aarch64 NEON kernels, tested on an x86 machine:
# cross-builds the engine library and tests/cpp/kernel_check.cpp for aarch64
# (cmake/aarch64-linux-gnu.cmake, a portable build: armv8-a baseline, the
# dot-product kernels through target attributes) and runs the kernel check
# under qemu-aarch64 on two emulated CPUs:
#   -cpu max         has the dot product: checks the neon and neon_dot levels
#   -cpu cortex-a57  armv8.0, no dot product: the run-time pick must fall to
#                    the neon level (an SDOT there would be SIGILL)
# and twice more on -cpu max with LLAMAPY_ISA set: neon caps the pick at the
# neon level, avx2 (the other architecture's chain) leaves scalar.
# Each run compares every compiled SIMD level with the scalar references and
# must end in "N passed, 0 failed".
#
# Usage: bash tools/neon_check.sh [BUILD_DIR]   (default build/neon-check)
# Installs g++-aarch64-linux-gnu, qemu-user (and cmake / make if missing)
# with apt-get when run as root on Debian/Ubuntu. LP_JOBS sets build jobs (2).
# About 1-2 minutes of build and ~10 s of emulation on 2 cores.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-"$root/build/neon-check"}
sysroot=/usr/aarch64-linux-gnu

need=()
command -v aarch64-linux-gnu-g++ >/dev/null 2>&1 || need+=(g++-aarch64-linux-gnu)
command -v qemu-aarch64 >/dev/null 2>&1 || need+=(qemu-user)
command -v cmake >/dev/null 2>&1 || need+=(cmake)
if ! command -v ninja >/dev/null 2>&1 && ! command -v make >/dev/null 2>&1; then need+=(make); fi
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "neon_check: missing ${need[*]}; install them (Debian: apt-get install ${need[*]})" >&2
    exit 2
  fi
  echo "neon_check: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_TOOLCHAIN_FILE="$root/cmake/aarch64-linux-gnu.cmake" \
    -DLLAMAPY_ENGINE_ONLY=ON -DLLAMAPY_PORTABLE=ON >/dev/null
fi
echo "neon_check: cross-building the engine and the kernel check for aarch64"
nice cmake --build "$build" --target lp_kernel_check -j "${LP_JOBS:-2}" >/dev/null
bin="$build/lp_kernel_check"

status=0
run_on() {  # CPU, the best level that CPU must report[, LLAMAPY_ISA]
  local cpu=$1 want=$2 cap=${3:-} log="$build/kernel_check-$1${3:+-$3}.log"
  echo "neon_check: qemu-aarch64 -cpu $cpu${cap:+ (LLAMAPY_ISA=$cap)}"
  if ! LLAMAPY_ISA=$cap qemu-aarch64 -L "$sysroot" -cpu "$cpu" "$bin" >"$log" 2>&1; then
    grep -v '^PASS' "$log" >&2 || true
    echo "neon_check: FAILED on -cpu $cpu (full log: $log)" >&2
    status=1
    return
  fi
  if ! grep -q "this CPU runs up to $want\$" "$log"; then
    head -3 "$log" >&2
    echo "neon_check: -cpu $cpu should run up to $want" >&2
    status=1
    return
  fi
  # The level `want` was checked (a level found but never compared would
  # pass vacuously); scalar has nothing to compare.
  if [ "$want" != scalar ] && ! grep -q "^PASS vec_dot Q4_K $want " "$log"; then
    echo "neon_check: no $want checks on -cpu $cpu" >&2
    status=1
  fi
  tail -1 "$log"
}
run_on max neon_dot
run_on cortex-a57 neon
run_on max neon neon
run_on max scalar avx2
[ $status -eq 0 ] && echo "neon_check: OK"
exit $status
