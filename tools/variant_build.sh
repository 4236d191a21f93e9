#!/usr/bin/env bash
# Builds the engine into a side build folder with the given CMake options and
# assembles DIR/pkg/llamapy: the checkout's Python sources (symlinked, so edits
# are live) beside that build's _engine module. For testing a configuration
# without replacing the developer build in llamapy/:
#   tools/variant_build.sh build/portable -DLLAMAPY_PORTABLE=ON
#   PYTHONPATH=build/portable/pkg LLAMAPY_ISA=avx2 python -m pytest tests/test_models.py
# Incremental: a second call rebuilds only what changed (the options of the
# first configure stay; delete DIR to change them).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 1 ] || { echo "usage: $0 DIR [cmake options...]" >&2; exit 2; }
dir=$(mkdir -p "$1" && cd "$1" && pwd)
shift
if [ ! -f "$dir/build/build.ninja" ]; then
  python -m pip install -q "pybind11>=2.12" ninja 2>/dev/null || true
  cmake -S "$root" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMAPY_DEV_COPY=OFF "$@" \
    -Dpybind11_DIR="$(python -m pybind11 --cmakedir)" -DPython_EXECUTABLE="$(command -v python)" >/dev/null
fi
cmake --build "$dir/build" -j "${LP_JOBS:-2}" >/dev/null
pkg="$dir/pkg/llamapy"
rm -rf "$pkg"
mkdir -p "$pkg"
for entry in "$root"/llamapy/*; do
  case "$(basename "$entry")" in _engine*|__pycache__) continue ;; esac
  ln -s "$entry" "$pkg/"
done
cp "$dir/build/"_engine*.so "$pkg/"
echo "$dir/pkg"
