#!/usr/bin/env bash
# Builds the engine without -march=native with the given CMake options
# (default: scalar kernels only) and runs the kernel and model tests
# (tools/level_tests.txt) against it: proves the scalar reference paths and
# the per-ISA target-attribute discipline on a machine whose native build
# would hide a missing attribute.
#   tools/portable_check.sh                      # scalar kernels only
#   tools/portable_check.sh -DLLAMAPY_AVX2=ON    # AVX2 level only
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pkg=$("$root/tools/variant_build.sh" "$work" -DLLAMAPY_NATIVE=OFF "$@" 2>"$work/build.log" | tail -1) ||
  { tail -50 "$work/build.log"; exit 1; }
mapfile -t tests < <(grep -v '^#' "$root/tools/level_tests.txt" | sed "s|^|$root/|")
cd "$work"
PYTHONPATH="$pkg" python -c "import llamapy; i = llamapy.system_info(); print('portable build:', i['build'], i['compiled_isas'])"
PYTHONPATH="$pkg" python -m pytest -q -p no:cacheprovider -m "not model" "${tests[@]}"
