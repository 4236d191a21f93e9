#!/usr/bin/env bash
# gpu_vulkan.sh — issue 13's prepared check for a machine with a real GPU
# (lavapipe's speed means nothing): builds llamapy with the Vulkan backend,
# runs the op and model tests on the GPU, then times pp512 / tg128 on Gemma 3
# 270M (and any other GGUF given) fully offloaded (n_gpu_layers=-1) beside
# the CPU, and beside llama-cpp-python built with -DGGML_VULKAN=on when
# LCP_SITE names a site-packages folder holding such a build.
#
#   bash benchmarks/gpu_vulkan.sh [MODEL.gguf ...]
#   LCP_SITE=/tmp/lcp/site-vulkan bash benchmarks/gpu_vulkan.sh
#
# The 1B-shaped models: python benchmarks/synthetic_models.py writes them.
# Prints one line per (side, model, test): tokens/s, median of 3. Needs
# libvulkan-dev, glslc and the GPU's Vulkan driver. Record the results in
# benchmarks/RESULTS.md with the GPU, the driver and the date.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=${WORK:-$(mktemp -d)}
pkg=$("$root/tools/variant_build.sh" "$work" -DLLAMAPY_VULKAN=ON | tail -1)
PYTHONPATH="$pkg" python -c "import llamapy; print(llamapy.system_info()['devices'])"
PYTHONPATH="$pkg" python -m pytest -q -p no:cacheprovider "$root/tests/test_vulkan.py" \
  "$root/tests/test_backend_ops.py" "$root/tests/test_vulkan_models.py"
models=("$@")
if [ ${#models[@]} -eq 0 ]; then
  models=("$(PYTHONPATH="$pkg" python -c 'from llamapy.default_model import default_model_path; print(default_model_path())')")
fi
cat > "$work/speed.py" <<'EOF'
import statistics, sys, time
import numpy as np
side, path = sys.argv[1], sys.argv[2]
if side == "llama_cpp":
    from llama_cpp import Llama
else:
    from llamapy import Llama
ngl = 0 if side == "llamapy_cpu" else -1
llm = Llama(model_path=path, n_ctx=1024, n_batch=512, n_gpu_layers=ngl, verbose=False)
rng = np.random.default_rng(0)
toks = rng.integers(10, 20000, size=512).tolist()
def pp():
    llm.reset(); t = time.perf_counter(); llm.eval(toks); return 512 / (time.perf_counter() - t)
def tg():
    llm.reset(); llm.eval(toks[:1]); t = time.perf_counter()
    for i in range(128):
        llm.eval([toks[i + 1]])
    return 128 / (time.perf_counter() - t)
pp(); tg()  # warm-up: weights uploaded, pipelines built
for name, f in (("pp512", pp), ("tg128", tg)):
    print(f"{side:12s} {path.rsplit('/', 1)[-1]:40s} {name}: {statistics.median(f() for _ in range(3)):9.1f} tok/s",
          flush=True)
EOF
for m in "${models[@]}"; do
  PYTHONPATH="$pkg" python "$work/speed.py" llamapy_gpu "$m"
  PYTHONPATH="$pkg" python "$work/speed.py" llamapy_cpu "$m"
  if [ -n "${LCP_SITE:-}" ]; then PYTHONPATH="$LCP_SITE" python "$work/speed.py" llama_cpp "$m"; fi
done
