#!/usr/bin/env bash
# Builds the engine as a portable module without -march=native (scalar-only, or
# with the levels given as CMake options) and runs the kernel, model and API
# tests against it: proves the per-ISA target-attribute discipline and the
# scalar reference paths on a machine whose native build would hide them.
#   tools/portable_check.sh                      # scalar kernels only
#   tools/portable_check.sh -DLLAMAPY_AVX2=ON    # AVX2 level
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python -m pip install -q "pybind11>=2.12"
cmake -S "$root" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMAPY_DEV_COPY=OFF \
  -DLLAMAPY_NATIVE=OFF "$@" -Dpybind11_DIR="$(python -m pybind11 --cmakedir)" \
  -DPython_EXECUTABLE="$(command -v python)" >/dev/null
cmake --build "$work/build" -j "${LP_JOBS:-2}" >/dev/null
mkdir -p "$work/pkg"
cp -r "$root/llamapy" "$work/pkg/"
rm -f "$work/pkg/llamapy/"_engine*.so
cp "$work/build/"_engine*.so "$work/pkg/llamapy/"
cd "$work"
PYTHONPATH="$work/pkg" python -c "import llamapy; i = llamapy.system_info(); print('portable build:', i['build'], i['compiled_isas'])"
PYTHONPATH="$work/pkg" python -m pytest -q -p no:cacheprovider \
  "$root/tests/test_quants_float.py" "$root/tests/test_quants_legacy.py" "$root/tests/test_kquants.py" \
  "$root/tests/test_iquants.py" "$root/tests/test_models.py" "$root/tests/test_sampler.py"
