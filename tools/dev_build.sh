#!/usr/bin/env bash
# Developer build: configure once into build/dev and build the extension, which
# is then copied into llamapy/ so `python -c "import llamapy"` works from the
# checkout. Serialised with flock: several people (or agents) may share a tree.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build/dev"
mkdir -p "$root/build"
exec 9>"$root/build/.dev_build.lock"
flock 9
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -Dpybind11_DIR="$(python3 -m pybind11 --cmakedir)" -DPython_EXECUTABLE="$(command -v python3)" ${CMAKE_ARGS:-} >/dev/null
fi
cmake --build "$build" -j "${LP_JOBS:-2}"
